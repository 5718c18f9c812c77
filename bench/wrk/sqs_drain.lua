-- A worker per connection (run with as many threads as connections), through
-- SQS's JSON protocol: ReceiveMessage (up to QUEUEY_WRK_LIMIT messages, no
-- wait), then DeleteMessageBatch of every receipt handle it got, and again;
-- each request signed afresh (AWS Signature V4, sigv4.lua) at the current time.
-- QUEUEY_SQS_QUEUE_URL: the queue; QUEUEY_SQS_ACCESS_KEY / QUEUEY_SQS_SECRET:
-- the credentials. Counts deleted messages; an empty receive (the queue ran
-- dry) is counted apart, as reserve_ack.lua does.
package.path = os.getenv("QUEUEY_WRK_DIR") .. "/?.lua;" .. package.path
local report = require("report")
local sigv4 = require("sigv4")

local limit = tonumber(os.getenv("QUEUEY_WRK_LIMIT") or "10")
local queue_url = assert(os.getenv("QUEUEY_SQS_QUEUE_URL"), "QUEUEY_SQS_QUEUE_URL is not set")
local access_key = os.getenv("QUEUEY_SQS_ACCESS_KEY") or report.headers["X-Application-Name"]
local secret = os.getenv("QUEUEY_SQS_SECRET") or "bench-sqs-secret"
local region = os.getenv("QUEUEY_SQS_REGION") or "us-east-1"

local receive_body = '{"QueueUrl":"' .. queue_url .. '","MaxNumberOfMessages":' .. limit ..
  ',"WaitTimeSeconds":0}'

setup = report.setup
done = report.done

function init(args)
  units, failures, empty = 0, 0, 0
  signer = sigv4.signer(access_key, secret, region, "sqs")
  pending_delete = nil
end

local function signed(action, body)
  return sigv4.sqs_request(signer, action, body, os.time())
end

function request()
  if pending_delete then
    local body = pending_delete
    pending_delete = nil
    return signed("DeleteMessageBatch", body)
  end
  return signed("ReceiveMessage", receive_body)
end

function response(status, headers, body)
  if report.refused(status, 200) then
    return
  end
  -- A DeleteMessageBatch answer: {"Successful": [{"Id": ...}, ...], "Failed": [...]}.
  local count, failed = sigv4.batch_answer(body, "Id")
  if count then
    units = units + count
    if failed then
      failures = failures + 1
    end
    return
  end
  -- A ReceiveMessage answer. Queuey's receipt handles ("<partition>-<message
  -- id in hex>-<lease token in hex>") hold nothing JSON escapes, so each is
  -- copied as it came; a message's body is a JSON string whose quotes are
  -- escaped, so it cannot hold the unescaped '"ReceiptHandle":"' matched here.
  local entries = {}
  for handle in string.gmatch(body, '"ReceiptHandle"%s*:%s*"([^"]+)"') do
    entries[#entries + 1] = '{"Id":"' .. #entries .. '","ReceiptHandle":"' .. handle .. '"}'
  end
  if #entries == 0 then
    empty = empty + 1
    return
  end
  pending_delete = '{"QueueUrl":"' .. queue_url .. '","Entries":[' ..
    table.concat(entries, ",") .. ']}'
end
