-- schedule-svg-and-cli.lua — the SVG is well-formed XML with one box per compute action, the
-- text table lists every compute, and `tegraph schedule` (cli) prints the table and the bubble.
local tap = require "tap"
local S = require "tegraph.schedule"

-- A small well-formedness check: balanced, properly nested tags, quoted attributes, known entities.
local function xml_ok(s)
  local stack, pos = {}, 1
  s = s:gsub("^<%?xml.-%?>", "")
  while true do
    local lt = s:find("<", pos, true)
    local text = s:sub(pos, (lt or #s + 1) - 1)
    for ent in text:gmatch("&([^;]*);?") do
      if not (ent == "amp" or ent == "lt" or ent == "gt" or ent == "quot" or ent == "apos") then
        return false, "bad entity &" .. ent
      end
    end
    if not lt then break end
    local gt = s:find(">", lt, true)
    if not gt then return false, "unterminated tag" end
    local tag = s:sub(lt + 1, gt - 1)
    if tag:sub(1, 1) == "/" then
      local name = tag:sub(2):match("^([%w:_-]+)%s*$")
      if not name or stack[#stack] ~= name then return false, "mismatched </" .. tostring(name) .. ">" end
      stack[#stack] = nil
    else
      local selfclose = tag:sub(-1) == "/"
      if selfclose then tag = tag:sub(1, -2) end
      local name, rest = tag:match("^([%w:_-]+)(.*)$")
      if not name then return false, "bad tag <" .. tag .. ">" end
      rest = rest:gsub('%s+[%w:_-]+="[^"<]*"', "")
      if rest:find("%S") then return false, "bad attributes in <" .. name .. ">: " .. rest end
      if not selfclose then stack[#stack + 1] = name end
    end
    pos = gt + 1
  end
  if #stack > 0 then return false, "unclosed <" .. stack[#stack] .. ">" end
  return true
end

local function count_boxes(svg)
  local n = {}
  for class in svg:gmatch('<rect class="(%w+)"') do n[class] = (n[class] or 0) + 1 end
  return n
end

local tmpdir = os.getenv("TMPDIR") or "/tmp"
local have_xmllint = os.execute("command -v xmllint >/dev/null 2>&1")

for _, case in ipairs({
  { "1f1b", S.one_f_one_b { stages = 4, microbatches = 8 } },
  { "zb_h1", S.zb_h1 { stages = 4, microbatches = 8 } },
  { "zb_v", S.zb_v { stages = 4, microbatches = 8 } },
  { "interleaved", S.interleaved { stages = 2, microbatches = 4, chunks_per_stage = 2 } },
}) do
  local name, plan = case[1], case[2]
  local file = string.format("%s/tegraph-schedule-%s-%d.svg", tmpdir, name, math.random(1, 1e9))
  local svg = S.svg(plan, file)
  local ok, why = xml_ok(svg)
  tap.ok(ok, name .. ": svg is well-formed XML")
  if not ok then tap.diag(why) end
  local want = { F = 0, B = 0, BW = 0, W = 0 }
  for s = 1, plan.stages do
    for _, a in ipairs(S.to_order(plan, s)) do
      local k = (a.op == "B" and a.w) and "BW" or a.op
      want[k] = want[k] + 1
    end
  end
  local got = count_boxes(svg)
  tap.is_deeply({ got.F or 0, got.B or 0, got.BW or 0, got.W or 0 }, { want.F, want.B, want.BW, want.W },
    name .. ": one box per compute action (F, B, B+W, W)")
  local f = io.open(file)
  tap.ok(f and f:read("a") == svg, name .. ": the same SVG was written to the file")
  if f then f:close() end
  if have_xmllint then
    tap.ok(os.execute("xmllint --noout '" .. file .. "'"), name .. ": xmllint accepts it")
  end
  os.remove(file)
end

local bad = "<svg><rect></svg>"
tap.ok(not xml_ok(bad), "the XML check itself rejects mismatched tags")

-- The text table: one line per stage, every compute named.
local plan = S.zb_h1 { stages = 2, microbatches = 2 }
local t = S.table(plan)
tap.like(t, "^zb_h1: 2 stages, 1 chunk per stage, 2 microbatches\n", "table: header line")
tap.like(t, "\nstage 1 | F1 F2 B1 W1 B2 W2\n", "table: stage 1 in order")
tap.like(t, "\nstage 2 | F1 B1 F2 B2 W1 W2\n", "table: stage 2 in order")
tap.like(S.table(plan, { comm = true }), "stage 1 | F1 +>f1c1@2", "table with comm: transfers shown")
tap.like(S.table(S.one_f_one_b { stages = 2, microbatches = 2 }), "%(B includes W%)", "table: fused B says so")
tap.like(S.table(S.zb_v { stages = 2, microbatches = 4 }), "stage 1 | F1c1 ", "table: chunk shown with several per stage")

-- The CLI, with stdout and stderr captured.
local function run_cli(args)
  local out, err = {}, {}
  local real_out, real_err = io.stdout, io.stderr
  io.stdout = { write = function(self, ...) for _, v in ipairs({ ... }) do out[#out + 1] = tostring(v) end return self end }
  io.stderr = { write = function(self, ...) for _, v in ipairs({ ... }) do err[#err + 1] = tostring(v) end return self end }
  local okc, status = pcall(S.cli, table.unpack(args))
  io.stdout, io.stderr = real_out, real_err
  if not okc then error(status) end
  return status, table.concat(out), table.concat(err)
end

local status, out = run_cli({ "1f1b", "--stages", "4", "--microbatches", "8" })
tap.is(status, 0, "cli 1f1b: status 0")
tap.like(out, "stage 4 | F1 B1 F2 B2", "cli 1f1b: prints the table")
tap.like(out, "bubble 0%.2727 %(27%.27%%%)", "cli 1f1b: prints the simulated bubble 3/11")
tap.like(out, "peak activations per stage: 4 3 2 1", "cli 1f1b: prints peak activations")

local svgfile = string.format("%s/tegraph-schedule-cli-%d.svg", tmpdir, math.random(1, 1e9))
status, out = run_cli({ "interleaved", "-p", "2", "-m", "4", "--chunks=2", "--svg", svgfile })
tap.is(status, 0, "cli interleaved with --svg: status 0")
tap.like(out, "bubble 0%.1111", "cli interleaved: bubble (P-1)/(VM+P-1) = 1/9")
local f = io.open(svgfile)
tap.ok(f and xml_ok(f:read("a")), "cli --svg wrote a well-formed SVG")
if f then f:close() end
os.remove(svgfile)

status, out = run_cli({ "all", "--stages", "4", "--microbatches", "8" })
tap.is(status, 0, "cli all: status 0")
tap.like(out, "\nzb_h1 +0%.1111 ", "cli all: lists zb_h1's bubble")
tap.like(out, "\nzb_v +0%.0588 ", "cli all: lists zb_v's bubble")

status, out = run_cli({ "zb_h1", "--stages", "4", "--microbatches", "8", "--costs", "F=1,B=1,W=1,comm=0" })
tap.like(out, "bubble 0%.1111", "cli --costs: equal costs give zb_h1's 1/9")
do
  local st, _, e = run_cli({ "1f1b", "--stages", "2", "--microbatches", "4", "--costs", "F=1,F=2" })
  tap.ok(st == 2 and e:find("--costs gives F twice", 1, true) ~= nil, "cli --costs: a cost given twice is a usage error naming it")
end

local err
status, out, err = run_cli({ "nosuch", "--stages", "4", "--microbatches", "8" })
tap.is(status, 2, "cli: unknown schedule is a usage error")
tap.like(err, "unknown schedule 'nosuch'", "cli: says which name is unknown")
status, out, err = run_cli({ "1f1b", "--stages", "4" })
tap.is(status, 2, "cli: missing --microbatches is a usage error")
status, out, err = run_cli({ "1f1b", "--stages", "x", "--microbatches", "4" })
tap.like(err, "%-%-stages must be a positive integer", "cli: bad number named")
status, out, err = run_cli({ "interleaved", "--stages", "4", "--microbatches", "6" })
tap.is(status, 2, "cli: generator misuse is a usage error")
tap.like(err, "^tegraph schedule: schedule%.interleaved: microbatches %(6%) must be a multiple of stages %(4%)",
  "cli: the generator's message shown, without the library file's position")
status, out, err = run_cli({ "all", "-p", "2", "-m", "4", "--svg", "never.svg" })
tap.is(status, 2, "cli all --svg: a usage error (it was ignored)")
tap.like(err, "%-%-svg draws one schedule's timeline, not 'all'", "cli all --svg: says why")
status, out = run_cli({ "--help" })
tap.is(status, 0, "cli --help: status 0")
tap.like(out, "^usage: tegraph schedule NAME", "cli --help: usage")

status, out, err = run_cli({ "interleaved", "-p", "2", "-m", "4", "-v", "1" })
tap.is(status, 2, "cli interleaved -v 1: a usage error")
tap.like(err, "^tegraph schedule: %-v must be >= 2 %(interleaved runs at least 2 chunks per stage%), got 1\nusage:",
  "cli interleaved -v 1: names -v, with the usage")
tap.ok(not err:find(".lua:", 1, true), "cli: a generator's refusal shows no internal file path")
status, out, err = run_cli({ "1f1b", "-p", "2", "-m", "4", "--svg", tmpdir .. "/no/such/dir/x.svg" })
tap.is(status, 1, "cli --svg into a missing directory: status 1")
tap.like(err, "^tegraph schedule: schedule%.svg: .*no/such/dir/x%.svg", "cli --svg: the error names the file, no internal path")
tap.is(out, "", "cli --svg: it fails before printing the table")

tap.done_testing()
