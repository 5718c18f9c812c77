-- GET {url}?limit=N&partitions=P, P cycling over QUEUEY_WRK_PARTITIONS; counts
-- the messages each answer holds.
package.path = os.getenv("QUEUEY_WRK_DIR") .. "/?.lua;" .. package.path
local report = require("report")

local limit = tonumber(os.getenv("QUEUEY_WRK_LIMIT") or "1000")
local partitions = tonumber(os.getenv("QUEUEY_WRK_PARTITIONS") or "8")

setup = report.setup
done = report.done

function init(args)
  units, failures, empty = 0, 0, 0
  turn = math.random(partitions)
end

function request()
  turn = turn % partitions + 1
  return wrk.format("GET", wrk.path .. "?limit=" .. limit .. "&partitions=" .. turn, report.headers)
end

function response(status, headers, body)
  if report.refused(status, 200) then
    return
  end
  local _, count = string.gsub(body, '"message_id":', "")
  units = units + count
  if count == 0 then
    empty = empty + 1
  end
end
