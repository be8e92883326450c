#!/usr/bin/env bash
# One command for the benchmarks of attograd against PyTorch 1.13 (Debian's python3-torch):
# builds the bench programs if needed, runs each benchmark on both sides with the same shapes,
# data, thread count and repetitions, in alternating rounds, and prints one table
# (bench/report.py). Raw RESULT lines are kept in $BENCH_OUT (default build dir/bench.txt).
#
# usage: bench/run.sh [--quick] [--rounds N] [--only sgemm|mha|train|translate|decode] [--avx2]
#   --quick   fewer repetitions and one round, a 300-step translation run (a smoke run, ~3 minutes)
#   --rounds  rounds per benchmark (default 3): the table shows the best round's median
#   --avx2    on an AVX-512 CPU, both sides at AVX2 (a stand-in for an AVX2-only CPU): attograd's
#             AVX2 kernels (AG_ISA=avx2), oneDNN capped at AVX2; ATen and OpenBLAS (with
#             OPENBLAS_CORETYPE=Haswell) run AVX2 there anyway
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
    --avx2) export AG_ISA=avx2 DNNL_MAX_CPU_ISA=AVX2 ;;
    *) echo "usage: bench/run.sh [--quick] [--rounds N] [--only sgemm|mha|train|translate|decode] [--avx2]" >&2; exit 2 ;;
  esac
  shift
done

