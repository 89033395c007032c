#!/bin/sh
# kprof-build.sh — builds kprof.c (the CUPTI kernel-time profiler) into a shared library:
#
#   examples/bench/gpu/kprof-build.sh OUT.so [NVCC]
#
# CUPTI is looked for in CUPTI_DIR, then next to NVCC's CUDA install (default: nvcc on PATH, else
# /usr/local/cuda/bin/nvcc): extras/CUPTI/{include,lib64}, targets/<arch>-linux/{include,lib}, {include,lib64,lib},
# then /usr/local/cuda's and /usr's (Debian's libcupti-dev). CC picks the compiler (default cc).
# Exit status: 0 built, 1 CUPTI not found (the places tried are printed), 2 the build failed.
[ $# -ge 1 ] || { echo "usage: $0 OUT.so [NVCC]" >&2; exit 2; }
out=$1
nv=${2:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cuda=$(dirname "$(dirname "$nv")")
src=$(dirname "$0")/kprof.c
inc="" lib="" tried=""
for d in ${CUPTI_DIR:+"$CUPTI_DIR"} "$cuda/extras/CUPTI" "$cuda"/targets/*-linux "$cuda" \
         /usr/local/cuda/extras/CUPTI /usr/local/cuda /usr; do
  [ -d "$d" ] || continue
  tried="$tried $d"
  [ -z "$inc" ] && [ -f "$d/include/cupti.h" ] && inc=$d/include
  for l in lib64 lib lib/x86_64-linux-gnu lib/aarch64-linux-gnu; do
    [ -z "$lib" ] && [ -e "$d/$l/libcupti.so" ] && lib=$d/$l
  done
done
[ -n "$inc" ] || { echo "kprof-build: CUPTI not found: no include/cupti.h under${tried:- any of the places} (set CUPTI_DIR)"; exit 1; }
[ -n "$lib" ] || { echo "kprof-build: CUPTI not found: no libcupti.so under$tried (set CUPTI_DIR)"; exit 1; }
echo "kprof-build: CUPTI headers $inc, library $lib"
${CC:-cc} -O2 -Wall -shared -fPIC -o "$out" "$src" -I"$inc" -I"$cuda/include" -L"$lib" -Wl,-rpath,"$lib" \
  -lcupti -ldl -lpthread || { echo "kprof-build: compiling $src failed"; exit 2; }
