-- A checkpoint written by gpt.lua --text is what generate.lua --ckpt samples from: checkpoint.load_model rebuilds
-- the nn.GPT from the recorded config with the trained weights (equal to the file's), returns the tokenizer the run
-- used (bytes, or the --tokenizer directory) as meta.tokenizer, and generate.lua's greedy text equals the
-- in-process greedy decode of the loaded model; a checkpoint without a GPT's config, or holding a tensor the model
-- lacks, is refused naming the file and what is wrong; a --data run's checkpoint (no tokenizer recorded) of a
-- vocabulary other than the bytes' is refused up front unless --tokenizer is given.
local tg = require "tegraph"
local tap = require "tap"
local bpe = require "small_bpe"
local checkpoint = require "tegraph.checkpoint"
local text = require "tegraph.text"

local ex = require "run_example"
local base = ex.tmpdir()
local run, write = ex.run, ex.write

local lines = {}
for i = 1, 300 do lines[i] = string.format("the cat sat on the mat %d times. the dog ran.", i % 7) end
local txt = base .. "/input.txt"
write(txt, table.concat(lines, "\n"))
local small = "--context 16 --layers 2 --width 32 --heads 2 --batch 8 --microbatches 1 --samples 0 --quiet"

-- bytes
local ok, out = run("gpt.lua", "--text " .. txt .. " --steps 30 --out " .. base .. "/run " .. small)
tap.ok(ok, "gpt.lua --text --out trains and saves")
tap.like(out, "saved a checkpoint to " .. base .. "/run/step_00000030", "the checkpoint of the last step")

local model, meta = checkpoint.load_model(base .. "/run")
tap.is(meta.tokenizer, "bytes", "meta.tokenizer: the byte-level tokenizer the run used")
tap.is(meta.step, 30, "meta.step: the step of the checkpoint")
tap.is(meta.path, base .. "/run/step_00000030", "meta.path: the checkpoint the run directory's latest names")
tap.is(model.cfg.vocab_size, 256, "the model's vocabulary from the config")
tap.is(model.cfg.hidden_size, 32, "its width")
tap.is(#model.layers, 2, "its layers")
local file = tg.load(base .. "/run/step_00000030/model.safetensors")
local same, count = true, 0
for _, p in ipairs(model:parameters()) do
  local a, b = p.data:totable(), file[p.name] and file[p.name]:totable()
  if not b then same = false else
    local fa, fb = {}, {}
    local function flat(t, o) for _, v in ipairs(t) do if type(v) == "table" then flat(v, o) else o[#o + 1] = v end end end
    flat(a, fa)
    flat(b, fb)
    for i = 1, math.max(#fa, #fb) do if fa[i] ~= fb[i] then same = false end end
  end
  count = count + 1
end
tap.ok(same and count == #model:parameters(), "every parameter equals the file's tensor (" .. count .. " parameters)")

-- generate.lua --ckpt: greedy, so its text is the loaded model's greedy decode
ok, out = run("generate.lua", "--ckpt " .. base .. "/run --prompt 'the cat' --max-tokens 12 --temperature 0")
tap.ok(ok, "generate.lua --ckpt DIR runs on the text run's checkpoint")
tap.like(out, "generated 12 tokens", "... and generates the tokens asked for")
local tok = text.tokenizer("bytes")
local want = model:generate({ tok:encode("the cat") }, 12, { temperature = 0 })[1]
local expect = "the cat" .. tok:decode(want)
tap.is(out:sub(1, #expect), expect, "... the in-process greedy text of the loaded model")
tap.ok(#want == 12, "12 tokens decoded in-process")

-- a GPT-2 BPE tokenizer directory: recorded and used by generate.lua
bpe.write(base .. "/tok")
ok, out = run("gpt.lua", "--text " .. txt .. " --tokenizer " .. base .. "/tok --steps 3 --out " .. base .. "/bpe " .. small)
tap.ok(ok, "gpt.lua --text --tokenizer DIR --out trains and saves")
local m2, meta2 = checkpoint.load_model(base .. "/bpe")
tap.is(meta2.tokenizer, base .. "/tok", "meta.tokenizer: the --tokenizer directory")
tap.is(m2.cfg.vocab_size, 256 + #bpe.MERGES + 1, "the model's vocabulary is the tokenizer's")
ok, out = run("generate.lua", "--ckpt " .. base .. "/bpe --prompt 'the cat' --max-tokens 4 --temperature 0")
local want2 = m2:generate({ text.tokenizer(base .. "/tok"):encode("the cat") }, 4, { temperature = 0 })[1]
local expect2 = "the cat" .. text.tokenizer(base .. "/tok"):decode(want2)
tap.ok(ok and #want2 == 4 and out:sub(1, #expect2) == expect2,
  "generate.lua decodes with the recorded tokenizer (" .. string.format("%q", expect2) .. ")")

-- refused
os.execute("mkdir -p '" .. base .. "/bare'")
tg.save(base .. "/bare/model.safetensors", { ["embed.wte"] = tg.zeros({ 4, 4 }) })
local okb, err = pcall(checkpoint.load_model, base .. "/bare")
tap.ok(not okb and err:find(base .. "/bare/model.safetensors", 1, true) and err:find("model.vocab_size", 1, true),
  "a file without a GPT's config is refused naming the file and the entry (" .. tostring(err) .. ")")
local d = base .. "/run/step_00000030"
local w = tg.load(d .. "/model.safetensors")
w["extra.weight"] = tg.zeros({ 2 })
local core = require "tegraph.core"
local f = core.safetensors.open(d .. "/model.safetensors")
local mmeta = f:metadata()
f:close()
os.execute("mkdir -p '" .. base .. "/extra'")
tg.save(base .. "/extra/model.safetensors", w, mmeta)
okb, err = pcall(checkpoint.load_model, base .. "/extra")
tap.ok(not okb and err:find("tensor 'extra.weight' in the file is not in the model", 1, true),
  "an extra tensor is refused naming it (" .. tostring(err) .. ")")
w["extra.weight"] = nil
w["h.1.mlp.fc2.weight"] = nil
tg.save(base .. "/extra/model.safetensors", w, mmeta)
okb, err = pcall(checkpoint.load_model, base .. "/extra")
tap.ok(not okb and err:find("'h.1.mlp.fc2.weight'", 1, true), "a missing tensor is refused naming it (" .. tostring(err) .. ")")
okb, err = pcall(checkpoint.load_model, base .. "/none")
tap.ok(not okb and err:find(base .. "/none", 1, true), "no checkpoint there: refused naming the path")

-- a --data run records no tokenizer: generate.lua --ckpt refuses up front when the vocabulary is not the bytes'
local toks = {}
for i = 1, 4000 do toks[i] = (i * 37) % 300 end
require("tegraph.data").write(base .. "/big.bin", toks)
ok, out = run("gpt.lua", "--data " .. base .. "/big.bin --steps 2 --out " .. base .. "/data " .. small)
tap.ok(ok, "gpt.lua --data (vocabulary 300) --out trains and saves")
local gok, gout = run("generate.lua", "--ckpt " .. base .. "/data --max-tokens 5 --temperature 5")
tap.ok(not gok, "generate.lua --ckpt of a --data run without --tokenizer is refused")
tap.like(gout, "^generate%.lua: %-%-ckpt [^\n]*/data records no tokenizer and its vocabulary is 300: give %-%-tokenizer DIR",
  "... up front, saying why and what to give (not a tokenizer error mid-stream)")
os.execute("rm -rf '" .. base .. "'")
tap.done_testing()
