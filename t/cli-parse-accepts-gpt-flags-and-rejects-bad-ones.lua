-- tegraph.cli parses `--k v`, `--k=v`, flags and numbers (integers stay integers) and rejects unknown
-- flags, missing values and non-numbers with a message naming the flag, exit status 2 and the usage;
-- the examples and bench scripts accept every flag their documented and device runs pass.
local tap = require "tap"
local cli = require "tegraph.cli"

local defaults = {
  { "task", "reverse", "built-in task" },
  { "data", nil, "token file" },
  { "vocab", nil, "vocabulary size", "number" },
  { "vocab-pad", nil, "pad to a multiple of N", "number" },
  { "steps", 150, "optimizer steps" },
  { "lr", 3e-3, "peak learning rate" },
  { "clip", 1.0, "clip" },
  { "quiet", false, "no progress lines" },
  { "fuse-wgrad", false, "fused wgrad" },
  { "trace", nil, "trace file" },
  { "graph", false, "graphs", values = { "full" } },
}

local function try(...) return cli.try(defaults, { ... }) end

------------------------------------------------------------------------ values
local o = try()
tap.is(o.task, "reverse", "no arguments: a string option keeps its default")
tap.is(o.steps, 150, "no arguments: a number option keeps its default")
tap.is(o.quiet, false, "no arguments: a flag keeps its default")
tap.is(o.vocab, nil, "no arguments: a nil default stays nil")
tap.is(o.help, nil, "no arguments: no help")

o = try("--steps", "30", "--task", "sort")
tap.is(o.steps, 30, "--k v sets a number")
tap.is(math.type(o.steps), "integer", "an integer value stays an integer")
tap.is(o.task, "sort", "--k v sets a string")
o = try("--steps=40", "--task=sort", "--data=")
tap.is(o.steps, 40, "--k=v sets a number")
tap.is(math.type(o.steps), "integer", "--k=v: an integer value stays an integer")
tap.is(o.task, "sort", "--k=v sets a string")
tap.is(o.data, "", "--k= gives the empty string")
o = try("--lr", "1e-2", "--clip=0.5")
tap.is(o.lr, 0.01, "a float value")
tap.is(math.type(o.lr), "float", "a float stays a float")
tap.is(o.clip, 0.5, "--k=float")
o = try("--vocab", "50257", "--vocab-pad=64")
tap.is(o.vocab, 50257, "a nil default declared number takes a number (--k v)")
tap.is(math.type(o.vocab), "integer", "... as an integer")
tap.is(o["vocab-pad"], 64, "a nil default declared number takes a number (--k=v)")
o = try("--clip", "-1")
tap.is(o.clip, -1, "a negative number is a value, not a flag")
o = try("--steps", "1", "--steps", "2")
tap.is(o.steps, 2, "the last of a repeated option wins")
o = try("--data", "--x.bin")
tap.is(o.data, "--x.bin", "a value that is not one of the options is taken as it is")

------------------------------------------------------------------------ flags
o = try("--quiet", "--steps", "3")
tap.ok(o.quiet == true and o.steps == 3, "a bare flag is true and does not take the next argument")
for _, v in ipairs { "1", "true", "yes", "TRUE" } do
  tap.is(try("--quiet=" .. v).quiet, true, "--quiet=" .. v .. " is true")
end
for _, v in ipairs { "0", "false", "no" } do
  tap.is(try("--quiet", "--quiet=" .. v).quiet, false, "--quiet=" .. v .. " is false")
end

-- a flag that takes words: bare is true, `--graph full` and `--graph=full` give the word, other arguments stay
o = try("--graph", "--steps", "3")
tap.ok(o.graph == true and o.steps == 3, "--graph bare is true and leaves the next option alone")
tap.is(try("--graph", "full").graph, "full", "--graph full gives the word")
tap.is(try("--graph=full").graph, "full", "--graph=full gives the word")
o = cli.try(defaults, { "--graph", "partly" })
tap.ok(o == nil, "--graph followed by another word is not its value (an unknown argument)")
local r0, m0 = cli.try(defaults, { "--graph=partly" })
tap.ok(r0 == nil and m0:find("or --graph full (got 'partly')", 1, true) ~= nil, "--graph=partly fails listing the words: " .. tostring(m0))

------------------------------------------------------------------------ bad input
local function bad(args, want, what)
  local r, msg = cli.try(defaults, args)
  tap.ok(r == nil, what .. ": rejected")
  tap.is(msg, want, what .. ": the message names it")
