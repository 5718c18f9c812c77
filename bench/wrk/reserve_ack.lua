-- A worker per connection (run with as many threads as connections): reserve
-- up to QUEUEY_WRK_LIMIT messages, then ack every receipt it got, and again.
-- Counts acked messages; an empty reserve (the queue ran dry) is counted apart.
package.path = os.getenv("QUEUEY_WRK_DIR") .. "/?.lua;" .. package.path
local report = require("report")

local limit = tonumber(os.getenv("QUEUEY_WRK_LIMIT") or "100")

setup = report.setup
done = report.done

function init(args)
  units, failures, empty = 0, 0, 0
  reserve_request = wrk.format(
    "POST", wrk.path .. "/reserve", report.headers, '{"limit":' .. limit .. '}')
  pending_ack = nil
end

function request()
  if pending_ack then
    local ack = pending_ack
    pending_ack = nil
    return ack
  end
  return reserve_request
end

function response(status, headers, body)
  if report.refused(status, 200) then
    return
  end
  local acked = string.match(body, '"acked":(%d+)')
  if acked then
    units = units + tonumber(acked)
    return
  end
  local receipts = {}
  for receipt in string.gmatch(body, '"receipt":("[^"]+")') do
    receipts[#receipts + 1] = receipt
  end
  if #receipts == 0 then
    empty = empty + 1
    return
  end
  pending_ack = wrk.format(
    "POST", wrk.path .. "/ack", report.headers,
    '{"receipts":[' .. table.concat(receipts, ",") .. ']}')
end
