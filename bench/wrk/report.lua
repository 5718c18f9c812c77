-- Shared by the wrk scripts of bench/http.py: credentials from the environment,
-- per-thread counters, and one JSON line of results when the run is done.
local report = {}

report.headers = {
  ["X-Application-Name"] = os.getenv("QUEUEY_WRK_APP") or "bench",
  ["ApplicationKey"] = os.getenv("QUEUEY_WRK_KEY") or "bench-key",
  ["Content-Type"] = "application/json",
}

function report.read_file(path)
  local file = assert(io.open(path, "rb"))
  local data = file:read("*a")
  file:close()
  return data
end

-- Counts an answer whose status is not the expected one as a failure; true then.
function report.refused(status, expected)
  if status ~= expected then
    failures = failures + 1
    return true
  end
  return false
end

-- Every thread's Lua state, to sum the counters each one keeps.
local threads = {}

function report.setup(thread)
  table.insert(threads, thread)
end

-- One line of JSON on stdout: what wrk measured, plus the scripts' counters.
function report.done(summary, latency, requests)
  local sums = { units = 0, failures = 0, empty = 0 }
  for _, thread in ipairs(threads) do
    for name, _ in pairs(sums) do
      sums[name] = sums[name] + (thread:get(name) or 0)
    end
  end
  local errors = summary.errors
  io.write(string.format(
    '{"wrk": {"duration_us": %d, "requests": %d, "bytes": %d, "units": %d, ' ..
    '"failures": %d, "empty": %d, "socket_errors": %d, "status_errors": %d, ' ..
    '"timeouts": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}}\n',
    summary.duration, summary.requests, summary.bytes, sums.units, sums.failures,
    sums.empty, errors.connect + errors.read + errors.write, errors.status,
    errors.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max))
end

return report
