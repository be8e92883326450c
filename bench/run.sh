#!/usr/bin/env bash
# One command for the benchmarks of attograd against PyTorch 1.13 (Debian's python3-torch):
# builds the bench programs if needed, runs each benchmark on both sides with the same shapes,
# data, thread count and repetitions, in alternating rounds, and prints one table
# (bench/report.py). Raw RESULT lines are kept in $BENCH_OUT (default build dir/bench.txt).
#
# usage: bench/run.sh [--quick] [--rounds N] [--only sgemm|mha|train]
#   --quick   fewer repetitions and one round (a smoke run, ~1 minute)
#   --rounds  rounds per benchmark (default 3): the table shows the best round's median
# env: BUILD (build dir, default build-bench), PYTHON (default /usr/bin/python3)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-bench}
PYTHON=${PYTHON:-/usr/bin/python3}
quick=() rounds=3 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=(--quick); rounds=1 ;;
    --rounds) rounds=$2; shift ;;
    --only) only=$2; shift ;;
    *) echo "usage: bench/run.sh [--quick] [--rounds N] [--only sgemm|mha|train]" >&2; exit 2 ;;
  esac
  shift
done

[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" -Dbuildtype=release >/dev/null
targets=(bench/bench_sgemm bench/bench_mha)
[ -f bench/bench_train.c ] && targets+=(bench/bench_train)
ninja -C "$BUILD" "${targets[@]}" >/dev/null

OUT=${BENCH_OUT:-$BUILD/bench.txt}
: >"$OUT"
note() { echo "NOTE $*" >>"$OUT"; }
cpu=$(lscpu | sed -n 's/^Model name: *//p')
note "$(date -u +%Y-%m-%dT%H:%MZ) $cpu, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
note "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset} (left as found)"
note "torch $("$PYTHON" -c 'import torch; print(torch.__version__)'), $(cc --version | head -1)"

# side by side: attograd then PyTorch, same threads for OpenMP, OpenBLAS and torch
pair() { # threads c-program python-script args...
  local t=$1 c=$2 py=$3; shift 3
  OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$BUILD/bench/$c" "${quick[@]}" "$@" >>"$OUT"
  (cd bench && OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$PYTHON" "$py" "${quick[@]}" "$@" >>"../$OUT")
}

for r in $(seq "$rounds"); do
  echo "round $r/$rounds ..." >&2
  if [ -z "$only" ] || [ "$only" = sgemm ]; then
    for t in 1 2; do pair $t bench_sgemm bench_sgemm.py; done
  fi
  if [ -z "$only" ] || [ "$only" = mha ]; then
    pair 1 bench_mha bench_mha.py
  fi
  if [ -f bench/bench_train.c ] && { [ -z "$only" ] || [ "$only" = train ]; }; then
    [ "$only" = train ] && [ "$r" = 1 ] && for t in 1 2; do pair $t bench_sgemm bench_sgemm.py; done
    pair 1 bench_train bench_train.py --config small
    for t in 1 2; do pair $t bench_train bench_train.py --config large; done
    [ "$r" = 1 ] && pair 1 bench_train bench_train.py --config small --rss
  fi
done
"$PYTHON" bench/report.py "$OUT"
