-- size-arithmetic-is-checked.lua — sizes computed from user input never wrap: views with huge dimensions, module sizes
-- whose products or defaults overflow, counts beyond the C int range, token-file spans and windows with huge counts,
-- attention_kv positions, communicator layouts, grad-buffer alignments and optimizer step counts are refused with a
-- message naming the value, never truncated, wrapped or turned into out-of-bounds reads.
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

-- the CPU attention kernels keep a row of T scores and head-dim sums per thread on the stack: bounded, not a crash
do
  local cpu = { device = "cpu" }
  local long = tg.zeros({ 1, 65537, 6 }, cpu)
  tap.error_like(function() return tg.ops.attention_forward(long, 1) end,
    "attention_forward: 65537 positions, more than the CPU kernel's 65536", "CPU attention_forward past 65536 positions is refused")
  local wide = tg.zeros({ 1, 2, 3 * 65537 }, cpu)
  tap.error_like(function() return tg.ops.attention_forward(wide, 1) end,
    "attention_forward: head dim 65537, more than the CPU kernel's 65536", "... and a head dim past 65536")
  local q = tg.randn({ 1, 3, 6 }, cpu)
  local out, lse = tg.ops.attention_forward(q, 1)
  local longo, longl = tg.zeros({ 1, 65537, 2 }, cpu), tg.zeros({ 1, 1, 65537 }, cpu)
  tap.error_like(function() return tg.ops.attention_backward(longo, long, longo, longl, 1) end,
    "attention_backward: 65537 positions, more than the CPU kernel's 65536", "CPU attention_backward past 65536 positions is refused")
  tap.is(tg.ops.attention_backward(out, q, out, lse, 1):shape()[3], 6, "a short attention backward still runs")
end

-- communicator layouts: dp * pp is multiplied with a check (a wrapping product equalled the rank count)
local world = tg.comm.world()
tap.error_like(function() return world:split { dp = 7, pp = 7905747460161236407 } end,
  "split: dp=7 x pp=7905747460161236407 does not match the 1 ranks", "split{dp, pp} whose product wraps to the rank count is refused")
tap.error_like(function() return world:split { dp = 2 ^ 32 + 1 } end, "split: dp=4294967297 does not divide the 1 ranks",
  "split{dp = 2^32 + 1} names dp as given (not truncated to 1)")
tap.error_like(function() return world:split { pp = 0 } end, "split: pp = 0 must be an integer >= 1", "split{pp = 0} is refused")
tap.error_like(function() return world:split { dp = 1.5 } end, "split: dp = 1%.5 must be an integer >= 1", "split{dp = 1.5} is refused")
tap.error_like(function() return world:split { dp = 1, ppp = 2 } end, "split: unknown option 'ppp' %(known: dp, pp%)",
  "split refuses a misspelt key")
tap.is(world:split { dp = 1 }.pp_size, 1, "split{dp = 1} on one rank still gives one stage")

-- grad buffers: the layout's offsets are computed with checks (align = 2^62 wrapped to a negative size)
local ps = tg.nn.Linear(4, 4):parameters()
tap.error_like(function() return tg.comm.grad_buffer(ps, { align = 1 << 62 }) end,
  "grad buffer: align = 4611686018427387904 and pad_to = 1 give a layout past 64%-bit sizes",
  "grad_buffer with align = 2^62 is refused, naming it")
tap.error_like(function() return tg.comm.grad_buffer(ps, { pad_to = 1 << 62 }) end, "pad_to = 4611686018427387904 give a layout past",
  "grad_buffer with pad_to = 2^62 is refused, naming it")
tap.error_like(function() return tg.comm.grad_buffer(ps, { align = -1 }) end, "grad_buffer: option 'align' = %-1 must be an integer >= 0",
  "a negative align is refused, naming the value")
tap.error_like(function() return tg.comm.grad_buffer(ps, { bucket_byte = 64 }) end,
  "grad_buffer: unknown option 'bucket_byte' %(known: bucket_bytes, bucket_numel, align, pad_to%)", "grad_buffer refuses a misspelt key")
