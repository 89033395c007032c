-- tegraph.text: tokenizers by name, with an identity for cache file names, and a progress line for tokenizing.
local core = require "tegraph.core"

local text = {}

local function read(path)
  local f = core.fs.open_read(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- text.tokenizer(dir) -> tok, id: GPT-2's BPE from dir (vocab.json + merges.txt or encoder.json + vocab.bpe), or
-- the byte-level tokenizer when dir is nil or "bytes". id is a string that changes when the tokenizer does.
function text.tokenizer(dir)
  if dir == nil or dir == "bytes" then return core.tokenizer.bytes(), "bytes" end
  local tok = core.tokenizer.gpt2(dir)
  local v = read(dir .. "/vocab.json") or read(dir .. "/encoder.json") or ""
  local m = read(dir .. "/merges.txt") or read(dir .. "/vocab.bpe") or ""
  return tok, "gpt2:" .. core.ops.hash64(v, m)
end

-- A progress callback for tok:encode that redraws "label: x / y MB (p%)" on stream (default io.stderr);
-- nil when stream is not a terminal.
function text.progress(label, stream)
  stream = stream or io.stderr
  if not core.isatty(stream) then return nil end
  return function(done, total)
    stream:write(string.format("\r%s: %.1f / %.1f MB (%d%%)", label, done / 1e6, total / 1e6,
      total > 0 and done * 100 // total or 100))
    if done >= total then stream:write("\n") end
    stream:flush()
  end
end

return text
