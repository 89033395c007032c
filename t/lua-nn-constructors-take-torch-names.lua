-- tegraph.nn constructors take PyTorch's and TransformerEngine's names: the positional form
-- (sizes..., options) and the table form build the same module (parameter names, shapes and initial
-- values under one seed); an old key, a misspelt key and a bad positional argument are refused, named.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local G = require "grads"
local tap = require "tap"

-- "name [shape] v1 v2 ..." for every parameter of m, in order: equal strings are equal modules.
local function signature(m)
  local out = {}
  for _, p in ipairs(m:parameters()) do
    local vals = {}
    for i, v in ipairs(G.flatten(p.data:totable())) do vals[i] = string.format("%.9g", v) end
    out[#out + 1] = string.format("%s [%s] %s", p.name, table.concat(p.shape, ","), table.concat(vals, " "))
  end
  return table.concat(out, "\n")
end

local function built(seed, make)
  tg.manual_seed(seed)
  return signature(make())
end

-- The two forms of every constructor, with options beyond the defaults where there are some.
local emb_table = nn.Embedding(11, 8, { max_position_embeddings = 5, name = "tied" })
local cases = {
  { "Linear", function() return nn.Linear(6, 4, { name = "l", init_std = 0.5 }) end,
    function() return nn.Linear { in_features = 6, out_features = 4, name = "l", init_std = 0.5 } end },
  { "Linear without bias", function() return nn.Linear(6, 4, { bias = false }) end,
    function() return nn.Linear { in_features = 6, out_features = 4, bias = false } end },
  { "LayerNorm", function() return nn.LayerNorm(8, { eps = 1e-6, name = "ln" }) end,
    function() return nn.LayerNorm { hidden_size = 8, eps = 1e-6, name = "ln" } end },
  { "RMSNorm", function() return nn.RMSNorm(8, { name = "rms" }) end,
    function() return nn.RMSNorm { hidden_size = 8, name = "rms" } end },
  { "LayerNormLinear", function() return nn.LayerNormLinear(8, 3, { normalization = "RMSNorm", name = "lnl" }) end,
    function() return nn.LayerNormLinear { in_features = 8, out_features = 3, normalization = "RMSNorm", name = "lnl" } end },
  { "LayerNormMLP", function() return nn.LayerNormMLP(8, 12, { activation = "swiglu", name = "mlp" }) end,
    function() return nn.LayerNormMLP { hidden_size = 8, ffn_hidden_size = 12, activation = "swiglu", name = "mlp" } end },
  { "LayerNormMLP, ffn_hidden_size left out", function() return nn.LayerNormMLP(8, 32) end,
    function() return nn.LayerNormMLP { hidden_size = 8 } end },
  { "CausalSelfAttention", function() return nn.CausalSelfAttention(8, 2, { name = "attn" }) end,
    function() return nn.CausalSelfAttention { hidden_size = 8, num_attention_heads = 2, name = "attn" } end },
  { "TransformerLayer",
    function() return nn.TransformerLayer(8, 16, 2, { normalization = "RMSNorm", activation = "swiglu", name = "h" }) end,
    function()
      return nn.TransformerLayer { hidden_size = 8, ffn_hidden_size = 16, num_attention_heads = 2, normalization = "RMSNorm",
        activation = "swiglu", name = "h" }
    end },
  { "TransformerLayer, ffn_hidden_size left out", function() return nn.TransformerLayer(8, 32, 2) end,
    function() return nn.TransformerLayer { hidden_size = 8, num_attention_heads = 2 } end },
  { "Embedding", function() return nn.Embedding(11, 8, { max_position_embeddings = 5, name = "emb" }) end,
    function() return nn.Embedding { num_embeddings = 11, embedding_dim = 8, max_position_embeddings = 5, name = "emb" } end },
  { "LMHead", function() return nn.LMHead(8, 11, { normalization = "RMSNorm", name = "head" }) end,
    function() return nn.LMHead { hidden_size = 8, vocab_size = 11, normalization = "RMSNorm", name = "head" } end },
  { "LuaLinear", function() return nn.LuaLinear(6, 4, { name = "ll", bias = false }) end,
    function() return nn.LuaLinear { in_features = 6, out_features = 4, name = "ll", bias = false } end },
}
for _, c in ipairs(cases) do
  local pos, tab = built(42, c[2]), built(42, c[3])
  tap.ok(pos ~= "" and pos == tab, c[1] .. ": the positional and the table form build the same module")
  if pos ~= tab then tap.diag("positional:\n" .. pos .. "\ntable:\n" .. tab) end
end
tap.isnt(built(42, cases[1][2]), built(43, cases[1][2]), "(the comparison sees the initial values: another seed differs)")

-- what the names mean: shapes and the options reaching the module
tap.is_deeply(nn.Linear(6, 4):parameters()[1].shape, { 4, 6 }, "Linear(in_features, out_features): weight (out_features, in_features)")
local mlp = nn.LayerNormMLP(8, 12, { activation = "swiglu", normalization = "RMSNorm", name = "m" })
local shapes = {}
for _, p in ipairs(mlp:parameters()) do shapes[p.name] = table.concat(p.shape, "x") end
tap.ok(shapes["m.fc1.weight"] == "24x8" and shapes["m.fc2.weight"] == "8x12" and shapes["m.norm.bias"] == nil,
  "LayerNormMLP(hidden_size, ffn_hidden_size): swiglu fc1 8->2*12, fc2 12->8, RMSNorm without bias")
local e = nn.Embedding(11, 8, { max_position_embeddings = 5, name = "e" })
tap.ok(e:parameters()[1].shape[1] == 11 and e:parameters()[2].shape[1] == 5 and e:parameters()[2].shape[2] == 8,
  "Embedding(num_embeddings, embedding_dim, {max_position_embeddings}): wte 11x8, wpe 5x8")
tap.lives_ok(function() nn.LMHead { hidden_size = 8, vocab_size = 11, tied = emb_table } end, "LMHead{tied = an Embedding} builds")

-- old keys: refused, naming the key and the name that replaced it
local old = {
  { "Linear", function() nn.Linear { ["in"] = 4, out_features = 3 } end, "in", "in_features" },
  { "Linear", function() nn.Linear(4, 3, { out = 3 }) end, "out", "out_features" },
  { "LayerNorm", function() nn.LayerNorm { dim = 4 } end, "dim", "hidden_size" },
  { "RMSNorm", function() nn.RMSNorm { dim = 4 } end, "dim", "hidden_size" },
  { "LayerNormLinear", function() nn.LayerNormLinear(4, 3, { norm = "RMSNorm" }) end, "norm", "normalization" },
  { "LayerNormMLP", function() nn.LayerNormMLP { hidden_size = 4, hidden = 8 } end, "hidden", "ffn_hidden_size" },
  { "CausalSelfAttention", function() nn.CausalSelfAttention { hidden_size = 4, heads = 2 } end, "heads", "num_attention_heads" },
  { "TransformerLayer", function() nn.TransformerLayer { dim = 8, num_attention_heads = 2 } end, "dim", "hidden_size" },
  { "Embedding", function() nn.Embedding(11, 8, { context = 5 }) end, "context", "max_position_embeddings" },
  { "Embedding", function() nn.Embedding { vocab = 11, embedding_dim = 8, max_position_embeddings = 5 } end, "vocab", "num_embeddings" },
  { "LMHead", function() nn.LMHead { hidden_size = 8, vocab = 11 } end, "vocab", "vocab_size" },
  { "LuaLinear", function() nn.LuaLinear { ["in"] = 4, out_features = 3 } end, "in", "in_features" },
  { "GPT", function() nn.GPT { vocab_size = 7, max_position_embeddings = 5, width = 8, num_attention_heads = 2, num_layers = 1 } end,
    "width", "hidden_size" },
  { "GPT", function() nn.GPT { vocab_size = 7, context = 5, hidden_size = 8, num_attention_heads = 2, num_layers = 1 } end,
    "context", "max_position_embeddings" },
  { "GPT", function() nn.GPT { vocab_size = 7, vocab_pad = 8, max_position_embeddings = 5, hidden_size = 8,
    num_attention_heads = 2, num_layers = 1 } end, "vocab_pad", "make_vocab_size_divisible_by" },
}
for _, c in ipairs(old) do
  tap.error_like(c[2], "nn%." .. c[1] .. ": unknown option '" .. c[3] .. "' %(use " .. c[4] .. "%)",
    string.format("nn.%s refuses the old key '%s', naming %s", c[1], c[3], c[4]))
end

-- misspelt keys: refused, named, with the known ones listed
tap.error_like(function() nn.LayerNormMLP(8, 16, { activaton = "swiglu" }) end,
  "nn%.LayerNormMLP: unknown option 'activaton' %(known: hidden_size, ffn_hidden_size, bias, eps, init_std, normalization, activation, ",
  "a misspelt option in the positional form's options is refused, with the known names")
tap.error_like(function() nn.Embedding { num_embeddings = 4, embedding_dim = 2, max_positions = 3 } end,
  "nn%.Embedding: unknown option 'max_positions'", "a misspelt option in the table form is refused")
tap.error_like(function() nn.Sequential { nn.Linear(2, 2), nmae = "s" } end, "nn%.Sequential: unknown option 'nmae'",
  "Sequential refuses a misspelt option")
tap.error_like(function() nn.GPT { vocab_size = 7, max_position_embeddings = 5, hidden_size = 8, num_attention_heads = 2,
  num_layers = 1, num_layer = 2 } end, "nn%.GPT: unknown option 'num_layer' %(known: activation, ", "nn.GPT refuses a misspelt key")
tap.error_like(function() nn.Parameter("p", tg.zeros({ 2 }), { fuse_wgrad_acumulation = true }) end,
  "nn%.Parameter: unknown option 'fuse_wgrad_acumulation' %(known: fuse_wgrad_accumulation%)", "nn.Parameter refuses a misspelt key")
tap.error_like(function() nn.LuaLinear(2, 2, { nmae = "x" }) end, "nn%.LuaLinear: unknown option 'nmae'",
  "nn.LuaLinear refuses a misspelt key")
tap.error_like(function() nn.Linear(4, 3, { delay_wgard = true }) end,
  "^[^:]*lua%-nn%-constructors%-take%-torch%-names%.lua:%d+: nn%.Linear: unknown option",
  "a refused option's error points at the calling line")

-- positional arguments: a wrong one is named by its number and name
local bad = {
  { function() nn.Linear(4, "3") end, "nn%.Linear: argument #2 %(out_features%) must be a positive integer, got a string",
    "a string size" },
  { function() nn.Linear(4) end, "nn%.Linear: argument #2 %(out_features%) must be a positive integer, got no value",
    "a missing size" },
  { function() nn.LayerNorm(0) end, "nn%.LayerNorm: argument #1 %(hidden_size%) must be a positive integer, got 0", "a zero size" },
  { function() nn.TransformerLayer(8, 32, 2.5) end,
    "nn%.TransformerLayer: argument #3 %(num_attention_heads%) must be a positive integer, got 2%.5", "a fractional head count" },
  { function() nn.Embedding(11, nil, { max_position_embeddings = 5 }) end,
    "nn%.Embedding: argument #2 %(embedding_dim%) must be a positive integer, got no value", "a nil size before the options" },
  { function() nn.Linear(4, 3, "bias") end, "nn%.Linear: argument #3 %(options%) must be a table, got a string",
    "options that are not a table" },
  { function() nn.Linear(4, 3, {}, {}) end, "nn%.Linear: too many arguments %(4; takes in_features, out_features %[, options%]%)",
    "one argument too many" },
  { function() nn.Linear(4, 3, { in_features = 4 }) end, "nn%.Linear: in_features is given as an argument and again in the options",
    "a size given twice" },
  { function() nn.Linear({ in_features = 4, out_features = 3 }, 5) end, "nn%.Linear: takes %(in_features, out_features %[, options%]%) or one options table",
    "a table then more arguments" },
  { function() nn.LuaLinear(4, "3") end, "nn%.LuaLinear: argument #2 %(out_features%) must be a positive integer, got a string",
    "LuaLinear: a string size" },
}
for _, c in ipairs(bad) do tap.error_like(c[1], c[2], "refused, naming the argument: " .. c[3]) end
tap.error_like(function() nn.Linear { in_features = "4", out_features = 3 } end,
  "nn%.Linear: option 'in_features' must be a positive integer, got a string", "the table form names a bad size by its key")

-- normalization as TransformerEngine spells it
tap.error_like(function() nn.LayerNormLinear(4, 3, { normalization = "layernorm" }) end,
  "unknown normalization 'layernorm' %(expected \"LayerNorm\" or \"RMSNorm\"%)", "normalization = \"layernorm\" is refused")
tap.error_like(function() nn.TransformerLayer(8, 16, 2, { normalization = "rmsnorm" }) end, "unknown normalization 'rmsnorm'",
  "normalization = \"rmsnorm\" is refused")
tap.error_like(function() nn.LayerNormMLP(8, 16, { normalization = true }) end,
  "nn%.LayerNormMLP: option 'normalization' must be a string, got a boolean", "a normalization that is not a string is refused")
local ln = nn.LayerNormLinear(4, 3, { normalization = "LayerNorm", name = "a" })
local rms = nn.LayerNormLinear(4, 3, { normalization = "RMSNorm", name = "b" })
tap.ok(#ln:parameters() == #rms:parameters() + 1, "LayerNorm has a bias RMSNorm has not (normalization reaches the module)")

tap.done_testing()
