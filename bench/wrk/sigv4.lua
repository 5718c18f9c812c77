-- AWS Signature Version 4 for the wrk scripts of the SQS endpoint (JSON
-- protocol): SHA-256 as FIPS 180-4 describes it, HMAC-SHA256 (RFC 2104), and
-- the signer of a POST whose headers are Host, Content-Type, X-Amz-Target and
-- X-Amz-Date, all of them signed. Written for LuaJIT 2.1 (its `bit` library:
-- 32-bit operations whose results are signed numbers).
local bit = require("bit")
local band, bor, bxor, bnot = bit.band, bit.bor, bit.bxor, bit.bnot
local lshift, rshift, ror, tobit, tohex = bit.lshift, bit.rshift, bit.ror, bit.tobit, bit.tohex
local byte, char, rep, format = string.byte, string.char, string.rep, string.format
local concat, floor = table.concat, math.floor

local sigv4 = {}

-- FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the cube
-- roots of the first 64 primes.
local K = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}
-- 5.3.3: the first 32 bits of the fractional parts of the square roots of the
-- first 8 primes.
local H0 = {
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
}
for i = 1, #K do
  K[i] = tobit(K[i])
end
for i = 1, #H0 do
  H0[i] = tobit(H0[i])
end

local W = {} -- the message schedule, reused (one Lua state per wrk thread)

-- 6.2.2: one 64-byte block of `s`, starting after byte `offset`, into `H`.
local function compress(H, s, offset)
  for t = 0, 15 do
    local b1, b2, b3, b4 = byte(s, offset + 1, offset + 4)
    W[t] = bor(lshift(b1, 24), lshift(b2, 16), lshift(b3, 8), b4)
    offset = offset + 4
  end
  for t = 16, 63 do
    local w15, w2 = W[t - 15], W[t - 2]
    local sigma0 = bxor(ror(w15, 7), ror(w15, 18), rshift(w15, 3))
    local sigma1 = bxor(ror(w2, 17), ror(w2, 19), rshift(w2, 10))
    W[t] = tobit(sigma1 + W[t - 7] + sigma0 + W[t - 16])
  end
  local a, b, c, d, e, f, g, h = H[1], H[2], H[3], H[4], H[5], H[6], H[7], H[8]
  for t = 0, 63 do
    local big_sigma1 = bxor(ror(e, 6), ror(e, 11), ror(e, 25))
    local choose = bxor(band(e, f), band(bnot(e), g))
    local t1 = h + big_sigma1 + choose + K[t + 1] + W[t]
    local big_sigma0 = bxor(ror(a, 2), ror(a, 13), ror(a, 22))
    local majority = bxor(band(a, b), band(a, c), band(b, c))
    h, g, f, e = g, f, e, tobit(d + t1)
    d, c, b, a = c, b, a, tobit(t1 + big_sigma0 + majority)
  end
  H[1], H[2], H[3], H[4] = tobit(H[1] + a), tobit(H[2] + b), tobit(H[3] + c), tobit(H[4] + d)
  H[5], H[6], H[7], H[8] = tobit(H[5] + e), tobit(H[6] + f), tobit(H[7] + g), tobit(H[8] + h)
end

-- The 8 words of the digest of `message` (a byte string).
local function digest_words(message)
  local length = #message
  local bits = length * 8
  -- 5.1.1: a 1 bit, zeros up to 56 bytes mod 64, the length in bits (64-bit big endian).
  local high, low = floor(bits / 0x100000000), bits % 0x100000000
  local padded = message .. "\128" .. rep("\0", (55 - length) % 64) .. char(
    band(rshift(high, 24), 255), band(rshift(high, 16), 255),
    band(rshift(high, 8), 255), band(high, 255),
    band(rshift(low, 24), 255), band(rshift(low, 16), 255),
    band(rshift(low, 8), 255), band(low, 255))
  local H = { H0[1], H0[2], H0[3], H0[4], H0[5], H0[6], H0[7], H0[8] }
  for offset = 0, #padded - 64, 64 do
    compress(H, padded, offset)
  end
  return H
end

-- SHA-256 of `message`: 32 raw bytes.
function sigv4.sha256(message)
  local H = digest_words(message)
  local out = {}
  for i = 1, 8 do
    local h = H[i]
    out[i] = char(band(rshift(h, 24), 255), band(rshift(h, 16), 255),
      band(rshift(h, 8), 255), band(h, 255))
  end
  return concat(out)
end

-- SHA-256 of `message`: 64 lowercase hex digits.
function sigv4.sha256_hex(message)
  local H = digest_words(message)
  return tohex(H[1], 8) .. tohex(H[2], 8) .. tohex(H[3], 8) .. tohex(H[4], 8) ..
    tohex(H[5], 8) .. tohex(H[6], 8) .. tohex(H[7], 8) .. tohex(H[8], 8)
