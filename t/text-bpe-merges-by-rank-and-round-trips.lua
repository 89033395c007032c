-- GPT-2 byte-level BPE from a hand-made vocabulary (Hugging Face and OpenAI file names): known merges apply by
-- rank, every occurrence left to right; pre-tokenization follows GPT-2's rule; <|endoftext|> is the eot id;
-- decode(encode(s)) == s on a generated corpus with invalid UTF-8, for the BPE and the byte-level tokenizer.
local tg = require "tegraph"
local tap = require "tap"
local bpe = require "small_bpe"

local dir = os.tmpname()
os.remove(dir)
local ids = bpe.write(dir .. "/hf")
bpe.write(dir .. "/openai", { style = "openai" })

local tok = tg.tokenizer.gpt2(dir .. "/hf")
tap.is(tok.kind, "gpt2", "kind")
tap.is(tok.vocab_size, 256 + #bpe.MERGES + 1, "vocab_size: 256 bytes + merges + <|endoftext|>")
tap.is(tok.eot, ids["<|endoftext|>"], "eot is <|endoftext|>'s id")
tap.is(tok.num_merges, #bpe.MERGES, "all merges read")

local function enc(s) return tok:encode(s) end
tap.is_deeply(enc(" the"), { ids[" the"] }, "' the' merges ' '+'t', 'h'+'e', then ' t'+'he'")
tap.is_deeply(enc("hehe"), { ids["he"], ids["he"] }, "a merge applies to every occurrence")
tap.is_deeply(enc("abc"), { ids["ab"], ids["c"] }, "rank decides: 'a b' (rank 5) before 'b c' (rank 6)")
tap.is_deeply(enc("aaa"), { ids["aa"], ids["a"] }, "overlapping pairs merge left to right")
tap.is_deeply(enc(" world"), { ids[" world"] }, "a chain of merges")
tap.is_deeply(enc("the"), { ids["t"], ids["he"] }, "no ' t' without the space")
tap.is_deeply(enc("ring"), { ids["r"], ids["ing"] }, "'in' then 'ing'")
tap.is_deeply(enc("x\n\n"), { ids["x"], ids["\n\n"] }, "a whitespace run at the end is one piece")
tap.is_deeply(enc("x\n\ny"), { ids["x"], ids["\n"], ids["\n"], ids["y"] }, "a newline run before a word splits")
tap.is_deeply(enc("<|endoftext|>"), tok:encode("<|endoftext|>"), "deterministic")
tap.ok(#enc("<|endoftext|>") > 1, "the text <|endoftext|> is ordinary text, not the special token")
tap.is(tok:decode({ tok.eot }), "<|endoftext|>", "the eot token decodes to its text")
tap.is(tok:decode(enc(" the world")), " the world", "decode inverts encode")

-- both file layouts give the same tokenizer
local tok2 = tg.tokenizer.gpt2(dir .. "/openai")
local sample = "Hello the world, it's a test: 12345 abc\n\n  ringing aaaa!!"
tap.is_deeply(tok2:encode(sample), tok:encode(sample), "encoder.json + vocab.bpe read like vocab.json + merges.txt")

-- GPT-2's pre-tokenization rule
local function pieces(s) return tg.tokenizer.pieces(s) end
tap.is_deeply(pieces("Hello world"), { "Hello", " world" }, "optional space + letters")
tap.is_deeply(pieces("it's they're we've I'm you'll he'd don't"),
  { "it", "'s", " they", "'re", " we", "'ve", " I", "'m", " you", "'ll", " he", "'d", " don", "'t" }, "contractions")
tap.is_deeply(pieces("abc123 4.5"), { "abc", "123", " 4", ".", "5" }, "letters, numbers and other characters split")
tap.is_deeply(pieces("a  b"), { "a", " ", " b" }, "a run of spaces leaves its last space to the next word")
tap.is_deeply(pieces("a\n\nb"), { "a", "\n", "\n", "b" }, "a newline run before a letter: all but the last, then the last")
tap.is_deeply(pieces("a \n b"), { "a", " \n", " b" }, "mixed whitespace before a space-prefixed word")
tap.is_deeply(pieces("end  "), { "end", "  " }, "trailing whitespace is one piece")
tap.is_deeply(pieces("x !?! y"), { "x", " !?!", " y" }, "optional space + other characters")
tap.is_deeply(pieces("héllo wörld"), { "héllo", " wörld" }, "accented letters are letters")
tap.is_deeply(pieces("日本語 テキスト"), { "日本語", " テキスト" }, "CJK letters are letters")
tap.is_deeply(pieces("x\u{00A0}y"), { "x", "\u{00A0}", "y" }, "U+00A0 is whitespace")
tap.is_deeply(pieces("a\xffb"), { "a", "\xff", "b" }, "an invalid byte is an other character")
tap.is_deeply(pieces("٣٤ 12"), { "٣٤", " 12" }, "Arabic-Indic digits are numbers")

-- round trip on a generated corpus: random bytes (invalid UTF-8), valid UTF-8, text-like runs
math.randomseed(13)
local alphabet = { "the", " ", "  ", "\n", "\t", "'s", "'ll", "é", "日本", "😀", "123", ".", "!", "\xff", "\xc3",
  "\xe6\x97", "\xf0\x9f\x98", "\0", "\r\n", "\u{00A0}", "aaa", "ring", " world" }
local parts = {}
for i = 1, 4000 do
  if math.random() < 0.3 then
    parts[i] = string.char(math.random(0, 255))
  else
    parts[i] = alphabet[math.random(#alphabet)]
  end
end
local corpus = table.concat(parts)
local bytes_tok = tg.tokenizer.bytes()
tap.is(bytes_tok:decode(bytes_tok:encode(corpus)), corpus, "byte-level: decode(encode(s)) == s on " .. #corpus .. " bytes")
tap.is(tok:decode(tok:encode(corpus)), corpus, "BPE: decode(encode(s)) == s on " .. #corpus .. " bytes with invalid UTF-8")
tap.is(table.concat(pieces(corpus)), corpus, "the pieces cover the corpus exactly")
local all = {}
for b = 0, 255 do all[#all + 1] = string.char(b) end
all = table.concat(all)
tap.is(tok:decode(tok:encode(all)), all, "every byte value round-trips")
local t = tok:encode(corpus, { out = "tensor" })
tap.is(t.dtype, "i32", "out = tensor gives i32 ids")
tap.is(tok:decode(t), corpus, "decode takes a tensor")
local u = tok:encode(corpus, { out = "u16" })
tap.is(#u, 2 * t:numel(), "out = u16: two bytes per token")
tap.is(string.unpack("<I2", u, 1), tok:encode(corpus)[1], "out = u16 is little-endian")
local seen, totals = 0, {}
tok:encode(corpus, { progress = function(done, total) seen = done; totals[total] = true end })
tap.is(seen, #corpus, "the progress callback reaches the text's length")
tap.is_deeply(totals, { [#corpus] = true }, "the progress callback gets the text's length as the total")
tap.error_like(function() tok:decode({ 0, tok.vocab_size }) end, "token 2 is " .. tok.vocab_size, "decode names a bad id")
tap.is(bytes_tok.vocab_size, 256, "byte-level vocab 256")
tap.is(bytes_tok.eot, nil, "byte-level has no eot")

os.execute("rm -rf '" .. dir .. "'")
tap.done_testing()
