-- SQS SendMessageBatch through the JSON protocol, each request signed afresh
-- (AWS Signature V4, sigv4.lua) at the current time, as an SDK signs every call.
-- QUEUEY_WRK_BODY: the request body (the QueueUrl and its entries, written by
-- bench/sqs.py); QUEUEY_SQS_ACCESS_KEY / QUEUEY_SQS_SECRET: the credentials.
-- Counts the entries the answers list as successful. QUEUEY_WRK_SIGN_AT (seconds
-- since the epoch) signs at that time instead, and QUEUEY_WRK_SHOW writes the
-- first request to that file: the check of the signer against botocore.
package.path = os.getenv("QUEUEY_WRK_DIR") .. "/?.lua;" .. package.path
local report = require("report")
local sigv4 = require("sigv4")

local body = report.read_file(os.getenv("QUEUEY_WRK_BODY"))
local access_key = os.getenv("QUEUEY_SQS_ACCESS_KEY") or report.headers["X-Application-Name"]
local secret = os.getenv("QUEUEY_SQS_SECRET") or "bench-sqs-secret"
local region = os.getenv("QUEUEY_SQS_REGION") or "us-east-1"
local sign_at = tonumber(os.getenv("QUEUEY_WRK_SIGN_AT") or "")
local show = os.getenv("QUEUEY_WRK_SHOW")

setup = report.setup
done = report.done

function init(args)
  units, failures, empty = 0, 0, 0
  signer = sigv4.signer(access_key, secret, region, "sqs")
end

function request()
  local bytes = sigv4.sqs_request(signer, "SendMessageBatch", body, sign_at or os.time())
  if show then
    local file = assert(io.open(show, "wb"))
    file:write(bytes)
    file:close()
    show = nil
  end
  return bytes
end

function response(status, headers, body)
  if report.refused(status, 200) then
    return
  end
  local count, failed = sigv4.batch_answer(body, "MessageId")
  units = units + (count or 0)
  if failed then
    failures = failures + 1
  end
end