[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" -Dbuildtype=release >/dev/null
targets=(bench/bench_sgemm bench/bench_mha examples/translate/attograd-translate)
[ -f bench/bench_train.c ] && targets+=(bench/bench_train)
[ -f bench/bench_threads.c ] && targets+=(bench/bench_threads)
ninja -C "$BUILD" "${targets[@]}" >/dev/null

OUT=$(realpath -m "${BENCH_OUT:-$BUILD/bench.txt}") # absolute: the PyTorch side runs in bench/
: >"$OUT"
note() { echo "NOTE $*" >>"$OUT"; }
cpu=$(lscpu | sed -n 's/^Model name: *//p')
note "$(date -u +%Y-%m-%dT%H:%MZ) $cpu, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
note "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset} (left as found)"
[ -n "${AG_ISA:-}${DNNL_MAX_CPU_ISA:-}" ] && note "AG_ISA=${AG_ISA:-unset} DNNL_MAX_CPU_ISA=${DNNL_MAX_CPU_ISA:-unset}"
note "torch $("$PYTHON" -c 'import torch; print(torch.__version__)'), $(cc --version | head -1)"
if [ -f bench/bench_threads.c ]; then # attograd's default thread count, alone and under mpirun
  note "attograd's default threads: $(env -u OMP_NUM_THREADS "$BUILD/bench/bench_threads") alone," \
    "$(env -u OMP_NUM_THREADS OMPI_COMM_WORLD_LOCAL_SIZE=2 "$BUILD/bench/bench_threads") under a simulated" \
    "mpirun -np 2 on this machine (OMPI_COMM_WORLD_LOCAL_SIZE=2)"
fi

# side by side: attograd then PyTorch, same threads for OpenMP, OpenBLAS and torch
pair() { # threads c-program python-script args...
  local t=$1 c=$2 py=$3; shift 3
  OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$BUILD/bench/$c" "${quick[@]}" "$@" >>"$OUT"
  (cd bench && OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$PYTHON" "$py" "${quick[@]}" "$@" >>"$OUT")
}

# busy CMD...: runs CMD while a busy loop (another process's work) occupies the last CPU
busy_loop=""
trap '[ -z "$busy_loop" ] || kill "$busy_loop" 2>/dev/null' EXIT
busy() {
  taskset -c "$(($(nproc --all) - 1))" sh -c 'while :; do :; done' &
  busy_loop=$!
  "$@"
  kill "$busy_loop" && wait "$busy_loop" 2>/dev/null || true
  busy_loop=""
}

# data-parallel: 2 processes x 1 thread, attograd under mpirun (bench_train --dist) then PyTorch's
# DistributedDataParallel (gloo), each process on half of the same global batch and bound to a
# core of its own (Open MPI's binding; taskset for torch), right after the same step in one
# process at 1 thread: report.py's throughput ratio compares rows measured minutes apart at most
ddp_pair() { # args...
  pair 1 bench_train bench_train.py "$@"
  if [ -e "$BUILD/nn/dist/libattograd-dist.so" ]; then # built with MPI (nn/dist/meson.build)
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpirun -np 2 --bind-to core "$BUILD/bench/bench_train" "${quick[@]}" --dist "$@" >>"$OUT"
  fi
  (cd bench && for rank in 0 1; do
     OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
       taskset -c $rank "$PYTHON" bench_train.py "${quick[@]}" --ddp "$@" >>"$OUT" &
   done; wait)
}

# decoding: the test split of num-en-fr translated greedy and with beam 4 by attograd-translate
# and by bench/torch_translate.py (the same search), same checkpoint and threads, alternating;
# the checkpoint is the default Transformer on word tokens, trained here by attograd for 600
# steps (about 98 % dev exact match; 30 s of CPU). bench_decode.py counts the lines where
# PyTorch's translation differs from attograd's.
decode_ckpt=""
decode_pair() { # threads beam
  local t=$1 k=$2 out="$decode_dir/attograd_t$1_b$2.txt"
  OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t AG_FOLLOW_LOAD=0 "$PYTHON" bench/bench_decode.py attograd \
    --bin "$BUILD/examples/translate/attograd-translate" --checkpoint "$decode_ckpt" --beam "$k" --out "$out" \
    "${quick[@]}" >>"$OUT"
  OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$PYTHON" bench/bench_decode.py pytorch --checkpoint "$decode_ckpt" \
    --beam "$k" --compare "$out" "${quick[@]}" >>"$OUT"
}
if [ -z "$only" ] || [ "$only" = decode ]; then
  decode_dir="$BUILD/decode" && mkdir -p "$decode_dir"
  decode_ckpt="$decode_dir/run/last.h5"
  echo "training the decoding benchmark's checkpoint (600 steps, output in $decode_dir/train.log) ..." >&2
  OMP_NUM_THREADS=1 "$BUILD/examples/translate/attograd-translate" train \
    --train examples/translate/data/num-en-fr/train.tsv --out "$decode_dir/run" --tokenizer word --steps 600 \
    --eval-every 600 --max-eval 300 --samples 0 --threads 1 --seed 1 >"$decode_dir/train.log" 2>&1
fi

for r in $(seq "$rounds"); do
  echo "round $r/$rounds ..." >&2
  if [ -z "$only" ] || [ "$only" = decode ]; then
    for t in 1 2; do for k in 1 4; do decode_pair $t $k; done; done
  fi
  if [ -z "$only" ] || [ "$only" = sgemm ]; then
    for t in 1 2; do pair $t bench_sgemm bench_sgemm.py; done
  fi
  if [ -z "$only" ] || [ "$only" = mha ]; then
    pair 1 bench_mha bench_mha.py
  fi
  if [ -f bench/bench_train.c ] && { [ -z "$only" ] || [ "$only" = train ]; }; then
    [ "$only" = train ] && [ "$r" = 1 ] && for t in 1 2; do pair $t bench_sgemm bench_sgemm.py; done
    pair 1 bench_train bench_train.py --config small
    pair 1 bench_train bench_train.py --config small --no-skip-padding
    pair 1 bench_train bench_train.py --config small --recompute
    pair 1 bench_train bench_train.py --config small --keep-ff
    for t in 1 2; do
      pair $t bench_train bench_train.py --config large
      pair $t bench_train bench_train.py --config large --keep-ff
    done
    # one core busy with another process: 2 threads must not take longer than 1
    for t in 1 2; do busy pair $t bench_train bench_train.py --config large --busy; done
    ddp_pair --config large
    [ "$r" = 1 ] && pair 1 bench_train bench_train.py --config small --rss
    [ "$r" = 1 ] && pair 1 bench_train bench_train.py --config small --recompute --rss
    [ "$r" = 1 ] && pair 1 bench_train bench_train.py --config small --keep-ff --rss
  fi
  # peak RSS of the whole translation training run (./run.sh's, both sides at 1 thread, word
  # tokens as torch_translate.py reads them): once
  if [ "$r" = 1 ] && { [ -z "$only" ] || [ "$only" = translate ]; }; then
    steps=2000
    [ ${#quick[@]} -gt 0 ] && steps=300
    data=examples/translate/data/num-en-fr tmp=$(mktemp -d) log="$BUILD/translate_run.log"
    echo "translation runs of $steps steps (output in $log) ..." >&2
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$PYTHON" bench/peak_rss.py attograd translate_run_rss \
      "num-en-fr,${steps}steps" 1 ru_maxrss -- "$BUILD/examples/translate/attograd-translate" train \
      --train $data/train.tsv --test $data/test.tsv --out "$tmp" --steps $steps --eval-every 250 --patience 0 --threads 1 \
      --tokenizer word >>"$OUT" 2>"$log"
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$PYTHON" bench/peak_rss.py pytorch translate_run_rss \
      "num-en-fr,${steps}steps" 1 ru_maxrss -- "$PYTHON" bench/torch_translate.py --steps $steps --eval-every 250 \
      --stop-at 2 --threads 1 >>"$OUT" 2>>"$log"
    rm -rf "$tmp"
  fi
  # time to 99 % dev exact match with the default recipe, in wall seconds from the start
  # (bench/time_to.py): attograd at 1 thread and at its default threads, then PyTorch at 1 thread
  # with the recipe and SentencePiece models of attograd's run (torch_translate.py --like): once
  if [ "$r" = 1 ] && { [ -z "$only" ] || [ "$only" = translate ]; }; then
    data=examples/translate/data/num-en-fr tmp=$(mktemp -d) log="$BUILD/translate_to99.log"
    dflt=$(env -u OMP_NUM_THREADS "$BUILD/bench/bench_threads")
    echo "translation runs to 99 % dev exact match (output in $log) ..." >&2
    : >"$log"
    threads=(1)
    if [ "$dflt" != 1 ]; then threads+=("$dflt"); fi # the default run, unless it is the 1-thread one
    for t in "${threads[@]}"; do
      [ "$t" = 1 ] && env=(OMP_NUM_THREADS=1) thr=(--threads 1) || env=() thr=()
      env -u OMP_NUM_THREADS "${env[@]}" "$PYTHON" bench/time_to.py attograd translate_to99 num-en-fr "$t" 0.99 -- \
        "$BUILD/examples/translate/attograd-translate" train --train $data/train.tsv --out "$tmp/t$t" \
        --stop-at 0.99 --samples 0 "${thr[@]}" >>"$OUT" 2>>"$log"
    done
    OMP_NUM_THREADS=1 "$PYTHON" bench/time_to.py pytorch translate_to99 num-en-fr 1 0.99 -- "$PYTHON" \
      bench/torch_translate.py --like "$tmp/t1/best.h5" --threads 1 --stop-at 0.99 --no-test >>"$OUT" 2>>"$log"
    rm -rf "$tmp"
  fi
done
"$PYTHON" bench/report.py "$OUT"
