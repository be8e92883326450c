#!/usr/bin/env bash
# The default build runs on an x86-64 without AVX: a few programs under qemu-user emulating a
# Nehalem (SSE4.2, no AVX), where the run-time dispatch must pick the portable C kernels, the
# README example, three unit tests and a short translation run must pass, and the example's output
# and the run's losses must be those of the same code paths run natively (AG_ISA=generic).
# OpenBLAS chooses its own kernels, and OPENBLAS_CORETYPE in the environment (Haswell, say)
# overrides its detection: the test sets it to Nehalem, on both sides. Exit 77 (skipped) without
# qemu-x86_64.
# usage: old_cpu.sh CPU_ISA README_EXAMPLE TEST_MATMUL TEST_NN_ATTENTION_KERNELS TRANSLATE CORPUS_DIR [MORE_TESTS...]
set -euo pipefail
cpu_isa=$1 example=$2 test_matmul=$3 test_attention=$4 translate=$5 corpus=$6
shift 6
qemu=$(command -v qemu-x86_64) || { echo "qemu-x86_64 is missing (Debian: qemu-user): skipped"; exit 77; }
export OPENBLAS_CORETYPE=Nehalem
unset AG_ISA
old() { "$qemu" -cpu Nehalem "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

got=$(old "$cpu_isa")
[ "$got" = "cpu generic in use generic" ] || { echo "under a Nehalem the dispatch says '$got'"; exit 1; }

old "$example" >"$tmp/example.old" || { echo "readme_example failed on a Nehalem"; cat "$tmp/example.old"; exit 1; }
env AG_ISA=generic "$example" >"$tmp/example.native"
cmp -s "$tmp/example.old" "$tmp/example.native" || { echo "readme_example's output differs:"; diff "$tmp/example.native" "$tmp/example.old"; exit 1; }

for t in "$test_matmul" "$test_attention" "$@"; do
  old "$t" >"$tmp/unit.log" 2>&1 || { echo "$(basename "$t") failed on a Nehalem:"; tail -30 "$tmp/unit.log"; exit 1; }
done

# a small Transformer, 8 steps: the losses at steps 4 and 8 (the time at the end of the line cut)
run() {
  "$@" train --train "$corpus/train.tsv" --out "$tmp/run" --steps 8 --eval-every 4 --warmup 2 --heldout 0.002 \
    --threads 1 --tokenizer word --d-model 32 --ff 64 --layers 1 --heads 2 --batch 16 2>&1 |
    sed -n 's/^\(step [0-9]*: train loss .*\), [0-9]* s$/\1/p'
}
run old "$translate" >"$tmp/run.old"
run env AG_ISA=generic "$translate" >"$tmp/run.native"
[ "$(wc -l <"$tmp/run.old")" = 2 ] || { echo "the translation run on a Nehalem printed no losses:"; cat "$tmp/run.old"; exit 1; }
cmp -s "$tmp/run.old" "$tmp/run.native" || { echo "the translation run's losses differ:"; diff "$tmp/run.native" "$tmp/run.old"; exit 1; }
echo "on a Nehalem (qemu): dispatch generic; readme_example, $(basename "$test_matmul"), $(basename "$test_attention") pass;"
cat "$tmp/run.old"
