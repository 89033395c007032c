#!/bin/sh
# dist-ddp-zero1-refuse-ranks-with-other-parameters.sh — ddp and zero1 compare the buckets' layouts (each
# parameter's name and shape, in buffer order) across the ranks when they are made: ranks whose parameters
# differ in shape (which the padding of the buckets can hide from the size check) fail on both ranks naming
# the bucket and the ranks, instead of averaging different parameters.
. "${TG_TOP_SRCDIR:-.}/t/lib/dist.sh"
skip_unless_mpi

cat >"$tmp/policy.lua" <<'LUA'
local tg = require "tegraph"
local reduce = require "tegraph.reduce"
local comm = tg.comm
comm.init { timeout = 60 }
local r = comm.rank()
local policy, fault, bucket = arg[1], arg[2], tonumber(arg[3] or "")
tg.manual_seed(1)
local H = (fault == "diffshape" and r == 1) and 16 or 12
local model = tg.nn.Sequential { tg.nn.Linear(8, H, { name = "fc_in" }), tg.nn.Linear(H, 8, { name = "fc_out" }), name = "net" }
local ok, err = pcall(function()
  if policy == "ddp" then reduce.ddp { params = model:parameters(), bucket_numel = bucket }
  else reduce.zero1 { params = model:parameters(), bucket_numel = bucket, lr = 1e-2 } end
end)
print(string.format("rank %d: %s", r, ok and "made" or tostring(err)))
LUA

run() { # run NAME ARGS...: output in $tmp/NAME.out, rc
    name=$1
    shift
    bounded 120 "$TG_MPIRUN" -np 2 --oversubscribe "$TEGRAPH" run "$tmp/policy.lua" "$@" >"$tmp/$name.out" 2>&1
    rc=$?
}

echo "1..5"
run ddp ddp diffshape 50
both "$tmp/ddp.out" "ddp: the ranks' parameters differ: bucket 1 of 2 holds other parameters (or shapes) on rank 1 than on rank 0"
ok $? "ddp with other parameter shapes on rank 1 (the padded buckets of equal size): both ranks fail naming the bucket and the ranks"
grep -q "^rank 1: .*fc_out.weight (8, 16)" "$tmp/ddp.out" && grep -q "^rank 0: .*fc_out.weight (8, 12)" "$tmp/ddp.out"
ok $? "and each names its own parameters and shapes"
run ddp_default ddp diffshape
both "$tmp/ddp_default.out" "ddp: the ranks' parameters differ: bucket 1 of 1"
ok $? "ddp with the default bucket size: the one bucket is named"
run zero1 zero1 diffshape 50
both "$tmp/zero1.out" "zero1: the ranks' parameters differ: bucket 1 of 2"
ok $? "zero1 with other parameter shapes: both ranks fail naming the bucket"
run same ddp none 50
grep -q "^rank 0: made" "$tmp/same.out" && grep -q "^rank 1: made" "$tmp/same.out"
ok $? "the same parameters on every rank are accepted"

for f in ddp ddp_default zero1 same; do
    echo "# --- $f:"
    sed 's/^/#   /' "$tmp/$f.out" | head -8
done
finish
