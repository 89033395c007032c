-- cli.lua — command-line options of the example and bench scripts: `--name value`, `--name=value`,
-- boolean flags, numbers checked, one usage text.
--
--   local cli = require "tegraph.cli"
--   local opt = cli.parse("examples/gpt.lua", {
--     { "steps", 150, "optimizer steps" },                   -- kind from the default: number
--     { "vocab", nil, "vocabulary size", "number" },          -- nil default: say the kind
--     { "quiet", false, "no progress lines" },               -- boolean: --quiet, --quiet=1|true|yes|0|false|no
--     { "layers", 2, "transformer layers", min = 1 },         -- numbers may have bounds: min =, max =
--     { "graph", false, "...", values = { "full" } },          -- a flag that also takes one of these words:
--                                                               -- --graph (true), --graph full, --graph=full
--   }, arg)
--
-- Bad input prints "PROG: what is wrong" and the usage on stderr and exits 2 (a usage error, like the
-- tegraph command's own); -h/--help prints the usage on stdout and exits 0. cli.try is the same parse
-- without printing or exiting, for callers that handle errors themselves.
local M = {}

local KINDS = { number = true, string = true, boolean = true }
local TRUE = { ["1"] = true, ["true"] = true, yes = true }
local FALSE = { ["0"] = true, ["false"] = true, no = true }

-- The kind of one option: explicit, else from its default, else string. Bad tables are the script's
-- bug, not the user's, so they raise.
local function kind_of(d)
  local k = d[4] or (d[2] ~= nil and type(d[2])) or "string"
  if not KINDS[k] then
    error(string.format("cli: option --%s: kind must be number, string or boolean (got %s)", tostring(d[1]), tostring(k)), 0)
  end
  if d[2] ~= nil and type(d[2]) ~= k then
    error(string.format("cli: option --%s: default %s is not a %s", d[1], tostring(d[2]), k), 0)
  end
  return k
end

-- name -> { default, help, kind }, checking the table once.
local function index(defaults)
  if type(defaults) ~= "table" then error("cli: defaults must be a list of { name, default, help[, kind] }", 0) end
  local known = {}
  for i, d in ipairs(defaults) do
    local name = d[1]
    if type(name) ~= "string" or not name:match("^[%w][%w-]*$") then
      error(string.format("cli: option %d: name must be letters, digits and '-' (got %s)", i, tostring(name)), 0)
    end
    if name == "help" then error("cli: --help is built in, not an option", 0) end
    if known[name] then error("cli: option --" .. name .. " is listed twice", 0) end
    local kind = kind_of(d)
    for _, b in ipairs { "min", "max" } do
      if d[b] ~= nil and (kind ~= "number" or type(d[b]) ~= "number") then
        error(string.format("cli: option --%s: %s needs a number option and a number bound", name, b), 0)
      end
    end
    if d.values ~= nil and (kind ~= "boolean" or type(d.values) ~= "table") then
      error(string.format("cli: option --%s: values needs a flag and a list of words", name), 0)
    end
    local values
    for _, v in ipairs(d.values or {}) do
      values = values or {}
      values[v] = true
    end
    known[name] = { default = d[2], help = d[3] or "", kind = kind, min = d.min, max = d.max, values = values }
  end
  return known
end

-- The basename of prog, which error messages start with ("gpt.lua: ...").
local function short(prog)
  return (tostring(prog):match("([^/]+)$")) or tostring(prog)
end

-- Parses argv against defaults. Returns the option table (every option, at its default unless given),
-- or nil and a message naming the argument. -h/--help stops the parse: the table then has help = true.
function M.try(defaults, argv)
  local known = index(defaults)
  local o = {}
  for name, d in pairs(known) do o[name] = d.default end
  argv = argv or {}
  local i = 1
  while argv[i] ~= nil do
    local a = tostring(argv[i])
    if a == "-h" or a == "--help" then
      o.help = true
      return o
    end
    local name, val = a:match("^%-%-([%w][%w-]*)=(.*)$")
    if not name then name = a:match("^%-%-([%w][%w-]*)$") end
    local d = name and known[name]
    if not d then return nil, "unknown argument '" .. a .. "'" end
    if d.kind == "boolean" then
      -- a flag: bare means on; `--flag VALUE` is not a thing (VALUE would be the next argument), except
      -- for a flag that takes words (values =): `--flag WORD` when the next argument is one of them
      if val == nil and d.values and argv[i + 1] ~= nil and d.values[tostring(argv[i + 1])] then
        i = i + 1
        o[name] = tostring(argv[i])
      elseif val ~= nil and d.values and d.values[val] then
        o[name] = val
      elseif val == nil or TRUE[val:lower()] then
        o[name] = true
      elseif FALSE[val:lower()] then
        o[name] = false
      else
        local words = {}
        for w in pairs(d.values or {}) do words[#words + 1] = w end
        table.sort(words)
        return nil, "--" .. name .. " is a flag: give it alone or as --" .. name .. "=1|true|yes|0|false|no"
          .. (#words > 0 and (" or --" .. name .. " " .. table.concat(words, "|")) or "") .. " (got '" .. val .. "')"
      end
    else
      if val == nil then
        i = i + 1
        val = argv[i]
        -- `--trace --steps 3` forgot the file: don't swallow the next option as the value
        local next_name = val ~= nil and tostring(val):match("^%-%-([%w][%w-]*)")
        if val == nil or val == "-h" or val == "--help" or (next_name and known[next_name]) then
          return nil, "--" .. name .. " needs a value"
        end
        val = tostring(val)
      end
      if d.kind == "number" then
        local num = tonumber(val)
        if not num or num ~= num or num == math.huge or num == -math.huge then
          return nil, "--" .. name .. " needs a number (got '" .. val .. "')"
        end
        -- "30" stays the integer 30, as loops and shapes need; an option whose default is an integer
        -- (a count, a size) takes only integers
        local int = math.tointeger(num)
        if not int and math.type(d.default) == "integer" then
          return nil, "--" .. name .. " needs an integer (got '" .. val .. "')"
        end
        if d.min and num < d.min then
          return nil, "--" .. name .. " must be at least " .. tostring(d.min) .. " (got '" .. val .. "')"
        end
        if d.max and num > d.max then
          return nil, "--" .. name .. " must be at most " .. tostring(d.max) .. " (got '" .. val .. "')"
        end
        o[name] = int or num
      else
        o[name] = val
      end
    end
    i = i + 1
  end
  return o
end

-- Writes the usage of prog (a path such as "examples/gpt.lua") to out (a file; default io.stdout).
function M.usage(prog, defaults, out)
  local known = index(defaults)
  out = out or io.stdout
  local flags = false
  for _, d in pairs(known) do flags = flags or d.kind == "boolean" end
  out:write("usage: tegraph run ", tostring(prog), flags and " [--OPTION VALUE | --FLAG]...\n" or " [--OPTION VALUE]...\n",
    "\noptions:\n")
  for _, d in ipairs(defaults) do
    local def = d[2] == nil and "" or string.format(" (default %s)", tostring(d[2]))
    out:write(string.format("  --%-14s %s%s\n", d[1], known[d[1]].help, def))
  end
end

-- Parses argv (default: the script's arg) against defaults and returns the options. On -h/--help
-- prints the usage and exits 0; on bad input prints "PROG: message" and the usage on stderr and
-- exits 2. sys (optional, for tests) replaces { exit = os.exit, stdout = io.stdout, stderr = io.stderr };
-- if its exit returns, parse returns nil.
function M.parse(prog, defaults, argv, sys)
  sys = sys or {}
  local exit = sys.exit or os.exit
  local o, msg = M.try(defaults, argv or _G.arg or {})
  if o and o.help then
    M.usage(prog, defaults, sys.stdout or io.stdout)
    exit(0)
    return nil
  end
  if not o then
    local err = sys.stderr or io.stderr
    err:write(short(prog), ": ", msg, "\n")
    M.usage(prog, defaults, err)
    exit(2)
    return nil
  end
  return o
end

return M
