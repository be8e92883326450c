#!/bin/sh
# Data-parallel runs end to end, under mpirun (tests/meson.build passes the programs):
# attograd-translate train with dropout on 2 and on 4 ranks against 1 process (each pair draws
# its own dropout masks wherever it runs), a run placed by a hostfile over TCP, resume from 1
# process on 2 ranks and from 2 ranks in 1 process, 2- and 4-rank checkpoints translating in one
# process, a rank that cannot open its corpus or trains another model, and ranks that die
# (test_dist die ..., over shared memory and over TCP) or leave early: the job must end within
# 10 s of the death (every mpirun has a 300 s guard against a hang, for the sanitizer build on
# a busy machine), and SIGTERM to either rank or to mpirun ends every process within 120 s.
# Each check prints what it compared.
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
bin=$1 test_dist=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mpi() { timeout 300 mpirun -np 2 --oversubscribe "$@"; }
mpmd() { timeout 300 mpirun --oversubscribe -np 1 "$@"; } # mpmd A... : -np 1 B...: rank 0 runs A, rank 1 B
tiny="--train $data/train.tsv --d-model 16 --heads 2 --layers 1 --ff 32 --batch 8 --max-eval 8 --samples 0
      --dropout 0.3 --seed 3 --eval-every 3 --save-every 3 --threads 1 --tokenizer word"

# the evaluation lines without their time: "step N: train loss ..., BLEU x, chrF2 y"
losses() { grep -o 'step [0-9]*: train loss .*chrF2 [0-9.]*' "$1"; }

# 2 ranks x 4 pairs train as 1 process x 8 pairs, dropout 0.3 included: the same losses at
# every evaluation (4 decimals); with dropout 0 they differ (the masks are drawn, not skipped)
"$bin" train $tiny --steps 6 --out "$tmp/one" >/dev/null 2>"$tmp/one.log" || fail "1 process: $(cat "$tmp/one.log")"
mpi "$bin" train $tiny --steps 6 --out "$tmp/two" >"$tmp/two.out" 2>"$tmp/two.log" || fail "2 ranks: $(cat "$tmp/two.log")"
[ "$(losses "$tmp/one.log")" = "$(losses "$tmp/two.log")" ] && [ -n "$(losses "$tmp/one.log")" ] ||
    fail "2 ranks and 1 process differ: $(losses "$tmp/one.log") / $(losses "$tmp/two.log")"
echo "ok 2 ranks = 1 process: $(losses "$tmp/two.log" | tail -1)"
[ "$(grep -c 'train loss' "$tmp/two.log")" = 2 ] || fail "rank 1 printed too: $(cat "$tmp/two.log")"
echo "ok only rank 0 reports"
# the start line counts the processes and threads; rank 0 alone writes log.jsonl (evaluations
# at steps 0, 3 and 6, once each)
grep -q '; 2 processes × 1 thread$' "$tmp/two.log" || fail "no '2 processes × 1 thread': $(cat "$tmp/two.log")"
[ "$(grep -c '"kind":"eval"' "$tmp/two/log.jsonl")" = 3 ] || fail "log.jsonl: $(cat "$tmp/two/log.jsonl")"
echo "ok the start line says 2 processes × 1 thread; one log.jsonl line per evaluation"
"$bin" train $tiny --dropout 0 --steps 6 --out "$tmp/nodrop" >/dev/null 2>"$tmp/nodrop.log" || fail "no dropout"
[ "$(losses "$tmp/nodrop.log")" != "$(losses "$tmp/one.log")" ] || fail "dropout 0.3 changed nothing"

# 4 ranks x 2 pairs, and 2 ranks on the slots of a hostfile talking over TCP (the form a run
# across machines takes: here both slots are this machine's and the link is the loopback, with
# shared memory turned off so that TCP carries every message): the same losses again
timeout 300 mpirun -np 4 --oversubscribe "$bin" train $tiny --steps 6 --out "$tmp/four" >/dev/null \
    2>"$tmp/four.log" || fail "4 ranks: $(cat "$tmp/four.log")"
