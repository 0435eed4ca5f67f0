-- holds.lua: a wrk script for `loadtest holds`. Every request is a hold of
-- a new user: POST <path> {"quantity":1} with the next queue token of the
-- tokens file and an Idempotency-Key of its own.
--
-- args[1] -> the tokens file: one signed queue token a line, each of a
--            distinct user; thread t of n takes lines t, t+n, t+2n, ...
-- args[2] -> the holds path (/v1/events/{id}/holds)
-- args[3] -> the queue token's header name
-- args[4] -> the number of wrk threads (-t)
-- returns    nothing; once a thread has used all its tokens it sends its
--            requests without one, and the 401 answers count as wrk's
--            non-2xx responses: the run had too few tokens.

local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

function init(args)
  local file, path, n = args[1], args[2], tonumber(args[4])
  header = args[3]
  tokens = {}
  local line = 0
  for tok in io.lines(file) do
    if line % n == tid then
      tokens[#tokens + 1] = tok
    end
    line = line + 1
  end
  sent = 0
  body = '{"quantity":1}'
  holds = path
  prefix = "wrk-" .. tid .. "-" .. tostring(os.time()) .. "-"
end

function request()
  sent = sent + 1
  local headers = {
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = prefix .. sent,
  }
  local tok = tokens[sent]
  if tok ~= nil then
    headers[header] = tok
  end
  return wrk.format("POST", holds, headers, body)
end