end

-- Lowercase hex of a byte string.
function sigv4.hex(data)
  return (data:gsub(".", function(c)
    return format("%02x", byte(c))
  end))
end

local function xor_pad(key, value)
  local out = {}
  for i = 1, 64 do
    out[i] = char(bxor(byte(key, i), value))
  end
  return concat(out)
end

-- RFC 2104 with SHA-256 (64-byte blocks): 32 raw bytes.
function sigv4.hmac_sha256(key, message)
  if #key > 64 then
    key = sigv4.sha256(key)
  end
  key = key .. rep("\0", 64 - #key)
  local inner = sigv4.sha256(xor_pad(key, 0x36) .. message)
  return sigv4.sha256(xor_pad(key, 0x5c) .. inner)
end

local function hmac_hex(key, message)
  return sigv4.hex(sigv4.hmac_sha256(key, message))
end

-- The key a day's signatures are made with:
-- HMAC(HMAC(HMAC(HMAC("AWS4" .. secret, date), region), service), "aws4_request").
function sigv4.signing_key(secret, date, region, service)
  local key = sigv4.hmac_sha256("AWS4" .. secret, date)
  key = sigv4.hmac_sha256(key, region)
  key = sigv4.hmac_sha256(key, service)
  return sigv4.hmac_sha256(key, "aws4_request")
end

local function trim(value)
  return (tostring(value):gsub("^%s+", ""):gsub("%s+$", ""):gsub("%s+", " "))
end

-- A signer for one access key: signer:sign(method, path, headers, body, now)
-- adds X-Amz-Date and Authorization to `headers` (a table of name -> value
-- holding at least Host) and signs every header in it. `path` is the request
-- path as sent ("/" for the SQS JSON protocol: no query string); `now` is
-- seconds since the epoch (os.time()).
-- A wrk request of SQS's JSON protocol running ``action`` with ``body``,
-- signed by ``signer`` at ``when`` (epoch seconds) over every header it sends.
function sigv4.sqs_request(signer, action, body, when)
  local headers = signer:sign("POST", wrk.path, {
    ["Host"] = wrk.headers["Host"],
    ["Content-Type"] = "application/x-amz-json-1.0",
    ["X-Amz-Target"] = "AmazonSQS." .. action,
  }, body, when)
  return wrk.format("POST", wrk.path, headers, body)
end

-- A batch answer's count of "Successful" entries (each holding ``field``), and
-- whether any entry failed.
function sigv4.batch_answer(body, field)
  local successful = string.match(body, '"Successful"%s*:%s*(%b[])')
  if not successful then
    return nil, false
  end
  local _, count = string.gsub(successful, '"' .. field .. '"%s*:', "")
  return count, string.find(body, '"Failed"%s*:%s*%[%s*{') ~= nil
end

function sigv4.signer(access_key, secret, region, service)
  local self = { access_key = access_key, secret = secret, region = region or "us-east-1",
    service = service or "sqs", keys = {} }

  function self:key(date)
    local key = self.keys[date]
    if not key then
      -- One day's key at a time: the cache never grows.
      self.keys = { [date] = sigv4.signing_key(self.secret, date, self.region, self.service) }
      key = self.keys[date]
    end
    return key
  end

  function self:sign(method, path, headers, body, now)
    local amz_date = os.date("!%Y%m%dT%H%M%SZ", now)
    local date = amz_date:sub(1, 8)
    headers["X-Amz-Date"] = amz_date
    local names, values = {}, {}
    for name, value in pairs(headers) do
      local lowered = name:lower()
      if lowered ~= "authorization" then
        names[#names + 1] = lowered
        values[lowered] = trim(value)
      end
    end
    table.sort(names)
    local canonical_headers = {}
    for i, name in ipairs(names) do
      canonical_headers[i] = name .. ":" .. values[name] .. "\n"
    end
    local signed_headers = concat(names, ";")
    local canonical_request = method .. "\n" .. path .. "\n" .. "\n" ..
      concat(canonical_headers) .. "\n" .. signed_headers .. "\n" .. sigv4.sha256_hex(body or "")
    local scope = date .. "/" .. self.region .. "/" .. self.service .. "/aws4_request"
    local string_to_sign = "AWS4-HMAC-SHA256\n" .. amz_date .. "\n" .. scope .. "\n" ..
      sigv4.sha256_hex(canonical_request)
    local signature = hmac_hex(self:key(date), string_to_sign)
    headers["Authorization"] = "AWS4-HMAC-SHA256 Credential=" .. self.access_key .. "/" ..
      scope .. ", SignedHeaders=" .. signed_headers .. ", Signature=" .. signature
    return headers
  end

  return self
end

return sigv4