[ "$(losses "$tmp/one.log")" = "$(losses "$tmp/four.log")" ] ||
    fail "4 ranks and 1 process differ: $(losses "$tmp/one.log") / $(losses "$tmp/four.log")"
echo "ok 4 ranks = 1 process: $(losses "$tmp/four.log" | tail -1)"
echo "localhost slots=2" >"$tmp/hosts"
tcp="--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo"
timeout 300 mpirun --hostfile "$tmp/hosts" -np 2 --bind-to none $tcp "$bin" train $tiny --steps 6 \
    --out "$tmp/hosts.out" >/dev/null 2>"$tmp/hosts.log" || fail "hostfile, TCP: $(cat "$tmp/hosts.log")"
[ "$(losses "$tmp/one.log")" = "$(losses "$tmp/hosts.log")" ] ||
    fail "hostfile run over TCP and 1 process differ: $(losses "$tmp/one.log") / $(losses "$tmp/hosts.log")"
echo "ok 2 ranks from a hostfile, over TCP = 1 process"

# 2- and 4-rank checkpoints translate in one process, as the 1-process one does
b=$("$bin" translate --checkpoint "$tmp/one/last.h5" "one hundred and two" 2>&1)
for n in two four; do
    a=$("$bin" translate --checkpoint "$tmp/$n/last.h5" "one hundred and two" 2>&1) || fail "translate: $a"
    [ "$a" = "$b" ] || fail "translations differ ($n ranks): '$a' / '$b'"
done
echo "ok the 2- and 4-rank checkpoints translate in one process: '$a'"

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

# 2 ranks for 3 steps resumed on 2 ranks to 6 give the 6-step run's losses (the dropout stream
# continues exactly), and the two checkpoints translate alike
mpi "$bin" train $tiny --steps 3 --out "$tmp/d3" >/dev/null 2>&1 || fail "2 ranks, 3 steps"
mpi "$bin" train $tiny --steps 6 --out "$tmp/d3" --resume >/dev/null 2>"$tmp/d3.log" ||
    fail "2 ranks resumed: $(cat "$tmp/d3.log")"
[ "$(losses "$tmp/d3.log")" = "$(losses "$tmp/two.log" | tail -1)" ] ||
    fail "resumed on 2 ranks: $(losses "$tmp/d3.log") / $(losses "$tmp/two.log" | tail -1)"
echo "ok 2 ranks resumed on 2 ranks: $(losses "$tmp/d3.log")"
a=$("$bin" translate --checkpoint "$tmp/two/last.h5" "one hundred and two" "seven" 2>&1)
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

# a rank killed, exiting 0 without finalize, or leaving with ag_dist_finalize while the other
# waits for its gradients: the job stops within seconds and the rank is named (killed over TCP
# too, the link between machines)
for run in signal exit0 finalize "signal tcp"; do
    how=${run% tcp} via=
    [ "$run" = "$how" ] || via=$tcp
    mpi $via "$test_dist" die $how >"$tmp/die.log" 2>&1 && fail "rank 1 died ($run) and mpirun exited 0"
    status=$?
    took=$(awk -v end="$(date +%s.%N)" '/dying/ { printf "%.1f", end - $NF }' "$tmp/die.log")
    [ $status != 124 ] && [ -n "$took" ] && awk -v t="$took" 'BEGIN { exit !(t <= 10) }' ||
        fail "rank 1 died ($run): the job ended ${took:-?}s later (status $status): $(cat "$tmp/die.log")"
    grep -q "rank 1\|\[\[[0-9]*,1\],1\]" "$tmp/die.log" || fail "rank 1 not named: $(cat "$tmp/die.log")"
    echo "ok rank 1 died ($run): the job ended ${took}s later, status $status"
done

