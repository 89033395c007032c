-- checkpoint-options-and-files-are-checked.lua — checkpoint.save and load check their options (a table, known
-- keys, types and ranges) before anything is written or read, at the caller's line; a checkpoint missing its
-- model file, a `latest` naming a step that is not there, a missing rank file and a truncated one are each
-- reported as what they are, naming the file; bad metadata (step, world_size, RNG state, the optimizer's values
-- and kind) is refused naming the file and the field before anything is loaded; keep never removes the
-- checkpoint just written.
local tap = require "tap"
local caller = require "caller"
local here, at, exists = caller.here, caller.at, caller.exists
local tg = require "tegraph"
local ck = require "tegraph.checkpoint"
local ex = require "run_example"

local base = ex.tmpdir()
local m = tg.nn.Linear(4, 2)
local line

-- options refused before anything is written
for _, c in ipairs {
  { nil, "checkpoint%.save: an options table {model= or params=, step=, %.%.%.} is required, got nil", "no options" },
  { { model = m, step = 1, kep = 2 }, "checkpoint%.save: unknown option 'kep' %(known: comm, config, fp8_modules, " ..
    "keep, layout, model, model_file, optimizer, params, state, step, writes_model%)", "a misspelt keep" },
  { { model = m, step = 1, optimiser = 1 }, "unknown option 'optimiser'", "optimiser for optimizer" },
  { { model = m, step = 1, keep = "2" }, "checkpoint%.save: keep must be an integer >= 0 %(0: keep all%), got the " ..
    "string '2'", "keep = \"2\"" },
  { { model = m, step = 1, keep = -1 }, "keep must be an integer >= 0 %(0: keep all%), got %-1", "keep = -1" },
  { { model = m, step = 1, config = { f = print } }, "checkpoint%.save: config%.f is a function %(values are strings, " ..
    "numbers or booleans%)", "a config value that is a function" },
  { { model = m, step = 1, state = { t = { 1, 2 } } }, "checkpoint%.save: state%.t is a table", "a state value that is a table" },
  { { model = m, step = 1, layout = 3 }, "checkpoint%.save: layout must be a non%-empty string, got number", "layout = 3" },
  { { model = m, step = 1, writes_model = 1 }, "writes_model must be a boolean", "writes_model = 1" },
  { { model = 42, step = 1 }, "checkpoint%.save: model must be a module or model", "model = 42" },
  { { params = { 1, 2 }, step = 1 }, "checkpoint%.save: params%[1%] is a number, not a parameter", "params = {1, 2}" },
} do
  local dir = base .. "/s" .. _
  local err = tap.error_like(function() line = here(); ck.save(dir, c[1]) end, c[2], "save, " .. c[3] .. ": refused")
  tap.like(err, at(line), "... at the caller's line")
  tap.ok(not exists(dir .. "/latest") and not exists(dir .. "/step_00000001/rank0.safetensors"), "... before writing")
end

-- a good checkpoint, then load's options
local good = base .. "/good"
ck.save(good, { model = m, step = 3 })
tap.ok(exists(good .. "/step_00000003/model.safetensors"), "a checkpoint with good options is written")
for _, c in ipairs {
  { nil, "checkpoint%.load: an options table {model= or params=, %.%.%.} is required, got nil", "no options" },
  { { model = m, optimiser = 1 }, "checkpoint%.load: unknown option 'optimiser' %(known: comm, fp8_modules, layout, " ..
    "model, model_file, optimizer, params%)", "optimiser for optimizer" },
  { { model = m, model_file = "" }, "model_file must be a non%-empty string", "model_file = ''" },
} do
  local err = tap.error_like(function() line = here(); ck.load(good, c[1]) end, c[2], "load, " .. c[3] .. ": refused")
  tap.like(err, at(line), "... at the caller's line")
end
tap.error_like(function() ck.load_model(good, { devise = "cpu" }) end,
  "checkpoint%.load_model: unknown option 'devise' %(known: device%)", "load_model refuses a misspelt option")

