-- wrk script for bench/run.sh rest. Environment:
--   MG_TOKEN     peer token, sent as Authorization: Bearer (empty: no header)
--   MG_METHOD    GET (default) or POST (sends a job as JSON)
--   MG_DELAY_MS  pause per connection between requests (0 = closed loop, as fast as possible)
--   MG_JITTER    spread of that pause, as a fraction of it (0.5: uniform in 0.5-1.5 x MG_DELAY_MS, the same mean;
--                0 = every connection waits exactly MG_DELAY_MS)
local token = os.getenv("MG_TOKEN") or ""
local method = os.getenv("MG_METHOD") or "GET"
local delay_ms = tonumber(os.getenv("MG_DELAY_MS") or "0")
local jitter = tonumber(os.getenv("MG_JITTER") or "0")

wrk.method = method
if token ~= "" then wrk.headers["Authorization"] = "Bearer " .. token end
if method == "POST" then
  wrk.headers["Content-Type"] = "application/json"
  wrk.body = '{"name":"bench job","payment":12.5,"notes":"created by wrk"}'
end

if delay_ms > 0 and jitter > 0 then
  -- Independent clients: without a spread, connections answered in one burst all send their next request in the
  -- same instant again, so the arrivals stay lock-stepped to the server's own batching.
  function init(args) math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16)) end
  function delay() return math.floor(delay_ms * (1 - jitter + 2 * jitter * math.random()) + 0.5) end
elseif delay_ms > 0 then
  function delay() return delay_ms end
end

local statuses = {}
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  -- per-thread status counts are not shared with done(); wrk prints Non-2xx itself
end
