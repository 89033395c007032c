-- Generation with a KV cache: cached (incremental) decoding gives the logits of a full recomputation; sampling
-- with a seed is reproducible; top_k = 1 equals greedy; past the context the window slides and each token is the
-- one a full forward over the same window picks; bad use fails clearly.
local tg = require "tegraph"
local nn = require "tegraph.nn"
local tap = require "tap"

tg.manual_seed(7)
local V, T = 40, 8
local model = nn.GPT { vocab_size = V, max_position_embeddings = T, hidden_size = 32, num_attention_heads = 4,
  num_layers = 2 }

local function ids(rows) return tg.tensor(rows, { dtype = "i32" }) end
local seq = { { 3, 1, 4, 1, 5, 9, 2, 6 }, { 2, 7, 1, 8, 2, 8, 1, 8 } }
local full = model:logits(ids(seq)):view(2 * T, V)

-- prefill 3 positions, then one at a time: every step's logits equal the full forward's rows
local cache = model:kv_cache(2)
local first = model:decode(cache, ids { { 3, 1, 4 }, { 2, 7, 1 } }):view(2 * 3, V)
local worst = 0
for b = 1, 2 do
  for t = 1, 3 do
    worst = math.max(worst, first:narrow((b - 1) * 3 + t, 1):max_abs_diff(full:narrow((b - 1) * T + t, 1)))
  end
end
for t = 4, T do
  local step = model:decode(cache, ids { { seq[1][t] }, { seq[2][t] } }):view(2, V)
  for b = 1, 2 do worst = math.max(worst, step:narrow(b, 1):max_abs_diff(full:narrow((b - 1) * T + t, 1))) end
end
tap.ok(worst < 1e-5, string.format("cached decoding equals full recomputation (max |diff| %.2e)", worst))
tap.is(cache.pos, T, "the cache holds T positions")
tap.error_like(function() model:decode(cache, ids { { 1 }, { 1 } }) end, "exceed the context 8",
  "decoding past the cache's end fails naming the context")
tap.error_like(function() model:decode(model:kv_cache(3), ids { { 1 }, { 1 } }) end, "idx has 2 rows, the cache 3",
  "a batch that does not match the cache fails")

-- sampling
local prompts = { { 1, 2, 3 }, { 4, 5, 6 } }
local a = model:generate(prompts, 20, { temperature = 1.0, seed = 11 })
local b = model:generate(prompts, 20, { temperature = 1.0, seed = 11 })
local c = model:generate(prompts, 20, { temperature = 1.0, seed = 12 })
tap.is_deeply(a, b, "the same seed gives the same tokens")
tap.isnt(table.concat(a[1], ",") .. table.concat(a[2], ","), table.concat(c[1], ",") .. table.concat(c[2], ","),
  "another seed gives other tokens")
local greedy = model:generate(prompts, 20, { temperature = 0 })
tap.is_deeply(model:generate(prompts, 20, { temperature = 1.0, top_k = 1, seed = 5 }), greedy, "top_k = 1 is greedy")
tap.is_deeply(model:generate(prompts, 20, { temperature = 0.7, top_p = 1e-9, seed = 5 }), greedy,
  "a tiny top_p keeps only the most likely token: greedy")
tap.is_deeply(model:generate(prompts, 20, { temperature = 0, cache = false }), greedy,
  "greedy with the cache equals greedy recomputing every window")