-- files missing or broken
local function copy(name)
  local d = base .. "/" .. name
  os.execute("cp -r " .. ex.q(good) .. " " .. ex.q(d))
  return d
end
local d = copy("nomodel")
os.remove(d .. "/step_00000003/model.safetensors")
tap.error_like(function() ck.load(d, { model = m }) end, "step_00000003: model%.safetensors is missing %(the model's " ..
  "weights%)", "load: a missing model file is named")
tap.error_like(function() ck.load_model(d) end, "step_00000003: no model file %(neither model%.safetensors nor " ..
  "model%.stage1%.safetensors is there%)", "load_model: a missing model file is named")

d = copy("nostep")
ex.write(d .. "/latest", "step_00000099\n")
tap.error_like(function() ck.load(d, { model = m }) end, "nostep/latest: names step_00000099, which is not there",
  "load: latest naming a missing step is reported as such")
tap.error_like(function() ck.load_model(d) end, "nostep/latest: names step_00000099, which is not there",
  "load_model: the same")

d = copy("norank")
os.remove(d .. "/step_00000003/rank0.safetensors")
tap.error_like(function() ck.load(d, { model = m }) end, "step_00000003: rank0%.safetensors is missing",
  "load: a missing rank file is named (not 'written by fewer ranks')")

-- a 2-rank checkpoint (rank 0's part, saved through a stand-in communicator): rank 1's file missing is named as
-- such, and a rank file of another rank (files renamed or swapped) is refused naming the file and both ranks
do
  local function fake(r) return { rank = function() return r end, size = function() return 2 end, barrier = function() end } end
  local two = base .. "/two"
  ck.save(two, { model = m, step = 3, comm = fake(0) })
  local e1 = tap.error_like(function() ck.load(two, { model = m, comm = fake(1) }) end,
    "step_00000003: rank1%.safetensors is missing %(the optimizer and RNG state of rank 1 of the 2 ranks that wrote the " ..
    "checkpoint, as rank0%.safetensors records%)", "load on rank 1 of 2, its file missing: the file is named")
  tap.ok(e1 and not e1:find("fewer ranks"), "... not as written by fewer ranks (rank 0's file records 2)")
  os.execute("cp " .. ex.q(two .. "/step_00000003/rank0.safetensors") .. " " .. ex.q(two .. "/step_00000003/rank1.safetensors"))
  tap.error_like(function() ck.load(two, { model = m, comm = fake(1) }) end,
    "step_00000003/rank1%.safetensors: holds the state of rank 0, but rank 1 is loading it %(rank files renamed or swapped%?%)",
    "load: a rank file written by another rank (swapped files) is refused naming the file and both ranks")
end

d = copy("truncrank")
local rf = d .. "/step_00000003/rank0.safetensors"
local f = assert(io.open(rf, "rb"))
local bytes = f:read("a")
f:close()
ex.write(rf, bytes:sub(1, 100))
local err = tap.error_like(function() ck.load(d, { model = m }) end, "truncrank/step_00000003/rank0%.safetensors: ",
  "load: a truncated rank file is reported with its path")
tap.ok(err and not err:find("fewer ranks"), "... as unreadable, not as written by fewer ranks")

-- a truncated model file: its error carries one position (the caller's), not the library's on top of it
d = copy("truncmodel")
local mfile = d .. "/step_00000003/model.safetensors"
f = assert(io.open(mfile, "rb"))
bytes = f:read("a")
f:close()
ex.write(mfile, bytes:sub(1, #bytes - 8))
err = tap.error_like(function() line = here(); ck.load(d, { model = m }) end, "truncmodel/step_00000003/model%.safetensors",
  "load: a truncated model file is reported with its path")
tap.like(err or "", at(line) .. "[^:]*model%.safetensors", "... positioned once, at the caller's line")
tap.ok(err ~= nil and select(2, err:gsub("%.lua:%d+: ", "")) == 1, "... and only once (" .. tostring(err) .. ")")

-- metadata of the rank file: every field a resume relies on is checked, naming the file and the field, and a
-- refused checkpoint leaves the model and the optimizer as they were
local optim = require "tegraph.optim"
tg.manual_seed(1)
local om = tg.nn.Linear(4, 2, { name = "fc" })
local oo = optim.AdamW(om:parameters(), { lr = 1e-3 })
local og = base .. "/withopt"
ck.save(og, { model = om, optimizer = oo, step = 3 })
-- copy of og's step with one metadata entry of rank0.safetensors set to v (nil: removed)
local function with_meta(name, key, v)
  local dd = base .. "/" .. name
  os.execute("cp -r " .. ex.q(og .. "/step_00000003") .. " " .. ex.q(dd))
  local rp = dd .. "/rank0.safetensors"
  local sf = tg.safetensors.open(rp)
  local meta, ts = sf:metadata(), {}
  for _, n in ipairs(sf:names()) do ts[n] = sf:read(n) end
  sf:close()
  meta[key] = v
  tg.save(rp, ts, meta)
  return dd
end
local function fresh()
  local mm = tg.nn.Linear(4, 2, { name = "fc" })
  mm:parameters()[1].data:fill_(7)
  return mm, optim.AdamW(mm:parameters(), { lr = 5e-2 })
end
for _, c in ipairs {
  { "step", "abc", "bad metadata: step is 'abc' %(an integer >= 0 is expected%)" },
  { "step", nil, "bad metadata: step is missing %(an integer >= 0 is expected%)" },
  { "step", "-3", "bad metadata: step is '%-3'" },
  { "world_size", nil, "bad metadata: world_size is missing %(an integer >= 1 is expected%)" },
  { "world_size", "0", "bad metadata: world_size is '0'" },
  { "rng_seed", "xyz", "bad metadata: rng_seed is 'xyz' %(an integer is expected%)" },
  { "rng_offset", "-1", "bad metadata: rng_offset is '%-1'" },
  { "optimizer.t", "abc", "AdamW: bad checkpoint state %(step count abc" },
  { "optimizer.kind", "zero1", "holds the state of the optimizer 'zero1'; this run's optimizer is " ..
    "'AdamW'" },
} do
  local what = c[1] .. " = " .. tostring(c[2])
  local dd = with_meta("meta" .. _, c[1], c[2])
  local mm, oo2 = fresh()
  local e = tap.error_like(function() ck.load(dd, { model = mm, optimizer = oo2 }) end,
    "meta" .. _ .. "/rank0%.safetensors: " .. c[3], "load: rank metadata " .. what .. " is refused naming the file and the field")
  tap.ok(mm:parameters()[1].data:totable()[1][1] == 7 and oo2:step_count() == 0 and oo2.lr == 5e-2,
    "... with nothing loaded (weights, optimizer step and lr as they were)")
end

-- keep: the checkpoint just written is never removed; checkpoints of later steps (a run resumed from an
-- earlier step into the same directory abandoned them) go first, then all but the newest K
local kd = base .. "/keep"
ck.save(kd, { model = m, step = 10 })
ck.save(kd, { model = m, step = 20 })
local p5 = ck.save(kd, { model = m, step = 5, keep = 1 })
tap.ok(exists(p5 .. "/model.safetensors"), "keep = 1 after a resume from an earlier step: the checkpoint just written stays")
tap.is(ck.latest(kd), p5, "... latest names it")
tap.ok(not exists(kd .. "/step_00000010/model.safetensors") and not exists(kd .. "/step_00000020/model.safetensors"),
  "... and the later (abandoned) checkpoints are gone")
ck.save(kd, { model = m, step = 6 })
ck.save(kd, { model = m, step = 7, keep = 2 })
tap.ok(exists(kd .. "/step_00000006/model.safetensors") and exists(kd .. "/step_00000007/model.safetensors") and
  not exists(p5 .. "/model.safetensors"), "keep = 2 in order: the newest two stay")

os.execute("rm -rf " .. ex.q(base))
tap.done_testing()
