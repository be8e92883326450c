#!/bin/sh
# Data-parallel runs end to end, under mpirun with 2 processes (tests/meson.build passes the
# programs): attograd-translate train on 2 ranks against 1 process, resume from 1 process on 2
# ranks and from 2 ranks in 1 process, a 2-rank checkpoint translating in one process, a rank
# that cannot open its corpus or trains another model, and ranks that die (test_dist die ...):
# the job must end within 10 s of the death (every mpirun has a 300 s guard against a hang, for
# the sanitizer build on a busy machine). Each check prints what it compared.
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
bin=$1 test_dist=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mpi() { timeout 300 mpirun -np 2 --oversubscribe "$@"; }
mpmd() { timeout 300 mpirun --oversubscribe -np 1 "$@"; } # mpmd A... : -np 1 B...: rank 0 runs A, rank 1 B
tiny="--train $data/train.tsv --d-model 16 --heads 2 --layers 1 --ff 32 --batch 8 --max-eval 8 --samples 0
      --dropout 0 --seed 3 --eval-every 3 --save-every 3 --threads 1 --tokenizer word"

# the evaluation lines without their time: "step N: train loss ..., BLEU x"
losses() { grep -o 'step [0-9]*: train loss .*BLEU [0-9.]*' "$1"; }

# 2 ranks x 4 pairs train as 1 process x 8 pairs: the same losses at every evaluation (4 decimals)
"$bin" train $tiny --steps 6 --out "$tmp/one" >/dev/null 2>"$tmp/one.log" || fail "1 process: $(cat "$tmp/one.log")"
mpi "$bin" train $tiny --steps 6 --out "$tmp/two" >"$tmp/two.out" 2>"$tmp/two.log" || fail "2 ranks: $(cat "$tmp/two.log")"
[ "$(losses "$tmp/one.log")" = "$(losses "$tmp/two.log")" ] && [ -n "$(losses "$tmp/one.log")" ] ||
    fail "2 ranks and 1 process differ: $(losses "$tmp/one.log") / $(losses "$tmp/two.log")"
echo "ok 2 ranks = 1 process: $(losses "$tmp/two.log" | tail -1)"
[ "$(grep -c 'train loss' "$tmp/two.log")" = 2 ] || fail "rank 1 printed too: $(cat "$tmp/two.log")"
echo "ok only rank 0 reports"

# a 2-rank checkpoint translates in one process, as the 1-process one does
a=$("$bin" translate --checkpoint "$tmp/two/last.h5" "one hundred and two" 2>&1) || fail "translate: $a"
b=$("$bin" translate --checkpoint "$tmp/one/last.h5" "one hundred and two" 2>&1)
[ "$a" = "$b" ] || fail "translations differ: '$a' / '$b'"
echo "ok the 2-rank checkpoint translates in one process: '$a'"

# 3 steps in one process, resumed on 2 ranks to 6: the losses of the 6-step run
"$bin" train $tiny --steps 3 --out "$tmp/res" >/dev/null 2>&1 || fail "3 steps"
mpi "$bin" train $tiny --steps 6 --out "$tmp/res" --resume >/dev/null 2>"$tmp/res.log" ||
    fail "resume on 2 ranks: $(cat "$tmp/res.log")"
[ "$(losses "$tmp/res.log")" = "$(losses "$tmp/one.log" | tail -1)" ] ||
    fail "resumed on 2 ranks: $(losses "$tmp/res.log") / $(losses "$tmp/one.log" | tail -1)"
echo "ok 1 process resumed on 2 ranks: $(losses "$tmp/res.log")"
mpi "$bin" train $tiny --steps 3 --out "$tmp/res2" >/dev/null 2>&1 || fail "3 steps on 2 ranks"
"$bin" train $tiny --steps 6 --out "$tmp/res2" --resume >/dev/null 2>"$tmp/res2.log" ||
    fail "resume in 1 process: $(cat "$tmp/res2.log")"
