-- tegraph.checkpoint: training checkpoints — a directory per saved step with the model weights (one
-- safetensors file other tools can load), each rank's optimizer state, RNG state and caller state, and
-- the config; atomic writes, a `latest` pointer, the last K kept; loading checks everything first.
--
--   DIR/latest                           the name of the newest complete checkpoint ("step_00000100")
--   DIR/step_00000100/model.safetensors  the parameters by name (metadata: step, config.*); with a
--                                        pipeline one file per stage, model.stage<k>.safetensors
--   DIR/step_00000100/rank0.safetensors  rank 0's optimizer state (f32 masters, m, v) and the FP8
--                                        scaling states of its modules (fp8.<module>.amax_history, .scale,
--                                        .scale_inv; when the model runs FP8), metadata: step,
--                                        world_size, layout, optimizer values, rng_seed/rng_offset,
--                                        state.* (caller's)
--   DIR/step_00000100/config.json        the config (for people and tools)
--
-- A checkpoint is written into step_N.tmp and renamed to step_N once every file in it is written and
-- synced, then `latest` is replaced (temporary name, fsync, rename): a crash leaves the previous one.
local raise = require "tegraph.raise"
local options = require "tegraph.options"
local core = require "tegraph.core"

local M = {}

local function join(a, b) return a .. "/" .. b end

local function step_name(step) return string.format("step_%08d", step) end

-- Whether a file can be opened for reading (a FIFO or device is not one: opening it could wait forever).
local function exists(p)
  local f = core.fs.open_read(p)
  if f then f:close() end
  return f ~= nil
end

-- A flat table of strings, numbers and booleans as JSON (keys sorted).
local function json_quote(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' elseif c == "\\" then return "\\\\" end
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end

function M.to_json(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  local out = {}
  for _, k in ipairs(keys) do
    local v = t[k]
    local s
    if type(v) == "number" then
      s = math.type(v) == "integer" and tostring(v) or (v == v and v ~= math.huge and v ~= -math.huge) and
          string.format("%.17g", v) or "null"
    elseif type(v) == "boolean" then
      s = tostring(v)
    else
      s = json_quote(tostring(v))
    end
    out[#out + 1] = "  " .. json_quote(k) .. ": " .. s
  end
  return "{\n" .. table.concat(out, ",\n") .. "\n}\n"
end

local function barrier(comm)
  if comm and comm:size() > 1 then comm:barrier() end
end

-- The optimizer's state tensors and values (optim.AdamW, reduce.zero1 or anything with
-- state_tensors / state_values / load_state_values).
local function opt_state(opt)
  if not opt then return {}, {} end
  for _, f in ipairs { "state_tensors", "state_values", "load_state_values" } do
    if type(opt[f]) ~= "function" then raise("checkpoint: the optimizer has no " .. f .. "()") end
  end
  return opt:state_tensors(), opt:state_values()
end

-- The parameters a checkpoint holds: o.params, or o.model's. Their names are the keys of the file, so they
-- must be distinct: two parameters of one name (two unnamed tg.nn.Linear in a Sequential are both "weight"
-- and "bias") would be saved as one tensor and loaded as the same values; refused, naming them.
local function params_of(o, who)
  local ps = o.params
  if ps == nil then
    if o.model == nil then raise(who .. ": model= or params= is required") end
    if (type(o.model) ~= "table" and type(o.model) ~= "userdata") or o.model.parameters == nil then
      raise(string.format("%s: model must be a module or model (something with parameters()), got %s", who,
        type(o.model)))
    end
    ps = o.model:parameters()
  elseif type(ps) ~= "table" then
    raise(string.format("%s: params must be a list of parameters, got %s", who, type(ps)))
  end
  local at, order = {}, {}
  for i, p in ipairs(ps) do
    if not core.nn.is_parameter(p) then
      raise(string.format("%s: params[%d] is a %s, not a parameter (module:parameters() gives them)", who, i, type(p)))
    end
    local n = p.name
    if not at[n] then
      at[n] = {}
      order[#order + 1] = n
    end
    at[n][#at[n] + 1] = i
  end
  local dups = {}
  for _, n in ipairs(order) do
    if #at[n] > 1 then
      local pos = {}
      for k, i in ipairs(at[n]) do pos[k] = tostring(i) end
      dups[#dups + 1] = string.format("'%s' (parameters %s)", n, table.concat(pos, ", "))
    end
  end
  if #dups > 0 then
    raise(string.format("%s: parameter names repeat: %s; a checkpoint keeps each parameter under its name, so " ..
      "the file would hold one of them for all: give the modules distinct names (e.g. tg.nn.Linear(4, 4, " ..
      "{name = \"fc1\"}))", who, table.concat(dups, ", ")))
  end
  return ps
end

-- Refuses two entries ({name=, t=}) of one name in a list that goes into one file.
local function check_distinct(entries, who, what)
  local seen = {}
  for i, e in ipairs(entries) do
    if seen[e.name] then
      raise(string.format("%s: %s entries %d and %d are both named '%s' (a file keeps one tensor a name; give the " ..
        "parameters distinct names)", who, what, seen[e.name], i, e.name))
    end
    seen[e.name] = i
  end
end

-- Refuses a non-table o and keys of o not in known (a misspelt key would be ignored).
local function check_options(who, o, known, usage)
  if type(o) ~= "table" then
    raise(string.format("%s: an options table %s is required, got %s", who, usage, type(o)))
  end
  options.check(who, o, known)
end

-- Refuses a metadata table (config=, state=) whose keys are not strings or whose values are not strings,
-- numbers or booleans (safetensors metadata), before anything is written.
local function check_meta(who, name, t)
  if t == nil then return end
  if type(t) ~= "table" then raise(string.format("%s: %s must be a table, got %s", who, name, type(t))) end
  for k, v in pairs(t) do
    if type(k) ~= "string" then
      raise(string.format("%s: %s has a key %s (keys are strings)", who, name, tostring(k)))
    end
    local tv = type(v)
    if tv ~= "string" and tv ~= "number" and tv ~= "boolean" then
      raise(string.format("%s: %s.%s is a %s (values are strings, numbers or booleans)", who, name, k, tv))
    end
  end
end

local function check_comm(who, comm)
  if comm ~= nil and ((type(comm) ~= "table" and type(comm) ~= "userdata") or comm.rank == nil) then
    raise(string.format("%s: comm must be a communicator (tg.comm.world() or a split of it), got %s", who, type(comm)))
  end
end

local function check_string(who, name, v)
  if v ~= nil and (type(v) ~= "string" or v == "") then
    raise(string.format("%s: %s must be a non-empty string, got %s", who, name,
      type(v) == "string" and "''" or type(v)))
  end
end

-- The FP8 scaling states (amax histories, scales, scale inverses) of o.fp8_modules (a module, a list of
-- modules, or anything with fp8_state(); default o.model) as checkpoint entries "fp8.<module>.<what>", in
-- the modules' order; empty when none runs FP8 (or a default model has no fp8_state). Two states of one name
-- are refused (they would overwrite).
local function fp8_entries(o, who)
  local mods = o.fp8_modules or o.model
  if mods == nil then return {} end
  if type(mods) ~= "table" or mods.fp8_state ~= nil or mods.forward ~= nil then mods = { mods } end
  local out, seen = {}, {}
  for _, m in ipairs(mods) do
    if m.fp8_state == nil and o.fp8_modules then raise(who .. ": fp8_modules: an entry has no fp8_state()") end
    for _, st in ipairs(m.fp8_state and m:fp8_state() or {}) do
      if seen[st.module] then
        raise(string.format("%s: two FP8 states are named '%s' (give the modules distinct names)", who, st.module))
      end
      seen[st.module] = true
      for _, what in ipairs { "amax_history", "scale", "scale_inv" } do
        out[#out + 1] = { name = "fp8." .. st.module .. "." .. what, t = st[what] }
      end
    end
  end
  return out
end

-- The shape of an nn.GPT as config entries ("model.<key>"), which load_model rebuilds it from.
local MODEL_KEYS = { "vocab_size", "max_position_embeddings", "hidden_size", "num_attention_heads", "num_layers",
  "ffn_hidden_size", "normalization", "activation", "dtype", "make_vocab_size_divisible_by" }
function M.model_config(cfg)
  local out = {}
  for _, k in ipairs(MODEL_KEYS) do
    if cfg[k] ~= nil then out["model." .. k] = cfg[k] end
  end
  return out
end

-- checkpoint.save(dir, {model= or params=, optimizer=, step=, config={...}, state={...}, comm=, keep=K,
-- layout=, model_file=, writes_model=, fp8_modules=}) -> the checkpoint's path. Every rank of comm calls it (each
-- writes its own optimizer state; rank 0 the config and the pointer; the model file is written by rank
-- 0, or by the ranks with writes_model = true, each into its model_file, default model.safetensors).
-- layout: a string a resume must match. keep = K > 0 removes all but the newest K checkpoints of dir, the
-- one written now included: checkpoints of later steps than it (left by a run this one resumed from an
-- earlier step) are removed first, as an abandoned history.
-- fp8_modules (default model): whose FP8 scaling states go into this rank's file (see fp8_entries).
local SAVE_KEYS = { model = true, params = true, optimizer = true, step = true, config = true, state = true,
  comm = true, keep = true, layout = true, model_file = true, writes_model = true, fp8_modules = true }
function M.save(dir, o)
  local who = "checkpoint.save"
  if type(dir) ~= "string" or dir == "" then raise("checkpoint.save: a directory is required") end
  options.path("checkpoint.save", "the directory", dir)
  check_options(who, o, SAVE_KEYS, "{model= or params=, step=, ...}")
  if math.type(o.step) ~= "integer" or o.step < 0 then raise("checkpoint.save: step (an integer >= 0) is required") end
  -- everything is checked before anything is written
  if o.keep ~= nil and (math.type(o.keep) ~= "integer" or o.keep < 0) then
    local got = type(o.keep) == "string" and "the string '" .. o.keep .. "'" or tostring(o.keep)
    raise("checkpoint.save: keep must be an integer >= 0 (0: keep all), got " .. got)
  end
  check_meta(who, "config", o.config)
  check_meta(who, "state", o.state)
  check_comm(who, o.comm)
  check_string(who, "layout", o.layout)
  check_string(who, "model_file", o.model_file)
  if o.writes_model ~= nil and type(o.writes_model) ~= "boolean" then
    raise("checkpoint.save: writes_model must be a boolean, got " .. type(o.writes_model))
  end
  local comm = o.comm
  local rank, size = comm and comm:rank() or 0, comm and comm:size() or 1
  local final = join(dir, step_name(o.step))
  local tmp = final .. ".tmp"
  local writes_model = o.writes_model
  if writes_model == nil then writes_model = rank == 0 end
  local params = writes_model and params_of(o, who) or nil
  local specs, values = opt_state(o.optimizer)
  local entries = {}
  for _, e in ipairs(specs) do entries[#entries + 1] = e end
  for _, e in ipairs(fp8_entries(o, who)) do entries[#entries + 1] = e end
  check_distinct(entries, who, "optimizer and FP8 state")
  if rank == 0 then
    core.fs.mkdir(dir)
    if core.fs.isdir(tmp) then core.fs.remove_dir(tmp) end -- left by a crash
    core.fs.mkdir(tmp)
  end
  barrier(comm)
  local seed, offset = core.rng_state()
  local meta = { format = "tegraph checkpoint 1", step = o.step, world_size = size, rank = rank,
    rng_seed = seed, rng_offset = offset, layout = o.layout }
  for k, v in pairs(o.state or {}) do meta["state." .. k] = v end
  local tensors = {}
  for _, e in ipairs(entries) do tensors[e.name] = e.t end
  for k, v in pairs(values) do meta["optimizer." .. k] = v end
  core.save(join(tmp, "rank" .. rank .. ".safetensors"), tensors, meta)
  if writes_model then
    local weights, wmeta = {}, { format = "tegraph model 1", step = o.step }
    for _, p in ipairs(params) do weights[p.name] = p.data end
    for k, v in pairs(o.config or {}) do wmeta["config." .. k] = v end
    core.save(join(tmp, o.model_file or "model.safetensors"), weights, wmeta)
  end
  if rank == 0 then core.write_atomic(join(tmp, "config.json"), M.to_json(o.config or {})) end
  barrier(comm)
  if rank == 0 then
    core.fs.sync_dir(tmp)
    if core.fs.isdir(final) then core.fs.remove_dir(final) end
    local ok, err = os.rename(tmp, final)
    if not ok then raise("checkpoint.save: " .. tostring(err)) end
    core.fs.sync_dir(dir)
    core.write_atomic(join(dir, "latest"), step_name(o.step) .. "\n")
    if o.keep and o.keep > 0 then
      -- The directory holds one history: checkpoints of steps after this one are the future of a run that
      -- was resumed from an earlier step (abandoned), so they go; of the rest the K newest stay. The one
      -- just written (which latest names) is the newest, so it always stays.
      local steps = {}
      for _, n in ipairs(core.fs.list(dir)) do
        local k = n:match("^step_(%d+)$")
        if k then
          if tonumber(k) > o.step then core.fs.remove_dir(join(dir, n))
          else steps[#steps + 1] = { n = n, step = tonumber(k) } end
        end
      end
      table.sort(steps, function(a, b) return a.step < b.step end)
      for i = 1, #steps - o.keep do core.fs.remove_dir(join(dir, steps[i].n)) end
    end
  end
  barrier(comm)
  return final
end

-- The checkpoint a path names: a checkpoint directory itself, or a run directory (its `latest`).
function M.resolve(path)
  if type(path) ~= "string" then raise("checkpoint: a path is required") end
  options.path("checkpoint", "the path", path)
  local f = core.fs.open_read(join(path, "latest"))
  if f then
    local name = (f:read("l") or ""):match("^%s*(.-)%s*$")
    f:close()
    if not name:match("^step_%d+$") then raise(string.format("%s/latest: does not name a checkpoint ('%s')", path, name)) end
    if not core.fs.isdir(join(path, name)) then
      raise(string.format("%s/latest: names %s, which is not there (%s is missing)", path, name, join(path, name)))
    end
    return join(path, name)
  end
  for _, n in ipairs { "model.safetensors", "model.stage1.safetensors" } do
    if exists(join(path, n)) then return path end
  end
  raise(string.format("%s: no checkpoint there (neither a 'latest' file nor model.safetensors)", path))
end

-- The newest checkpoint of a run directory, or nil.
function M.latest(dir)
  local ok, p = pcall(M.resolve, dir)
  return ok and p or nil
end

-- Opens a safetensors file; its error (which the C binding already positions at the caller's line) comes
-- back without that position, for raise to add once.
local function open_file(path)
  local ok, f = pcall(core.safetensors.open, path)
  if ok then return f end
  error((tostring(f):gsub("^[^\n]-%.lua:%d+: ", "")), 0)
end

-- The integer a metadata field holds (written as its decimal digits), at least lo; anything else (missing,
-- "abc", 1.5, below lo) is refused naming the file and the field.
local function meta_int(meta, path, key, lo)
  local s = meta[key]
  local n = type(s) == "string" and s:match("^%s*%-?%d+%s*$") and math.tointeger(tonumber(s)) or nil
  if n == nil or (lo and n < lo) then
    error(string.format("%s: bad metadata: %s is %s (an integer%s is expected)", path, key,
      s == nil and "missing" or "'" .. tostring(s) .. "'", lo and " >= " .. lo or ""), 0)
  end
  return n
end

-- Checks that a file holds exactly the tensors of targets ({name=, t=} list), each with the target's
-- shape and dtype; the error names the file and the tensor.
local function check_one(file, path, name, t, what)
  what = what or "model"
  local info = file:info(name)
  if not info then error(string.format("%s: %s tensor '%s' is missing from the file", path, what, name), 0) end
  local tshape = t:shape()
  local fs = info.shape and ("[" .. table.concat(info.shape, ",") .. "]") or ("(" .. tostring(info.ndim) .. " dimensions)")
  if fs ~= "[" .. table.concat(tshape, ",") .. "]" then
    error(string.format("%s: tensor '%s' has shape %s in the file, the %s has [%s]", path, name, fs, what,
      table.concat(tshape, ",")), 0)
  end
  if info.file_dtype ~= ({ f32 = "F32", bf16 = "BF16", i32 = "I32", u16 = "U16", f16 = "F16" })[t.dtype] then
    error(string.format("%s: tensor '%s' is %s in the file, the %s has %s", path, name, info.file_dtype, what, t.dtype), 0)
  end
end

local function check(file, path, targets, what, skip)
  local want = {}
  for _, e in ipairs(targets) do
    want[e.name] = e.t
    check_one(file, path, e.name, e.t, what)
  end
  for _, n in ipairs(file:names()) do
    if not want[n] and not (skip and n:match(skip)) then
      error(string.format("%s: tensor '%s' in the file is not in the %s", path, n, what), 0)
    end
  end
end

-- checkpoint.load(path, {model= or params=, optimizer=, comm=, layout=, model_file=, fp8_modules=}) -> {step=,
-- state={...}, config={...}, path=}. path: a checkpoint or a run directory (its latest). Every file is
-- opened and checked first (the world size and the layout, then names, shapes and dtypes against the
-- parameters and optimizer); only then is anything copied, so a refused checkpoint leaves the model
-- and optimizer as they were.
local LOAD_KEYS = { model = true, params = true, optimizer = true, comm = true, layout = true, model_file = true,
  fp8_modules = true }
function M.load(path, o)
  local who = "checkpoint.load"
  check_options(who, o, LOAD_KEYS, "{model= or params=, ...}")
  check_comm(who, o.comm)
  check_string(who, "layout", o.layout)
  check_string(who, "model_file", o.model_file)
  local ok, dir = pcall(M.resolve, path)
  if not ok then error(dir, 0) end -- resolve's message already names the caller's line
  local comm = o.comm
  local rank, size = comm and comm:rank() or 0, comm and comm:size() or 1
  local targets = {}
  for _, p in ipairs(params_of(o, who)) do targets[#targets + 1] = { name = p.name, t = p.data } end
  local specs = opt_state(o.optimizer)
  local fp8 = fp8_entries(o, who)
  local all = {}
  for _, e in ipairs(specs) do all[#all + 1] = e end
  for _, e in ipairs(fp8) do all[#all + 1] = e end
  check_distinct(all, who, "optimizer and FP8 state")
  local mpath, rpath = join(dir, o.model_file or "model.safetensors"), join(dir, "rank" .. rank .. ".safetensors")
  if not exists(rpath) then
    local r0 = join(dir, "rank0.safetensors")
    if rank > 0 and exists(r0) then
      -- rank 0's file says how many ranks wrote the checkpoint: fewer than this run, or this rank's file is missing
      local ok0, f0 = pcall(open_file, r0)
      local ws = ok0 and math.tointeger(tonumber(f0:metadata().world_size or "")) or nil
      if ok0 then f0:close() end
      if ws == nil or ws <= rank then
        raise(string.format("%s: no state for rank %d: the checkpoint was written by fewer ranks than this run's %d",
          dir, rank, size))
      end
      raise(string.format("%s: rank%d.safetensors is missing (the optimizer and RNG state of rank %d of the %d ranks "
        .. "that wrote the checkpoint, as rank0.safetensors records)", dir, rank, rank, ws))
    end
    raise(string.format("%s: rank%d.safetensors is missing (the optimizer and RNG state of rank %d)", dir, rank, rank))
  end
  local okr, rf = pcall(open_file, rpath)
  if not okr then raise(rf) end -- present but unreadable: the file's error (it names the path)
  local rmeta = rf:metadata()
  local mf, meta, step, seed, offset
  local opt = o.optimizer
  local good, err = pcall(function()
    -- the metadata a resume relies on, each field checked before anything is used or copied
    step = meta_int(rmeta, rpath, "step", 0)
    local ws = meta_int(rmeta, rpath, "world_size", 1)
    seed, offset = meta_int(rmeta, rpath, "rng_seed"), meta_int(rmeta, rpath, "rng_offset", 0)
    if ws ~= size then
      error(string.format("%s: written by %d ranks; resume it on %d ranks (this run has %d)", dir, ws, ws, size), 0)
    end
    -- each rank file records its writer: a renamed or swapped file would give this rank another rank's shards
    local wrote = meta_int(rmeta, rpath, "rank", 0)
    if wrote ~= rank then
      error(string.format("%s: holds the state of rank %d, but rank %d is loading it (rank files renamed or swapped?)",
        rpath, wrote, rank), 0)
    end
    if o.layout and rmeta.layout and rmeta.layout ~= o.layout then
      error(string.format("%s: written with the layout '%s'; this run has '%s' (resume on the same layout)", dir,
        rmeta.layout, o.layout), 0)
    end
    -- the optimizer's kind first: another optimizer's state (zero1 shards for AdamW) differs in every tensor
    if opt and rmeta["optimizer.kind"] ~= opt:state_values().kind then
      error(string.format("%s: holds the state of the optimizer '%s'; this run's optimizer is '%s' (resume with the " ..
        "same optimizer)", rpath, tostring(rmeta["optimizer.kind"] or "none"), opt:state_values().kind), 0)
    end
    if not exists(mpath) then -- (after the layout: a pipeline's checkpoint has model.stage<k> files instead)
      error(string.format("%s: %s is missing (the model's weights)", dir, o.model_file or "model.safetensors"), 0)
    end
    mf = open_file(mpath)
    meta = mf:metadata()
    if meta.step ~= nil and meta_int(meta, mpath, "step", 0) ~= step then
      error(string.format("%s: holds step %s, its rank file %s step %d (files of two checkpoints)", mpath, meta.step,
        rpath, step), 0)
    end
    check(mf, mpath, targets, "model")
    -- FP8 scaling states: restored when the file has them (a run without FP8 ignores them; a checkpoint
    -- without them, e.g. of a bf16 run, leaves this run's fresh), checked like the rest when both have them
    local has_fp8 = false
    for _, n in ipairs(rf:names()) do
      if n:match("^fp8%.") then has_fp8 = true end
    end
    if has_fp8 and #fp8 > 0 then
      local all2 = {}
      for _, e in ipairs(specs) do all2[#all2 + 1] = e end
      for _, e in ipairs(fp8) do all2[#all2 + 1] = e end
      check(rf, rpath, all2, "optimizer or FP8 state")
    else
      fp8 = {}
      check(rf, rpath, specs, "optimizer", "^fp8%.")
    end
  end)
  if not good then
    if mf then mf:close() end
    rf:close()
    raise(err)
  end
  local ovals, state, config = {}, {}, {}
  for k, v in pairs(rmeta) do
    local ok2 = k:match("^optimizer%.(.+)$")
    if ok2 then ovals[ok2] = v end
    local st = k:match("^state%.(.+)$")
    if st then state[st] = v end
  end
  for k, v in pairs(meta) do
    local c = k:match("^config%.(.+)$")
    if c then config[c] = v end
  end
  -- the optimizer's values are checked by the optimizer itself: tried before any tensor is copied, and on
  -- refusal its values put back
  if opt then
    local before = opt:state_values()
    local okv, verr = pcall(opt.load_state_values, opt, ovals)
    if not okv then
      pcall(opt.load_state_values, opt, before)
      mf:close()
      rf:close()
      raise(string.format("%s: %s", rpath, (tostring(verr):gsub("^[^\n]-%.lua:%d+: ", ""))))
    end
  end
  for _, e in ipairs(targets) do mf:read_into(e.name, e.t) end
  for _, e in ipairs(specs) do rf:read_into(e.name, e.t) end
  for _, e in ipairs(fp8) do rf:read_into(e.name, e.t) end
  mf:close()
  rf:close()
  core.rng_set_state(seed, offset)
  return { step = step, state = state, config = config, path = dir }
end

-- checkpoint.read_config(path) -> config, step, dir: the config (config.* of its model file, values as the
-- strings they were saved as) and the step of a checkpoint or a run directory's latest, read without loading
-- anything: what a resume compares its options with before it loads.
function M.read_config(path)
  local ok, dir = pcall(M.resolve, path)
  if not ok then error(dir, 0) end -- resolve's message already names the caller's line
  local file
  for _, n in ipairs { "model.safetensors", "model.stage1.safetensors" } do
    if not file and exists(join(dir, n)) then file = join(dir, n) end
  end
  if not file then
    raise(string.format("%s: no model file (neither model.safetensors nor model.stage1.safetensors is there)", dir))
  end
  local okf, f = pcall(open_file, file)
  if not okf then raise(f) end
  local meta = f:metadata()
  f:close()
  local config = {}
  for k, v in pairs(meta) do
    local c = k:match("^config%.(.+)$")
    if c then config[c] = v end
  end
  local okm, step = pcall(meta_int, meta, file, "step", 0)
  if not okm then raise(step) end
  return config, step, dir
end

-- Reads one metadata value as the Lua value it was saved from (numbers and booleans come back as strings).
local function value(s)
  if s == "true" then return true elseif s == "false" then return false end
  local n = tonumber(s)
  if n and math.type(n) == "float" and n == math.floor(n) and not s:find("[.eE]") then n = math.tointeger(n) end
  return n or s
end

-- checkpoint.load_model(path [, {device =}]) -> model, meta: an nn.GPT rebuilt from a checkpoint's config
-- (the model.* entries gpt.lua records) with its weights loaded (every stage file of a pipelined run).
-- meta = {step=, config=, tokenizer= (the tokenizer directory, or "bytes", when the run had --text),
-- path=}. Errors name the checkpoint and what is missing or does not match.
function M.load_model(path, o)
  o = o or {}
  check_options("checkpoint.load_model", o, { device = true }, "{device =}")
  local ok, dir = pcall(M.resolve, path)
  if not ok then error(dir, 0) end -- resolve's message already names the caller's line
  local files = {}
  if exists(join(dir, "model.safetensors")) then
    files[1] = join(dir, "model.safetensors")
  else
    while exists(join(dir, string.format("model.stage%d.safetensors", #files + 1))) do
      files[#files + 1] = join(dir, string.format("model.stage%d.safetensors", #files + 1))
    end
  end
  if #files == 0 then
    raise(string.format("%s: no model file (neither model.safetensors nor model.stage1.safetensors is there)", dir))
  end
  local opened = {}
  local function close_all() for _, f in ipairs(opened) do f:close() end end
  for i, p in ipairs(files) do
    local okf, f = pcall(open_file, p)
    if not okf then
      close_all()
      raise(f)
    end
    opened[i] = f
  end
  local config, mmeta = {}, opened[1]:metadata()
  for k, v in pairs(mmeta) do
    local c = k:match("^config%.(.+)$")
    if c then config[c] = value(v) end
  end
  local cfg = {}
  for _, k in ipairs(MODEL_KEYS) do cfg[k] = config["model." .. k] end
  for _, k in ipairs { "vocab_size", "max_position_embeddings", "hidden_size", "num_attention_heads", "num_layers" } do
    if math.type(cfg[k]) ~= "integer" then
      close_all()
      raise(string.format("%s: the config has no model.%s (not a checkpoint of a GPT written by gpt.lua)", files[1], k))
    end
  end
  cfg.device = o.device
  local model = require("tegraph.nn").GPT(cfg)
  -- every parameter from the file holding it; a name in no file, or a tensor of another shape, is refused
  local where, names = {}, {}
  for _, p in ipairs(model:parameters()) do names[p.name] = true end
  for i, f in ipairs(opened) do
    for _, n in ipairs(f:names()) do where[n] = where[n] or i end
  end
  local good, err = pcall(function()
    for i, f in ipairs(opened) do
      for _, n in ipairs(f:names()) do
        -- a pipeline's last stage holds its own copy of the tied token table as lm_head.weight
        if not names[n] and not (#opened > 1 and n == "lm_head.weight") then
          error(string.format("%s: tensor '%s' in the file is not in the model", files[i], n), 0)
        end
      end
    end
    for _, p in ipairs(model:parameters()) do
      local i = where[p.name]
      if not i then error(string.format("%s: tensor '%s' of the model is in no model file of it", dir, p.name), 0) end
      check_one(opened[i], files[i], p.name, p.data)
    end
  end)
  if not good then
    close_all()
    raise(err)
  end
  for _, p in ipairs(model:parameters()) do
    local i = where[p.name]
    opened[i]:read_into(p.name, p.data)
    if p.master then p.master:copy_(p.data) end
  end
  close_all()
  local tk = config["model.tokenizer"]
  return model, { step = math.tointeger(tonumber(mmeta.step)), config = config,
    tokenizer = tk and tostring(tk) or nil, path = dir }
end

return M