# SIGTERM to rank 0 and to rank 1 (two jobs at once), then to mpirun, while training: every rank
# stops after the same step, rank 0 saves last.h5 and says so once, every process is gone within
# 120 s (about 2 s on an idle machine; the bound is for the sanitizer build under load, where a
# save can take 10 s), and --resume continues from the saved step. A rank's status 130 is
# mpirun's. mpirun signalled itself sends the ranks SIGTERM odls_base_sigkill_timeout seconds
# later (10 here) and SIGKILL as long after that, and exits 1: the ranks stop as above when their
# step and save fit in that time, else they die with the previous save as last.h5 (--save-every 5
# here) and print nothing; either way --resume continues from what last.h5 holds.
# LeakSanitizer's scan at exit, slow on a busy machine, is left to the other runs.
long="$tiny --eval-every 5"
rank_pid() { # the pid of rank $2 among mpirun $1's children
    for p in $(pgrep -P "$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$p"
    done
}
alive() { # whether one of the pids is a live process (not a zombie)
    for p; do
        [ -n "$(awk '$3 != "Z"' "/proc/$p/stat" 2>/dev/null)" ] && return 0
    done
    return 1
}
sigterm() { # $1: 0, 1 or mpirun
    target=$1 out=$tmp/sig$1 grace= every=100000
    [ $target = mpirun ] && grace="--mca odls_base_sigkill_timeout 10" every=5
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 mpirun -np 2 --oversubscribe $grace "$bin" train $long \
        --save-every $every --steps 100000 --out "$out" >/dev/null 2>"$out.log" &
    mp=$!
    i=0
    until grep -q "step 5: train loss" "$out.log" 2>/dev/null && { [ $every = 100000 ] || [ -e "$out/last.h5" ]; }; do
        i=$((i + 1)) # under way: rank 0's first evaluation (and save)
        [ $i -le 1200 ] && alive $mp || { kill -9 $mp; fail "SIGTERM to $target: no training: $(cat "$out.log")"; }
        sleep 0.1
    done
    ranks=$(pgrep -P $mp)
    victim=$mp
    [ $target = mpirun ] || victim=$(rank_pid $mp $target)
    [ -n "$victim" ] || { kill -9 $mp $ranks; fail "no rank $target among mpirun's children ($ranks)"; }
    kill -TERM $victim
    start=$(date +%s.%N)
    while alive $mp $ranks; do
        took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
        awk -v t="$took" 'BEGIN { exit !(t > 120) }' &&
            { kill -9 $mp $ranks; fail "SIGTERM to $target: still running after 120 s: $(tail -5 "$out.log")"; }
        sleep 0.1
    done
    wait $mp
    status=$?
    took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    want=130
    [ $target = mpirun ] && want=1
    [ $status = $want ] || fail "SIGTERM to $target: mpirun exited $status, not $want: $(tail -5 "$out.log")"
    said=$(grep -c "interrupted at step" "$out.log")
    step=$(sed -n "s|.*interrupted at step \([0-9]*\); saved $out/last.h5 (continue with --resume)\$|\1|p" "$out.log")
    if [ $target != mpirun ] || [ $said != 0 ]; then
        [ $said = 1 ] && [ -n "$step" ] || fail "SIGTERM to $target: not one message: $(cat "$out.log")"
    fi
    "$bin" train $long --steps 1 --out "$out" --resume >/dev/null 2>"$out.res" # says the step last.h5 holds
    held=$(sed -n "s|.*resuming $out/last.h5 at step \([0-9]*\) .*|\1|p" "$out.res")
    [ -n "$held" ] && [ "${step:-$held}" = "$held" ] || fail "SIGTERM to $target: last.h5 at step '$held', said '$step'"
    "$bin" train $long --steps $((held + 2)) --out "$out" --resume >/dev/null 2>"$out.res" ||
        fail "SIGTERM to $target: --resume: $(cat "$out.res")"
    grep -q "step $((held + 2)): train loss" "$out.res" || fail "SIGTERM to $target: --resume: $(cat "$out.res")"
    how="stopped and saved at step $step"
    [ -n "$step" ] || how="SIGKILLed by mpirun before saving"
    echo "ok SIGTERM to $target: every process gone ${took}s later, status $status, $how, resumed from step $held"
}
sigterm 0 >"$tmp/sig0.result" &
job0=$!
sigterm 1 >"$tmp/sig1.result" &
job1=$!
failed=0
wait $job0 || failed=1
wait $job1 || failed=1
cat "$tmp/sig0.result" "$tmp/sig1.result"
[ $failed = 0 ] || exit 1
sigterm mpirun # alone: its ranks have 10 s for a step and a save
