-- gpt2_hf_check.lua — loads a GPT-2 model.safetensors written by examples/bench/peers/gpt2_hf_export.py into
-- nn.GPT and compares tegraph's logits with PyTorch's for the same input; exits 1 when they differ by more than
-- --tol (default 2e-4 in f32, 0.1 in bf16).
--
--   tegraph run examples/bench/gpt2_hf_check.lua --dir /tmp/gpt2hf [--dtype bf16] [--device cuda]
local tg = require "tegraph"
local nn = require "tegraph.nn"
local gpt2 = require "tegraph.gpt2"
local cli = require "tegraph.cli"

local opt = cli.parse("examples/bench/gpt2_hf_check.lua", {
  { "dir", nil, "directory with model.safetensors and logits.safetensors", "string" },
  { "dtype", "f32", "compute dtype: f32 or bf16" },
  { "device", nil, "cpu or cuda (default: the default device)", "string" },
  { "tol", nil, "largest allowed |logit difference|", "number" },
}, arg)
if not opt.dir then error("gpt2_hf_check.lua: --dir is required", 0) end
local dev = opt.device or tg.default_device()
local ref, meta = tg.load(opt.dir .. "/logits.safetensors", { device = dev })
local function n(k) return math.tointeger(tonumber(meta[k])) end
local model = nn.GPT { vocab_size = n("vocab"), max_position_embeddings = n("context"), hidden_size = n("width"),
  num_attention_heads = n("heads"), num_layers = n("layers"), dtype = opt.dtype, device = dev,
  make_vocab_size_divisible_by = 64 }
gpt2.load_hf(model, opt.dir .. "/model.safetensors")
local logits = model:logits(ref.idx)
local V = n("vocab")
local B, T = ref.idx:dim(1), ref.idx:dim(2)
local got = tg.empty({ B * T, V }, { device = dev })
local flat = logits:view(B * T, logits:dim(3))
for r = 1, B * T do got:narrow(r, 1):copy_(flat:narrow(r, 1):view(-1):narrow(1, V):view(1, V)) end
local diff = got:max_abs_diff(ref.logits:view(B * T, V))
local tol = opt.tol or (opt.dtype == "bf16" and 0.1 or 2e-4)
print(string.format("gpt2_hf_check: %s on %s: max |tegraph - PyTorch| logit difference %.3g over %d x %d logits (max |logit| %.3g), tolerance %g: %s",
  opt.dtype, dev, diff, B * T, V, ref.logits:max_abs(), tol, diff <= tol and "ok" or "FAILED"))
if not (diff <= tol) then os.exit(1) end
