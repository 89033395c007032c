-- size-arithmetic-is-checked.lua — sizes computed from user input never wrap: views with huge dimensions, module sizes
-- whose products or defaults overflow, counts beyond the C int range, token-file spans and windows with huge counts
-- are refused with a message naming the value, never truncated or turned into out-of-bounds reads.
local tg = require "tegraph"
local tap = require "tap"

local t = tg.zeros { 4 }
tap.error_like(function() return t:view { 2 ^ 62, 2 ^ 62 } end,
  "view: shape %[4611686018427387904,4611686018427387904%] has more elements than fit in 64 bits, the tensor %[4%] has 4",
  "a view whose element count wraps is refused")
tap.error_like(function() return t:view { 2 ^ 32, 2 ^ 32, 0 } end, "view: shape %[4294967296,4294967296,0%] has 0 elements",
  "a view with a zero dimension and huge others is compared exactly (0 elements)")
tap.error_like(function() return t:view { -1, 2 ^ 62, 2 ^ 62 } end, "more elements than fit in 64 bits",
  "an inferred dimension next to a wrapping product is refused")
tap.error_like(function() return t:view(3, 2) end, "view: shape %[3,2%] has 6 elements, the tensor %[4%] has 4",
  "a view with another element count names both counts")
tap.error_like(function() return tg.zeros { 2 ^ 40, 2 ^ 40 } end, "too many elements", "a tensor whose size wraps is refused")

-- module sizes: each beyond the int range is refused, and the default ffn (4 * hidden) is checked too
tap.error_like(function() return tg.nn.TransformerLayer { hidden_size = 2 ^ 62, num_attention_heads = 4 } end,
  "nn%.TransformerLayer: option 'hidden_size' = 4611686018427387904 is too large %(at most 2147483647%)",
  "TransformerLayer{hidden_size = 2^62} is refused, naming the option")
tap.error_like(function() return tg.nn.TransformerLayer { hidden_size = 2 ^ 30, num_attention_heads = 4 } end,
  "ffn_hidden_size = 4 %* hidden_size = 4294967296 is too large",
  "the default ffn_hidden_size = 4 * hidden_size beyond the int range is refused")
tap.error_like(function() return tg.nn.TransformerLayer { hidden_size = 64, num_attention_heads = 2 ^ 32 + 4 } end,
  "option 'num_attention_heads' = 4294967300 is too large", "num_attention_heads = 2^32 + 4 is refused, not truncated to 4")
tap.error_like(function() return tg.nn.CausalSelfAttention(64, 2 ^ 32 + 4) end,
  "num_attention_heads' = 4294967300 is too large", "... positionally too")
tap.error_like(function() return tg.nn.Linear(2 ^ 31, 4) end, "in_features' = 2147483648 is too large",
  "Linear sizes beyond the int range are refused")
tap.error_like(function() return tg.nn.Linear(4, 4, { chunk = 2 ^ 32 + 1 }) end, "option 'chunk' = 4294967297 is out of range",
  "chunk beyond the int range is refused")

-- counts the C API takes as int
local lin = tg.nn.Linear(4, 4)
tap.error_like(function() return lin:forward(tg.zeros { 2, 4 }, 2 ^ 32 + 1) end, "microbatch",
  "a microbatch beyond the int range is refused")
tap.error_like(function() return tg.graph.make_graphed(lin, { sample = tg.zeros { 2, 4 }, microbatches = 2 ^ 32 + 2 }) end,
  "opts%.microbatches = 4294967298 is out of range", "make_graphed microbatches = 2^32 + 2 is refused, not truncated to 2")

-- token files: spans and windows whose byte counts wrap
local bytes = string.rep("\1\0", 16)
tap.error_like(function() return tg.ops.u16_scan(bytes, 0, 2 ^ 62) end, "token bytes: 4611686018427387904 tokens from byte 0",
  "u16_scan with a count whose byte size wraps is refused")
tap.error_like(function() return tg.ops.u16_scan(bytes, math.maxinteger, 1) end, "outside the 32 bytes given",
  "u16_scan with a start near the top of the range is refused")
local got = tg.ops.u16_scan(bytes, 0, 16)
tap.is(got, 1, "u16_scan within the bytes still reads them")
tap.error_like(function() return tg.ops.token_windows(bytes, 0, { 0 }, 2 ^ 61) end, "too many",
  "token_windows with a window length whose buffer size wraps is refused")
tap.error_like(function() return tg.ops.token_windows(bytes, 0, { 0 }, 1000) end, "windows of 1000 tokens do not fit in the 32 bytes",
  "token_windows longer than the bytes is refused before allocating")
tap.error_like(function() return tg.ops.token_windows(bytes, 0, { 2 ^ 62 }, 4) end, "window 1 starts at 4611686018427387904",
  "token_windows with a start whose end wraps is refused, naming the window")
local x, y = tg.ops.token_windows(bytes, 0, { 0, 3 }, 4)
tap.is(x:shape()[2], 4, "token_windows within the bytes still works")

-- attention_kv: the cache bound pos + T is computed with a check (a position near the top of the range wrapped past it)
local qkv = tg.randn { 1, 4, 24 }
local kc, vc = tg.zeros { 1, 8, 8 }, tg.zeros { 1, 8, 8 }
tap.error_like(function() return tg.ops.attention_kv(kc, vc, qkv, math.maxinteger, 2) end,
  "attention_kv: 4 positions from position 9223372036854775807 do not fit the cache of 8 positions",
  "attention_kv with pos = math.maxinteger is refused, naming the position (pos + T wrapped)")
tap.error_like(function() return tg.ops.attention_kv(kc, vc, qkv, math.maxinteger - 2, 2) end,
  "4 positions from position 9223372036854775805 do not fit", "attention_kv with pos = maxinteger - 2 is refused")
tap.error_like(function() return tg.ops.attention_kv(kc, vc, qkv, 2 ^ 62, 2) end,
  "4 positions from position 4611686018427387904 do not fit", "attention_kv with pos = 2^62 is refused")
tap.error_like(function() return tg.ops.attention_kv(kc, vc, qkv, 5, 2) end, "4 positions from position 5 do not fit",
  "attention_kv one position past the cache is refused")
tap.is(tg.ops.attention_kv(kc, vc, qkv, 4, 2):shape()[2], 4, "attention_kv filling the cache to its end still works")
tap.done_testing()