end
bad({ "--no-such-flag" }, "unknown argument '--no-such-flag'", "an unknown flag")
bad({ "--no-such-flag=3" }, "unknown argument '--no-such-flag=3'", "an unknown --k=v")
bad({ "stray" }, "unknown argument 'stray'", "a positional argument")
bad({ "-q" }, "unknown argument '-q'", "a short option")
bad({ "--steps" }, "--steps needs a value", "a missing value at the end")
bad({ "--trace", "--steps", "3" }, "--trace needs a value", "a missing value before the next option")
bad({ "--steps", "x" }, "--steps needs a number (got 'x')", "a non-number")
bad({ "--steps=" }, "--steps needs a number (got '')", "an empty number")
bad({ "--vocab", "big" }, "--vocab needs a number (got 'big')", "a non-number for a nil default declared number")
bad({ "--steps", "2.5" }, "--steps needs an integer (got '2.5')", "a fraction for an option whose default is an integer")
bad({ "--steps", "1e999" }, "--steps needs a number (got '1e999')", "an infinite count")
bad({ "--lr", "1e400" }, "--lr needs a number (got '1e400')", "an infinite float")
bad({ "--lr", "nan" }, "--lr needs a number (got 'nan')", "NaN")
bad({ "--quiet=maybe" }, "--quiet is a flag: give it alone or as --quiet=1|true|yes|0|false|no (got 'maybe')",
  "a flag with a value that is not a boolean")

------------------------------------------------------------------------ parse: exit status, stderr, usage
local function buffer()
  local b = { text = "" }
  function b:write(...)
    for i = 1, select("#", ...) do self.text = self.text .. tostring((select(i, ...))) end
    return self
  end
  return b
end
-- Runs cli.parse with captured streams; returns the result, the exit code (nil: none), stdout, stderr.
local function parse(args)
  local code
  local out, err = buffer(), buffer()
  local r = cli.parse("examples/gpt.lua", defaults, args, { exit = function(c) code = c end, stdout = out, stderr = err })
  return r, code, out.text, err.text
end

local r, code, out, err = parse { "--steps", "x" }
tap.is(code, 2, "parse: a non-number exits 2")
tap.is(r, nil, "parse: and returns nothing")
tap.like(err, "^gpt%.lua: %-%-steps needs a number %(got 'x'%)\nusage: tegraph run examples/gpt%.lua ",
  "parse: stderr is 'PROG: message' then the usage")
tap.is(out, "", "parse: nothing on stdout")
r, code, out, err = parse { "--bogus" }
tap.is(code, 2, "parse: an unknown flag exits 2")
tap.like(err, "^gpt%.lua: unknown argument '%-%-bogus'\n", "parse: naming it")
r, code, out, err = parse { "--steps" }
tap.is(code, 2, "parse: a missing value exits 2")
tap.like(err, "^gpt%.lua: %-%-steps needs a value\nusage:", "parse: naming it, with the usage")
r, code, out, err = parse { "--help" }
tap.is(code, 0, "parse: --help exits 0")
tap.like(out, "^usage: tegraph run examples/gpt%.lua %[%-%-OPTION VALUE | %-%-FLAG%]%.%.%.\n\noptions:\n",
  "parse: --help prints the usage on stdout")
tap.is(err, "", "parse: --help writes nothing on stderr")
r, code = parse { "--steps", "3", "-h", "--bogus" }
tap.is(code, 0, "parse: -h stops the parse before later arguments")
r, code = parse { "--bogus", "-h" }
tap.is(code, 2, "parse: an error before -h is still an error")
r, code = parse { "--steps", "7", "--quiet" }
tap.is(code, nil, "parse: good arguments do not exit")
tap.ok(r and r.steps == 7 and r.quiet == true, "parse: and return the options")

------------------------------------------------------------------------ usage
local u = buffer()
cli.usage("examples/gpt.lua", defaults, u)
tap.like(u.text, "\n  %-%-steps          optimizer steps %(default 150%)\n", "usage: an option, its help, its default")
tap.like(u.text, "\n  %-%-vocab          vocabulary size\n", "usage: no default shown for a nil default")
tap.like(u.text, "\n  %-%-quiet          no progress lines %(default false%)\n", "usage: a flag")
u = buffer()
cli.usage("examples/bench/ops.lua", { { "iters", 20, "calls" } }, u)
tap.like(u.text, "^usage: tegraph run examples/bench/ops%.lua %[%-%-OPTION VALUE%]%.%.%.\n",
  "usage: without flags, none are offered")

------------------------------------------------------------------------ bad tables are the script's bug
tap.error_like(function() cli.try({ { "n", 1, "h", "string" } }, {}) end, "option %-%-n: default 1 is not a string",
  "a default that does not match its kind raises")
tap.error_like(function() cli.try({ { "n", nil, "h", "int" } }, {}) end, "option %-%-n: kind must be",
  "an unknown kind raises")
tap.error_like(function() cli.try({ { "n", 1, "h" }, { "n", 2, "h" } }, {}) end, "option %-%-n is listed twice",
  "a duplicate option raises")
tap.error_like(function() cli.try({ { "help", false, "h" } }, {}) end, "%-%-help is built in",
  "--help cannot be redefined")

------------------------------------------------------------------------ the real scripts, through `tegraph run`
local ex = require "run_example"
-- Runs a script (a path from the top of the source tree) with args; returns the exit code, stdout, stderr.
local function run(script, args)
  return ex.capture(ex.q(ex.top_build .. "/tegraph") .. " --device cpu run " .. ex.q(ex.top_src .. "/" .. script) .. " " .. args)
end