-- the sliding window: a reference that runs the full forward over the window each step
local function reference(prompt, n, keep)
  local s = { table.unpack(prompt) }
  local start, out = math.max(1, #s - T + 1), {}
  for _ = 1, n do
    local w = {}
    for i = start, #s do w[#w + 1] = s[i] end
    local lg = model:logits(ids { w }):view(#w, V):narrow(#w, 1):totable()[1]
    local tok = nn.argmax(lg) - 1
    s[#s + 1] = tok
    out[#out + 1] = tok
    if #s - start + 1 > T then start = #s - keep + 1 end
  end
  return out
end
local long = model:generate({ { 5, 6, 7 } }, 30, { temperature = 0, keep = 3 })
tap.is_deeply(long[1], reference({ 5, 6, 7 }, 30, 3), "30 tokens past a context of 8: the window slides (keep 3)")
tap.is_deeply(model:generate({ { 5, 6, 7 } }, 30, { temperature = 0 })[1], reference({ 5, 6, 7 }, 30, T // 2),
  "the default window keeps half the context")
local lp = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 }
tap.is_deeply(model:generate({ lp }, 5, { temperature = 0 })[1], reference(lp, 5, T // 2),
  "a prompt longer than the context starts from its last T tokens")
tap.is_deeply(model:generate({ { 5, 6, 7 } }, 30, { temperature = 1.0, seed = 9, keep = 3, cache = false }),
  model:generate({ { 5, 6, 7 } }, 30, { temperature = 1.0, seed = 9, keep = 3 }),
  "sampling 30 tokens past the context: without the cache the window slides as with it (the same tokens)")

-- streaming: on_token sees each step's tokens as they are chosen
local seen = {}
local outs = model:generate(prompts, 6, { temperature = 0.9, seed = 3, on_token = function(step, toks)
  seen[step] = { toks[1], toks[2] }
end })
local same = #seen == 6
for s = 1, 6 do same = same and seen[s][1] == outs[1][s] and seen[s][2] == outs[2][s] end
tap.ok(same, "on_token gets every step's tokens")

-- the sampler alone
local s = tg.sampler { temperature = 1, top_k = 2, seed = 1 }
local logits = tg.tensor({ { 0, 5, 1, 4.9, -1 } })
local hits = {}
for _ = 1, 200 do
  local t = s:sample(logits)[1]
  hits[t] = (hits[t] or 0) + 1
end
tap.ok((hits[1] or 0) + (hits[3] or 0) == 200 and hits[1] and hits[3],
  "top_k = 2 draws only the two most likely ids, both of them")
tap.is(tg.sampler { temperature = 0 }:sample(tg.tensor({ { 1, 3, 3, 2 } }))[1], 1, "greedy picks the first of equal maxima")
tap.is(tg.sampler { temperature = 0 }:sample(tg.tensor({ { 1, 3, 9, 2 } }), 2)[1], 1, "n limits the candidates")
tap.error_like(function() tg.sampler { top_p = 0 } end, "top_p", "top_p 0 is refused")
tap.error_like(function() tg.sampler { temperature = -1 } end, "temperature", "a negative temperature is refused")
tap.error_like(function() tg.sampler { topk = 3 } end, "unknown option 'topk'", "an unknown option is named")
-- logits that are not logits, or a row with nothing to choose by: refused, not a made-up token
local s1 = tg.sampler { temperature = 1, seed = 1 }
tap.error_like(function() return s1:sample(tg.tensor({ { 1, 2, 3 }, { -math.huge, -math.huge, -math.huge } })) end,
  "sample: row 1 of 2: no finite logit among the 3", "a row of all -inf logits is refused, naming the row")
tap.error_like(function() return tg.sampler { temperature = 0 }:sample(tg.full({ 4 }, -math.huge)) end,
  "sample: row 0 of 1: no finite logit", "... greedy too")
tap.error_like(function() return s1:sample(tg.zeros({ 2, 3 }, { dtype = "i32" })) end,
  "sample: the logits must be f32 or bf16, not i32", "integer logits are refused")
tap.error_like(function() return s1:sample(tg.zeros({ 2, 3 }, { dtype = "e4m3" })) end,
  "sample: the logits must be f32 or bf16, not e4m3", "FP8 codes are refused as logits")
tap.is(#s1:sample(tg.tensor({ { 0, -math.huge, 1 } }, { dtype = "bf16" })), 1, "bf16 logits with some -inf still sample")
-- a +inf logit takes all the probability (the softmax's limit); several share it evenly
do
  local si = tg.sampler { temperature = 1, seed = 3 }
  local all1 = true
  for _ = 1, 50 do all1 = all1 and si:sample(tg.tensor({ { 0, math.huge, 1, 2 } }))[1] == 1 end
  tap.ok(all1, "a row with one +inf logit always samples that id")
  local sp = tg.sampler { temperature = 0.7, top_k = 3, top_p = 0.5, seed = 4 }
  local ok1 = true
  for _ = 1, 50 do ok1 = ok1 and sp:sample(tg.tensor({ { 0.5, math.huge, -1, 2 } }))[1] == 1 end
  tap.ok(ok1, "... with top_k and top_p too")
  local seen = {}
  for _ = 1, 200 do local id = si:sample(tg.tensor({ { math.huge, 0, math.huge } }))[1]; seen[id] = (seen[id] or 0) + 1 end
  tap.ok(not seen[1] and (seen[0] or 0) > 50 and (seen[2] or 0) > 50,
    string.format("two +inf logits share the draws (%d, %d), the finite one gets none", seen[0] or 0, seen[2] or 0))
end
tap.error_like(function() tg.sampler { temperature = math.huge } end, "temperature inf must be finite",
  "an infinite temperature is refused")
tap.error_like(function() model:generate({ { 1 }, { 1, 2 } }, 3) end, "prompt 2 has 2 tokens",
  "prompts of different lengths are refused")
tap.done_testing()
