-- GET the url as it is; every 200 counts.
package.path = os.getenv("QUEUEY_WRK_DIR") .. "/?.lua;" .. package.path
local report = require("report")

setup = report.setup
done = report.done

function init(args)
  units, failures, empty = 0, 0, 0
  request_bytes = wrk.format("GET", wrk.path, report.headers)
end

function request()
  return request_bytes
end

function response(status, headers, body)
  if not report.refused(status, 200) then
    units = units + 1
  end
end