local c, so, se = run("examples/gpt.lua", "--steps x")
tap.is(c, 2, "gpt.lua --steps x exits 2")
tap.like(se, "^gpt%.lua: %-%-steps needs a number %(got 'x'%)\nusage: tegraph run examples/gpt%.lua", "and says why, with the usage")
c, so, se = run("examples/zero_bubble.lua", "--stages")
tap.is(c, 2, "zero_bubble.lua --stages (no value) exits 2")
tap.like(se, "^zero_bubble%.lua: %-%-stages needs a value\n", "and names the flag")

-- Option combinations that failed late (after training, or with a traceback) are usage errors: exit 2, and the
-- message (when given) names the option.
for _, u in ipairs {
  { "examples/gpt.lua", "--data never.bin --val-split 0", "gpt.lua --val-split 0 (it failed after loading, naming the file)",
    "^gpt%.lua: %-%-val%-split must be in %(0, 1%) %(got 0" },
  { "examples/gpt.lua", "--text never.txt --vocab 100", "gpt.lua --text with a --vocab below the tokenizer's",
    "%-%-vocab 100 is not the .* tokenizer's 256 ids" },
  { "examples/gpt.lua", "--text never.txt --vocab 300",
    "gpt.lua --text with a --vocab above the tokenizer's (its samples failed to decode after training)" },
  { "examples/generate.lua", "--keep 64 --max-tokens 2", "generate.lua --keep at the context",
    "%-%-keep 64 must be below the context 64" },
  { "examples/generate.lua", "--ckpt never --layers 7", "generate.lua --ckpt with a random-model shape option (ignored)",
    "%-%-layers shapes the random model; with %-%-ckpt the checkpoint's is used" },
  { "examples/generate.lua", "--prompt ''", "generate.lua with an empty prompt" },
  { "examples/zero_bubble.lua", "--layers 3 --stages 2", "zero_bubble.lua --layers not a multiple of 2 * stages",
    "^zero_bubble%.lua: %-%-layers %(3%) must be a multiple of 2 %* stages %(4%)" },
  { "examples/zero_bubble.lua", "--steps 0", "zero_bubble.lua --steps 0 (it ran everything, then failed)" },
  { "examples/custom_reduce.lua", "--every 1 --steps 5", "custom_reduce.lua --every 1 (its local-SGD check cannot hold)" },
  { "examples/bench/layers.lua", "--only bogus --device cpu", "layers.lua --only bogus (it printed an empty table)",
    "%-%-only bogus: no such configuration %(one of tiny%-launchbound, small" },
  { "examples/bench/layers.lua", "--only tiny --modes eager,grpahed --device cpu", "layers.lua --modes with a misspelt mode",
    "unknown mode 'grpahed'" },
} do
  c, so, se = run(u[1], u[2])
  tap.is(c, 2, u[3] .. " exits 2")
  if u[4] then tap.like(se, u[4], "... and the message names it") end
end

-- Every flag a documented or device run passes parses: they come before a final --help, which
-- only exits 0 when everything before it was accepted.
local accepted = {
  { "examples/gpt.lua", "--data /tmp/d.bin --vocab 50257 --vocab-pad 64 --context 1024 --width 768 --heads 12 " ..
    "--layers 12 --batch 8 --microbatches 2 --steps 30 --warmup 2 --dtype bf16 --fuse-wgrad --quiet " ..
    "--trace t.json --trace-steps 10:12 --make-data x.bin --tokens 2000000 --delay-wgrad=1 --task sort --digits 4 " ..
    "--lr 1e-3 --min-lr=1e-4 --weight-decay 0 --clip 0 --seed 1 --samples 0 --eval 0 --log l.jsonl --every 10" },
  { "examples/zero_bubble.lua", "--layers 4 --stages 2 --microbatches 4 --width 16 --tokens 8 --batch 2 --steps 1 " ..
    "--svg s --trace t.json --graphed --heads 2 --seed 3" },
  { "examples/bench/layers.lua", "--torch torch_layer.out --iters 30 --only gpt2-124M-like --modes eager,graphed " ..
    "--fused 1 --gemm 0 --device cpu" },
  { "examples/bench/ops.lua", "--only attention --iters 20 --cfg gpt2,large --device cpu" },
  { "examples/bench/optim.lua", "--iters 20 --layers 12 --vocab 50257 --dtype bf16 --device cpu" },
  { "examples/bench/graph_replay.lua", "--layers 12 --dim 64 --tokens 16 --heads 4 --iters 50 --microbatches 4 --device cpu" },
  { "examples/bench/allreduce.lua", "--numel 124439808 --iters 20" },
}
for _, a in ipairs(accepted) do
  c, so, se = run(a[1], a[2] .. " --help")
  tap.ok(c == 0 and so:find("^usage: tegraph run " .. a[1]:gsub("%p", "%%%0")) ~= nil,
    a[1] .. " accepts " .. a[2])
  if c ~= 0 then tap.diag(se) end
  c = run(a[1], "--iters-typo 3")
  tap.is(c, 2, a[1] .. " rejects an unknown flag with exit 2")
end
ex.cleanup()

tap.done_testing()