[ "$(losses "$tmp/res2.log")" = "$(losses "$tmp/one.log" | tail -1)" ] ||
    fail "resumed in 1 process: $(losses "$tmp/res2.log") / $(losses "$tmp/one.log" | tail -1)"
echo "ok 2 ranks resumed in 1 process: $(losses "$tmp/res2.log")"

# with dropout: 2 ranks for 6 steps, and 2 ranks for 3 resumed on 2 ranks to 6, give the same
# losses (each rank's dropout stream continues exactly), twice the same bits in the checkpoint
mpi "$bin" train $tiny --dropout 0.3 --steps 6 --out "$tmp/d6" >/dev/null 2>"$tmp/d6.log" || fail "dropout run"
mpi "$bin" train $tiny --dropout 0.3 --steps 3 --out "$tmp/d3" >/dev/null 2>&1 || fail "dropout run, 3 steps"
mpi "$bin" train $tiny --dropout 0.3 --steps 6 --out "$tmp/d3" --resume >/dev/null 2>"$tmp/d3.log" ||
    fail "dropout run resumed: $(cat "$tmp/d3.log")"
[ "$(losses "$tmp/d3.log")" = "$(losses "$tmp/d6.log" | tail -1)" ] ||
    fail "resumed with dropout: $(losses "$tmp/d3.log") / $(losses "$tmp/d6.log" | tail -1)"
echo "ok 2 ranks with dropout resumed on 2 ranks: $(losses "$tmp/d3.log")"
a=$("$bin" translate --checkpoint "$tmp/d6/last.h5" "one hundred and two" "seven" 2>&1)
b=$("$bin" translate --checkpoint "$tmp/d3/last.h5" "one hundred and two" "seven" 2>&1)
[ "$a" = "$b" ] || fail "resumed and straight runs translate differently: '$a' / '$b'"

# rank 1 cannot open its corpus: every rank stops, one message names rank 1 and the file
mpmd "$bin" train $tiny --steps 6 --out "$tmp/x" : -np 1 "$bin" train $tiny --train "$tmp/missing.tsv" \
    --steps 6 --out "$tmp/x" >/dev/null 2>"$tmp/x.log" && fail "a missing corpus on rank 1 passed"
grep -q "rank 1: .*missing.tsv" "$tmp/x.log" || fail "no message naming rank 1: $(cat "$tmp/x.log")"
[ "$(grep -c missing.tsv "$tmp/x.log")" = 1 ] || fail "not one message: $(cat "$tmp/x.log")"
echo "ok $(grep "rank 1" "$tmp/x.log")"

# rank 1 trains another model size: found at the start
mpmd "$bin" train $tiny --steps 6 --out "$tmp/y" : -np 1 "$bin" train $tiny --d-model 32 --steps 6 \
    --out "$tmp/y" >/dev/null 2>"$tmp/y.log" && fail "a different model on rank 1 passed"
grep -q "rank 1: .*differs from rank 0's" "$tmp/y.log" || fail "no message naming rank 1: $(cat "$tmp/y.log")"
echo "ok $(grep "rank 1" "$tmp/y.log")"

# a rank killed, or exiting 0 without finalize, while the other waits for
# its gradients: mpirun stops the job within seconds and names the rank
for how in signal exit0; do
    mpi "$test_dist" die $how >"$tmp/die.log" 2>&1 && fail "rank 1 died ($how) and mpirun exited 0"
    status=$?
    took=$(awk -v end="$(date +%s.%N)" '/dying/ { printf "%.1f", end - $NF }' "$tmp/die.log")
    [ $status != 124 ] && [ -n "$took" ] && awk -v t="$took" 'BEGIN { exit !(t <= 10) }' ||
        fail "rank 1 died ($how): the job ended ${took:-?}s later (status $status): $(cat "$tmp/die.log")"
    grep -q "rank 1\|\[\[[0-9]*,1\],1\]" "$tmp/die.log" || fail "rank 1 not named: $(cat "$tmp/die.log")"
    echo "ok rank 1 died ($how): the job ended ${took}s later, status $status"
done
