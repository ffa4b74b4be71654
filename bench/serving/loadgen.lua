-- wrk script of bench.serving.loadgen: every connection POSTs one JSON body at a time (closed loop), taking the bodies
-- in turn from the file named after `--` (one per line). A response counts as ok when it is HTTP 200 and holds
-- "translatedText". At the end it prints the first few failures as "error: ..." lines, then one JSON line.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  bodies = {}
  for line in io.lines(args[1]) do
    bodies[#bodies + 1] = line
  end
  turn, ok, failed, examples = 0, 0, 0, ""
  headers = { ["Content-Type"] = "application/json" }
end

function request()
  turn = turn % #bodies + 1
  return wrk.format("POST", nil, headers, bodies[turn])
end

function response(status, _, body)
  if status == 200 and body:find('"translatedText"', 1, true) then
    ok = ok + 1
  else
    failed = failed + 1
    if failed <= 3 then
      examples = examples .. "error: HTTP " .. status .. ": " .. body:sub(1, 200):gsub("\n", " ") .. "\n"
    end
  end
end

function done(summary, latency, _)
  local ok_total, failed_total = 0, 0
  for _, thread in ipairs(threads) do
    ok_total = ok_total + thread:get("ok")
    failed_total = failed_total + thread:get("failed")
    io.write(thread:get("examples"))
  end
  local e = summary.errors
  io.write(string.format(
    '{"ok": %d, "failed": %d, "socket_errors": %d, "seconds": %.3f, "p50": %.1f, "p95": %.1f, "p99": %.1f}\n',
    ok_total, failed_total, e.connect + e.read + e.write + e.timeout, summary.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(95) / 1000, latency:percentile(99) / 1000))
end
