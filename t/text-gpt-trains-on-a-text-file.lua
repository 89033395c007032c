-- gpt.lua --text: a text file is tokenized (bytes or a GPT-2 BPE directory), cached next to it and reused,
-- trained on with validation loss every --eval-every steps (printed and in --log), then sampled as text;
-- nanoGPT's headerless .bin loads with --vocab; a byte-level file gets vocab 256 without --vocab; bad tokenizer
-- files fail naming the file and line; a damaged token cache is rebuilt.
local tg = require "tegraph"
local tap = require "tap"
local bpe = require "small_bpe"

local ex = require "run_example"
local base = ex.tmpdir()
local run, write = ex.run, ex.write

local lines = {}
for i = 1, 300 do lines[i] = string.format("the cat sat on the mat %d times. the dog ran.", i % 7) end
local txt = base .. "/input.txt"
write(txt, table.concat(lines, "\n"))
local small = "--context 16 --layers 1 --width 32 --heads 2 --batch 8 --microbatches 1 --sample-tokens 24 --quiet"

local ok, out = run("gpt.lua", "--text " .. txt .. " --val-split 0.1 --steps 20 --eval-every 10 " .. small ..
  " --log " .. base .. "/log.jsonl")
tap.ok(ok, "gpt.lua --text trains")
local bin = out:match("tokens written to (%S+)")
tap.ok(bin and bin:find(txt, 1, true) == 1 and bin:match("%.%x+%.bin$"), "the tokens go to FILE.<hash>.bin next to it")
tap.like(out, "vocab 256", "byte-level: vocab 256 from the tokenizer")
tap.like(out, "step 10: val loss %d", "validation loss at step 10")
tap.like(out, "step 20: val loss %d", "and at the last step")
local f = io.open(base .. "/log.jsonl")
local log = f and f:read("a") or ""
if f then f:close() end
tap.like(log, '"step":10,"val_loss":', "the validation loss is in --log")
tap.like(out, "samples %(temperature", "samples are printed after training")
tap.like(out, '%-%-%- "[^"]*" | ', "samples print as text (prompt | model)")
local first, last = out:match("loss (%d+%.%d+) %-> (%d+%.%d+)")
tap.ok(first and tonumber(last) < tonumber(first), "the loss falls")

