# dp_common.sh — sourced by dp_scaling.sh and dp_faults.sh (with `here` set to their directory): the program, the
# GPUs of this host, the rank counts they allow, and the GPT-2 124M runs' token file and options.
top=$(cd "$here/../.." && pwd)
if [ -z "${TEGRAPH:-}" ]; then
  if command -v tegraph >/dev/null 2>&1; then TEGRAPH=tegraph; else TEGRAPH=$top/tegraph; fi
fi
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi

# powers FIRST: FIRST and the powers of two above it up to the GPUs (a GPU for each rank)
powers() {
  r=$1
  n=$(($1 * 2))
  while [ "$n" -le "$gpus" ]; do r="$r $n"; n=$((n * 2)); done
  echo "$r"
}

# gpt2_tokens DIR: the built-in task's tokens in DIR/tokens.bin (made once); sets G to GPT-2 124M's options on them
# (12 layers, width 768, 12 heads, vocabulary 50257 padded to 50304, context 1024, bf16, 2 microbatches x 8 sequences)
gpt2_tokens() {
  [ -s "$1/tokens.bin" ] || "$TEGRAPH" run "$top/examples/gpt.lua" --make-data "$1/tokens.bin" --tokens 2000000 >/dev/null ||
    return 1
  G="--data $1/tokens.bin --vocab 50257 --vocab-pad 64 --context 1024 --width 768 --heads 12 --layers 12 --batch 8
    --microbatches 2 --warmup 2 --dtype bf16 --quiet --samples 0"
}