tap.is(tg.comm.grad_buffer(tg.nn.Linear(4, 4):parameters(), { align = 3, pad_to = 5 }).numel, 25,
  "align = 3, pad_to = 5 still lay 16 + 4 out as 25 (offsets 0 and 18, padded to 25)")

-- optimizer step counts: the capturable count stops at the i32 maximum, a host step must convert to int64 exactly
local count = tg.tensor({ 2147483647 }, { dtype = "i32", device = "cpu" }) -- on a GPU: refused at the next read
tap.error_like(function() tg.ops.adamw_count(count) end,
  "adamw_count: step = 2147483647 is the i32 maximum: the step count cannot advance", "adamw_count at INT32_MAX is refused (it wrapped)")
tap.is(count:totable()[1], 2147483647, "... and the count is left as it was")
count = tg.tensor({ 2147483646 }, { dtype = "i32", device = "cpu" })
tg.ops.adamw_count(count)
tap.is(count:totable()[1], 2147483647, "adamw_count up to INT32_MAX still counts")
local function adamw(step)
  return tg.ops.adamw_step(tg.ones { 4 }, nil, tg.ones { 4 }, tg.zeros { 4 }, tg.zeros { 4 }, { lr = 0.1, step = step })
end
tap.error_like(function() adamw(1e30) end, "adamw_step: option 'step' = 1e%+30 must be an integer from 1 to 2%^53",
  "adamw_step{step = 1e30} is refused, naming it (it converted to INT64_MIN)")
tap.error_like(function() adamw(0 / 0) end, "option 'step' = .*nan must be an integer", "adamw_step{step = NaN} is refused")
tap.error_like(function() adamw(2.5) end, "option 'step' = 2%.5 must be an integer", "adamw_step{step = 2.5} is refused")
tap.error_like(function() adamw(0) end, "option 'step' = 0 must be an integer from 1", "adamw_step{step = 0} is refused")
tap.lives_ok(function() adamw(2 ^ 53) end, "adamw_step{step = 2^53} runs")
tap.error_like(function()
  tg.ops.adamw_multi({ { p = tg.ones { 4 }, g = tg.ones { 4 }, m = tg.zeros { 4 }, v = tg.zeros { 4 } } }, { lr = 0.1, step = 1e30 })
end, "adamw_multi: option 'step' = 1e%+30 must be an integer", "adamw_multi{step = 1e30} is refused too")

-- C int arguments go through one range-checked read (tgl_checkint): never a C cast that truncates
tap.error_like(function() return tg.ops.attention_kv(kc, vc, qkv, 0, 2 ^ 32 + 2) end,
  "bad argument #5 to 'attention_kv' %(integer 4294967298 is out of range",
  "attention_kv with n_head = 2^32 + 2 is refused, naming the argument (it ran as 2 heads)")
tap.error_like(function() return tg.isatty((1 << 32) + 1) end, "bad argument #1 to 'isatty' %(integer 4294967297 is out of range",
  "isatty(2^32 + 1) is refused (it read fd 1)")
tap.error_like(function() return tg.ops.copy_multi(setmetatable({}, { __len = function() return 2 ^ 32 + 1 end }), {}) end,
  "copy_multi: 4294967297 destinations but 0 sources", "list counts in messages are printed as they are")
tap.error_like(function() return tg.ops.sumsq_multi(setmetatable({}, { __len = function() return 2 ^ 32 + 1 end })) end,
  "too many tensors", "a list length past the int range is refused")
tap.error_like(function() return tg.nn.Sequential(setmetatable({}, { __len = function() return 2 ^ 32 + 1 end })) end,
  "a list of 4294967297 entries %(at most 2147483647%)", "a module list whose length is past the int range is refused (tgl_len)")
tap.error_like(function() return tg.from_bytes("abcd", "f32", { 2 ^ 40, 2 ^ 40 }) end,
  "from_bytes: the shape's size in bytes does not fit in 64 bits", "from_bytes with a shape whose byte size wraps is refused")
tap.error_like(function() return tg.from_bytes("abcd", "f32", { 2 }) end, "from_bytes: 4 bytes for 2 f32 elements %(need 8%)",
  "from_bytes with too few bytes names both counts")
tap.done_testing()
