-- tegraph.progress: training progress (step, loss, tokens/s, elapsed, ETA) on a terminal or a log, plus JSONL metrics.
local raise = require "tegraph.raise"
local options = require "tegraph.options"
local core = require "tegraph.core"

local progress = {}

-- "42s", "3m05s", "1h02m".
function progress.duration(s)
  if s ~= s or s == math.huge then return "?" end
  s = math.max(0, math.floor(s + 0.5))
  if s < 60 then return string.format("%ds", s) end
  if s < 3600 then return string.format("%dm%02ds", s // 60, s % 60) end
  return string.format("%dh%02dm", s // 3600, (s % 3600) // 60)
end

-- A JSON value for numbers, strings, booleans and flat tables (NaN/inf -> null).
local function json_value(v)
  local t = type(v)
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    if math.type(v) == "integer" then return tostring(v) end
    return string.format("%.17g", v)
  elseif t == "string" then
    return '"' .. v:gsub('[%c"\\]', function(c)
      local named = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r" }
      return named[c] or string.format("\\u%04x", c:byte())
    end) .. '"'
  elseif t == "boolean" then
    return tostring(v)
  end
  return "null"
end

-- One JSON object per line; keys in a stable order (the given list first).
function progress.json(obj, order)
  local keys, seen = {}, {}
  for _, k in ipairs(order or {}) do
    if obj[k] ~= nil then
      keys[#keys + 1] = k
      seen[k] = true
    end
  end
  local rest = {}
  for k in pairs(obj) do
    if not seen[k] then rest[#rest + 1] = k end
  end
  table.sort(rest)
  for _, k in ipairs(rest) do keys[#keys + 1] = k end
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = json_value(tostring(k)) .. ":" .. json_value(obj[k]) end
  return "{" .. table.concat(parts, ",") .. "}"
end

local P = {}
P.__index = P

-- progress.new{total=steps, tokens_per_step=n, log=FILE.jsonl, tty=auto,
--   out=io.stdout, every=1 (plain lines: print every n steps, and the last),
--   max_skips=nil (update raises after this many consecutive skipped steps),
--   resume_step=nil (a run resumed after this step: the log continues, see below)}
-- With resume_step = N the log is not started afresh: its records of steps up to N stay, those of later
-- steps (written by the run that went on after the checkpoint and is now replayed) are dropped, and the new
-- records are appended, so the file stays one history of the run.
-- A step given skipped = true, or else whose norm is not finite, was skipped
-- by the optimizer: the line counts the skipped steps, the log marks them
-- (skipped = true).
function progress.new(o)
  o = o or {}
  if type(o) ~= "table" then raise("progress.new: options must be a table, got " .. type(o)) end
  options.check("progress.new", o, { "total", "tokens_per_step", "log", "tty", "out", "every", "max_skips",
    "resume_step" })
  if o.resume_step ~= nil and (math.type(o.resume_step) ~= "integer" or o.resume_step < 0) then
    raise(string.format("progress.new: resume_step must be an integer >= 0 (got %s)", tostring(o.resume_step)))
  end
  if o.max_skips ~= nil and (math.type(o.max_skips) ~= "integer" or o.max_skips < 1) then
    raise(string.format("progress.new: max_skips must be an integer >= 1 (got %s)", tostring(o.max_skips)))
  end
  local self = setmetatable({
    total = o.total,
    tokens_per_step = o.tokens_per_step or 0,
    out = o.out or io.stdout,
    every = o.every or 1,
    start = core.time(),
    last_t = nil,
    last_step = o.resume_step or 0,
    first_step = o.resume_step or 0, -- the step before this run's first (its ETA counts from there)
    rate = nil,
    width = 0,
    skipped = 0,           -- steps skipped for a non-finite gradient norm so far
    consecutive_skips = 0, -- of them, the last ones in a row
    max_skips = o.max_skips,
  }, P)
  if o.tty == nil then
    self.tty = core.isatty(self.out)
  else
    self.tty = o.tty
  end
  if o.log then
    options.path("progress.new", "the log", o.log)
    local kept = {}
    if o.resume_step then
      local old = io.open(o.log, "r")
      if old then
        for line in old:lines() do
          local st = tonumber(line:match('^{"step":(%-?%d+)[,}]'))
          if st == nil or st <= o.resume_step then kept[#kept + 1] = line end
        end
        old:close()
      end
    end
    -- the kept records go into a new file that then replaces the log, so a crash here loses nothing
    local path = #kept > 0 and o.log .. ".tmp" or o.log
    local f, err = io.open(path, "w")
    if not f then raise(string.format("%s: cannot open the metrics log: %s", path, err)) end
    for _, line in ipairs(kept) do f:write(line, "\n") end
    f:flush()
    if path ~= o.log then
      local ok, rerr = os.rename(path, o.log)
      if not ok then raise(string.format("%s: cannot replace the metrics log: %s", o.log, rerr)) end
    end
    self.log = f
  end
  return self
end

-- Records step `step` with metrics m = {loss=, lr=, norm=, skipped=, ...} (any extra
-- numeric fields go to the log). Returns the line shown.
function P:update(step, m)
  m = m or {}
  local skipped = m.skipped -- given, or: a non-finite norm means the optimizer skipped the step
  if skipped == nil then
    skipped = type(m.norm) == "number" and (m.norm ~= m.norm or m.norm == math.huge or m.norm == -math.huge)
  end
  if skipped then
    self.skipped, self.consecutive_skips = self.skipped + 1, self.consecutive_skips + 1
  elseif m.skipped ~= nil or m.norm ~= nil then
    self.consecutive_skips = 0
  end
  local now = core.time()
  local elapsed = now - self.start
  local dt = now - (self.last_t or self.start)
  local steps = step - self.last_step
  if dt > 0 and steps > 0 and self.tokens_per_step > 0 then
    local r = steps * self.tokens_per_step / dt
    self.rate = self.rate and (0.7 * self.rate + 0.3 * r) or r
  end
  self.last_t, self.last_step = now, step
  local done = step - self.first_step
  local eta = self.total and done > 0 and elapsed / done * (self.total - step) or nil

  local parts = { self.total and string.format("step %d/%d", step, self.total) or string.format("step %d", step) }
  if m.loss then parts[#parts + 1] = string.format("loss %.4f", m.loss) end
  if m.lr then parts[#parts + 1] = string.format("lr %.2e", m.lr) end
  if m.norm then parts[#parts + 1] = string.format("norm %.3f", m.norm) end
  if self.skipped > 0 then parts[#parts + 1] = string.format("skipped %d", self.skipped) end
  if self.rate then parts[#parts + 1] = string.format("%.0f tok/s", self.rate) end
  parts[#parts + 1] = "elapsed " .. progress.duration(elapsed)
  if eta then parts[#parts + 1] = "eta " .. progress.duration(eta) end
  local line = table.concat(parts, " | ")

  if self.tty then
    local pad = math.max(0, self.width - #line)
    self.out:write("\r", line, string.rep(" ", pad))
    self.width = #line
    self.out:flush()
  elseif step % self.every == 0 or step == self.total or step == 1 then
    self.out:write(line, "\n")
    self.out:flush()
  end

  if self.log then
    local rec = { step = step, elapsed_s = elapsed, tokens_per_s = self.rate, eta_s = eta,
      skipped = skipped or nil, skipped_total = self.skipped > 0 and self.skipped or nil }
    for k, v in pairs(m) do
      if type(v) == "number" or type(v) == "string" or type(v) == "boolean" then rec[k] = v end
    end
    self.log:write(progress.json(rec, { "step", "loss", "lr", "norm", "tokens_per_s", "elapsed_s", "eta_s" }), "\n")
    self.log:flush()
  end
  if self.max_skips and self.consecutive_skips >= self.max_skips then
    if self.tty and self.width > 0 then self.out:write("\n") end
    self.width = 0
    raise(string.format("step %d: %d steps in a row skipped: the loss or gradient norm is not finite (loss %s, " ..
      "gradient norm %s)", step, self.consecutive_skips, tostring(m.loss), tostring(m.norm)))
  end
  return line
end

-- Writes one record (a table of fields) to the log, if there is one.
function P:record(rec)
  if self.log then
    self.log:write(progress.json(rec, { "step" }), "\n")
    self.log:flush()
  end
end

-- Prints a message on its own line without garbling the progress line.
function P:print(...)
  if self.tty and self.width > 0 then
    self.out:write("\r", string.rep(" ", self.width), "\r")
    self.width = 0
  end
  local parts = {}
  for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
  self.out:write(table.concat(parts, " "), "\n")
  self.out:flush()
end

-- Ends the progress line and closes the log; returns the elapsed seconds.
function P:finish()
  if self.tty and self.width > 0 then self.out:write("\n") end
  self.width = 0
  if self.log then
    self.log:close()
    self.log = nil
  end
  return core.time() - self.start
end

return progress