ok, out = run("gpt.lua", "--text " .. txt .. " --steps 2 " .. small)
tap.like(out, "tokens cached in " .. bin:gsub("%p", "%%%0"), "a second run reuses the cached tokens")
-- a damaged cache (cut short) is tokenized again and replaced, not read as it is
local cf = assert(io.open(bin, "rb"))
local cached = cf:read("a")
cf:close()
write(bin, cached:sub(1, #cached - 100))
ok, out = run("gpt.lua", "--text " .. txt .. " --steps 2 " .. small)
tap.ok(ok and out:match("tokens written to " .. bin:gsub("%p", "%%%0")), "a truncated token cache is rebuilt, the run goes on")
cf = assert(io.open(bin, "rb"))
tap.is(#cf:read("a"), #cached, "... to its full size")
cf:close()
write(bin, cached:sub(1, 8) .. string.pack("<i4", -5) .. cached:sub(13))
ok, out = run("gpt.lua", "--text " .. txt .. " --steps 2 " .. small)
tap.ok(ok and out:match("tokens written to"), "a token cache with a bad header is rebuilt")
write(txt, table.concat(lines, "\n") .. "\nmore")
ok, out = run("gpt.lua", "--text " .. txt .. " --steps 2 " .. small)
tap.ok(ok and out:match("tokens written to (%S+)") ~= bin, "a changed file is tokenized again")

-- a GPT-2 BPE directory
bpe.write(base .. "/tok")
ok, out = run("gpt.lua", "--text " .. txt .. " --tokenizer " .. base .. "/tok --steps 4 --val " .. txt .. " " .. small)
tap.ok(ok, "--tokenizer DIR trains")
tap.like(out, "vocab " .. (256 + #bpe.MERGES + 1), "the vocabulary size comes from the tokenizer")
tap.like(out, "gpt2 tokens", "the BPE tokenizer is used")
tap.like(out, "val loss", "--val FILE is tokenized and evaluated")

-- token files: nanoGPT's headerless uint16 and the vocabulary from the file
local raw = {}
for i = 1, 2000 do raw[i] = string.pack("<I2", (i * 7) % 300) end
write(base .. "/nano.bin", table.concat(raw))
ok, out = run("gpt.lua", "--data " .. base .. "/nano.bin --vocab 300 --steps 2 " .. small)
tap.ok(ok, "a headerless nanoGPT .bin loads with --vocab")
ok, out = run("gpt.lua", "--data " .. base .. "/nano.bin --steps 2 " .. small)
tap.ok(not ok and out:match("nano%.bin: bad magic") and out:match("%-%-vocab"),
  "without --vocab it fails naming the file and --vocab")
local data = require "tegraph.data"
local bytes = {}
for i = 1, 3000 do bytes[i] = (i * 13) % 200 end
data.write(base .. "/bytes.bin", bytes)
ok, out = run("gpt.lua", "--data " .. base .. "/bytes.bin --steps 2 " .. small)
tap.like(out, "vocab 256,", "a byte-level .bin without --vocab gets 256")
ok, out = run("gpt.lua", "--tokenizer " .. base .. "/tok --steps 2")
tap.like(out, "%-%-tokenizer goes with %-%-text", "--tokenizer without --text is refused")

-- generate.lua streams and benchmarks
ok, out = run("generate.lua", "--prompt 'the cat' --max-tokens 12 --context 8")
tap.ok(ok and out:match("^the cat") and out:match("generated 12 tokens"), "generate.lua streams past the context")
ok, out = run("generate.lua", "--ckpt " .. base .. "/none --max-tokens 2")
tap.ok(not ok and out:find(base .. "/none: no checkpoint there", 1, true) ~= nil,
  "generate.lua --ckpt fails clearly when it cannot load, naming the path")

-- bad tokenizer files
local function bad(name, vocab, merges, pattern, what)
  local d = base .. "/" .. name
  os.execute("mkdir -p '" .. d .. "'")
  bpe.write(d)
  if vocab then write(d .. "/vocab.json", vocab) end
  if merges then write(d .. "/merges.txt", merges) end
  tap.error_like(function() tg.tokenizer.gpt2(d) end, pattern, what)
end
tap.error_like(function() tg.tokenizer.gpt2(base .. "/nowhere") end, "nowhere: no GPT%-2 tokenizer here",
  "a directory without the files is named")
bad("b1", '{"a": 0, "b": }', nil, "vocab%.json:1: the id of token \"b\"", "a broken id names file, line and token")
bad("b2", '{"a": 0\n, "b": 1', nil, "vocab%.json:2: expected ',' or '}'", "an unterminated object names the line")
bad("b3", '{"a": 0, "b": 2}', nil, "vocab%.json: 2 tokens but ids up to 2", "ids with a gap are refused")
bad("b4", '{"a": 0, "b": 1}', nil, "byte 0x00 has no token", "a vocabulary without all bytes is refused")
bad("b5", nil, "#version: 0.2\nĠ t\nq zz\n", "merges%.txt:3: token \"zz\" is not in the vocabulary",
  "a merge naming an unknown token names the line")
bad("b6", nil, "#version: 0.2\nĠt h e\n", "merges%.txt:2: expected two tokens", "a malformed merge line is named")
bad("b7", '{"a\\q": 0}', nil, "bad escape", "a bad JSON escape is refused")
-- a merge token longer than any vocabulary entry (found by fuzzing: it overflowed a stack buffer)
bad("b8", nil, "#version: 0.2\n\196\160 t\ne " .. string.rep("F", 1500) .. "\n",
  "merges%.txt:3: \"FFFF+\" is not in GPT%-2's byte%-to%-unicode form %(longer than any vocabulary entry%)",
  "a merge token of 1500 bytes is refused naming the line")
bad("b9", nil, "#version: 0.2\n" .. string.rep("x", 5000) .. " t\n",
  "merges%.txt:2: .*%(longer than any vocabulary entry%)", "a merge token of 5000 bytes too")

os.execute("rm -rf '" .. base .. "'")
tap.done_testing()
