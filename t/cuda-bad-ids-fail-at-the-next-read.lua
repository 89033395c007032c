-- cuda-bad-ids-fail-at-the-next-read.lua — on a GPU an embedding id outside the table, a cross-entropy target
-- outside the vocabulary (forward, backward and fused) or a value that does not fit an integer dtype in a conversion
-- (to, copy_) does not fail the launch (no synchronisation is added): the device records the first bad one, and the
-- next host read of the device (the loss; totable, item, sum, max_abs, tostring alike) fails naming it, its position
-- and that it came from work before the read; the record is then cleared, and good ids read fine.
-- Without a CUDA device it skips.
local tg = require "tegraph"
local tap = require "tap"
if tg.device_count("cuda") == 0 then tap.skip_all("no CUDA device") end
local dev = "cuda:0"

local wte = tg.randn({ 8, 4 }, { device = dev })
local ids = tg.tensor({ { 1, 2, 3, 3 }, { 0, 9, 1, 12 } }, { dtype = "i32", device = dev })
local out
tap.lives_ok(function() out = tg.ops.embedding_forward(ids, wte) end, "an embedding with a bad id launches without a sync")
tap.error_like(function() return out:totable() end, "embedding: token id 9 at position 5 is outside the table of 8 rows",
  "the next read names the first bad id and its position")
tap.lives_ok(function() return out:totable() end, "the record is cleared after it was reported")
-- every host read reports it: sum, max_abs, print (tostring) and item, each once, naming where it came from
for _, read in ipairs {
  { "sum", function(t) return t:sum() end }, { "max_abs", function(t) return t:max_abs() end },
  { "tostring", function(t) return tostring(t) end }, { "item", function(t) return t:view(32):narrow(1, 1):item() end },
} do
  local o = tg.ops.embedding_forward(ids, wte)
  tap.error_like(function() return read[2](o) end,
    "embedding: token id 9 at position 5 is outside the table of 8 rows %(ids 0 to 7%); found by this host read of cuda:0",
    read[1] .. " after a bad id names it, and that it came from work before the read")
  tap.lives_ok(function() return o:totable() end, "... once: " .. read[1] .. " does not clear it silently")
end
local dw = tg.zeros({ 8, 4 }, { device = dev })
tap.lives_ok(function() tg.ops.embedding_backward_dw(dw, nil, tg.ones({ 2, 4, 4 }, { device = dev }), ids) end,
  "the table's gradient with a bad id launches too")
tap.error_like(function() return dw:totable() end, "embedding: token id 9 at position 5 is outside the table of 8 rows",
  "... and the next read names it")

local logits = tg.randn({ 4, 8 }, { device = dev })
local loss
tap.lives_ok(function()
  loss = tg.ops.cross_entropy_forward(logits, tg.tensor({ 1, -1, 30, 7 }, { dtype = "i32", device = dev }))
end, "a cross-entropy with a bad target launches")
tap.error_like(function() return loss:totable() end, "cross_entropy: target 30 at row 2 is outside the vocabulary of 8",
  "reading the loss names the target and its row")
loss = tg.ops.cross_entropy_forward(logits, tg.tensor({ 1, -1, 3, 7 }, { dtype = "i32", device = dev }))
tap.is(loss:totable()[2], 3, "good targets (and the ignore_index) read fine: 3 rows counted")
local bad = tg.tensor({ 1, -1, 30, 7 }, { dtype = "i32", device = dev })
local dlogits
tap.lives_ok(function() dlogits = tg.ops.cross_entropy_backward(logits, bad, loss) end,
  "a cross-entropy backward with a bad target launches")
tap.error_like(function() return dlogits:totable() end, "cross_entropy: target 30 at row 2 is outside the vocabulary of 8",
  "... and the next read names the target and its row")
local losses
tap.lives_ok(function() losses = tg.ops.cross_entropy_fused(logits, bad, loss, 1, -1, tg.zeros({ 4, 8 }, { device = dev })) end,
  "the fused cross-entropy with a bad target launches")
tap.error_like(function() return losses:totable() end, "cross_entropy: target 30 at row 2 is outside the vocabulary of 8",
  "... and the next read names it")

local i32
tap.lives_ok(function() i32 = tg.tensor({ 1, 2, 2.5, 3e9 }, { device = dev }):to("i32") end,
  "a conversion to i32 with a value that does not fit launches")
tap.error_like(function() return i32:totable() end, "copy: value 2%.5 at index 2 of the f32 source does not fit i32",
  "the next read names the first value that does not fit and its index")
tap.is_deeply(tg.tensor({ 1, -2, 3e4 }, { device = dev }):to("bf16"):to("i32"):totable(), { 1, -2, 29952 },
  "values that fit convert (bf16 to i32) and read fine")
tap.error_like(function() return tg.tensor({ 0, 70000 }, { dtype = "i32", device = dev }):to("u16"):totable() end,
  "value 70000 at index 1 of the i32 source does not fit u16", "i32 70000 to u16 fails the next read")
tap.done_testing()
