-- POST one message per request (QUEUEY_WRK_BODY: the message file), or a batch
-- (QUEUEY_WRK_BATCH = messages per request) to {url}/batch.
package.path = os.getenv("QUEUEY_WRK_DIR") .. "/?.lua;" .. package.path
local report = require("report")

local batch = tonumber(os.getenv("QUEUEY_WRK_BATCH") or "0")
local body = report.read_file(os.getenv("QUEUEY_WRK_BODY"))

setup = report.setup
done = report.done

function init(args)
  units, failures, empty = 0, 0, 0
  local path = wrk.path
  if batch > 0 then
    local parts = {}
    for i = 1, batch do
      parts[i] = '{"body":' .. body .. '}'
    end
    body = '{"messages":[' .. table.concat(parts, ",") .. ']}'
    path = path .. "/batch"
  end
  request_bytes = wrk.format("POST", path, report.headers, body)
end

function request()
  return request_bytes
end

function response(status, headers, body)
  if not report.refused(status, 201) then
    units = units + (batch > 0 and batch or 1)
  end
end
