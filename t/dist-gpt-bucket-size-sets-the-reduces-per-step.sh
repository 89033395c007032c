#!/bin/sh
# dist-gpt-bucket-size-sets-the-reduces-per-step.sh — examples/gpt.lua --bucket-mb on 2 CPU ranks: the size sets how many
# bucket reduces a step issues (the trace holds one all-reduce / reduce-scatter span per bucket and step), the losses do
# not depend on it (ddp: bit for bit), the trace reports the exposed reduce time per step, and a bad size is refused.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi
GPT="$SRCDIR/examples/gpt.lua"
SMALL="--width 32 --layers 2 --heads 2 --batch 4 --microbatches 2 --quiet --samples 0 --eval 0 --warmup 2 --steps 3 --trace-steps 2:3"

# losses FILE: "step loss" lines of a --log file, the loss with all its digits
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }
# spans KIND FILE: how many bucket spans of KIND (all_reduce ddp / reduce_scatter zero1) the trace holds
spans() { grep -o "\"name\":\"$1 bucket [0-9]*\"" "$2" | wc -l; }

echo "1..9"
for mb in 25 0.01 0.001; do
    bounded 300 "$TEGRAPH" run -n 2 "$GPT" $SMALL --bucket-mb $mb --log "$tmp/l$mb" --trace "$tmp/t$mb.json" \
        >"$tmp/o$mb" 2>&1 || { echo "# --bucket-mb $mb failed:"; sed 's/^/# /' "$tmp/o$mb"; }
done
big=$(spans "all_reduce ddp" "$tmp/t25.json.rank0")
mid=$(spans "all_reduce ddp" "$tmp/t0.01.json.rank0")
small=$(spans "all_reduce ddp" "$tmp/t0.001.json.rank0")
ok $([ "$big" -eq 2 ]; echo $?) "--bucket-mb 25: the whole small model is one bucket, one all-reduce in each of 2 traced steps (got $big)"
ok $([ "$mid" -gt "$big" ] && [ $((mid % 2)) -eq 0 ]; echo $?) "--bucket-mb 0.01: more buckets, the same count each step ($mid spans in 2 steps)"
ok $([ "$small" -gt "$mid" ]; echo $?) "--bucket-mb 0.001: more still ($small spans in 2 steps)"
a=$(losses "$tmp/l25"); b=$(losses "$tmp/l0.01"); c=$(losses "$tmp/l0.001")
ok $([ "$(echo "$a" | wc -l)" -eq 3 ] && [ "$a" = "$b" ] && [ "$a" = "$c" ]; echo $?) \
    "ddp's losses do not depend on the bucket size, bit for bit ($(echo $a | head -c 80))"
grep -Eq "^rank 0: per step \(mean of 2 traced\): reduce [0-9.]+ ms, [0-9.]+ ms exposed" "$tmp/o0.01"
ok $? "the trace's summary gives the reduce time and its exposed part per step"

bounded 300 "$TEGRAPH" run -n 2 "$GPT" $SMALL --zero1 --bucket-mb 0.01 --log "$tmp/z" --trace "$tmp/z.json" >"$tmp/zo" 2>&1
ok $? "--zero1 --bucket-mb 0.01 trains"
z=$(spans "reduce_scatter zero1" "$tmp/z.json.rank0")
ok $([ "$z" -eq "$mid" ]; echo $?) "zero1 reduce-scatters the same buckets as ddp all-reduces ($z spans, ddp $mid)"

"$TEGRAPH" run "$GPT" --bucket-mb 0 >"$tmp/bad" 2>&1
rc=$?
ok $([ $rc -eq 2 ] && grep -q -- "--bucket-mb must be at least" "$tmp/bad"; echo $?) "--bucket-mb 0 is a usage error (exit $rc)"
cat > "$tmp/new.lua" <<'LUA'
local tg = require "tegraph"
local train = require "tegraph.train"
local m = tg.nn.GPT { vocab_size = 8, max_position_embeddings = 4, num_layers = 1, hidden_size = 8, num_attention_heads = 2 }
for _, o in ipairs { { bucket_size = 1 }, { bucket_bytes = 0 }, { bucket_bytes = 1.5 } } do
  o.model = m
  local ok, err = pcall(train.new, o)
  print(ok and "accepted" or err)
end
LUA
"$TEGRAPH" run "$tmp/new.lua" >"$tmp/new" 2>&1
grep -q "train.new: unknown option 'bucket_size' (known: adamw, bucket_bytes," "$tmp/new" &&
    [ "$(grep -c 'bucket_bytes must be an integer >= 1' "$tmp/new")" -eq 2 ]
ok $? "train.new refuses a misspelt option naming the known ones, and a bucket_bytes that is not a positive integer"
sed 's/^/# /' "$tmp/new"
finish
