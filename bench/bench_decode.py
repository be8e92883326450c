#!/usr/bin/python3
"""Decoding speed, attograd against PyTorch: the source side of num-en-fr's test split (2000
sentences) translated with one checkpoint, greedy or beam K, both sides with the same algorithm
(attograd-translate through nn/decode; bench/torch_translate.py's translate) and the same threads.

  bench_decode.py attograd --bin BIN --checkpoint C --beam K [--out FILE] [--reps N] [--quick]
  bench_decode.py pytorch --checkpoint C --beam K [--compare FILE] [--reps N] [--quick]

attograd: the `BIN translate --checkpoint C --beam K` process reading the file on stdin
(batches of 64 lines in file order), less the time of the same process given no input (its
start and the checkpoint's loading, said in the note); its output goes to FILE. pytorch: translate_lines (tokenizing, batches of 64 in file order,
incremental decoding under inference_mode, detokenizing) after loading the checkpoint; with
--compare FILE (attograd's output), the lines that differ are counted in the note. Threads:
OMP_NUM_THREADS. Prints RESULT lines (bench/report.py): the median over the reps of the time
per sentence in ms, the note giving sentences per second."""
import argparse
import os
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
TEST = os.path.join(HERE, "..", "examples", "translate", "data", "num-en-fr", "test.tsv")


def sources():
    with open(TEST, encoding="utf-8") as f:
        return [line.split("\t")[0] for line in f if "\t" in line]


def report(side, beam, threads, times, n, note):
    ms = statistics.median(times) / n * 1e3
    name = "decode_greedy" if beam == 1 else f"decode_beam{beam}"
    print(f"RESULT {side} {name} num-en-fr,{n}sent {threads} {ms:.4f} 0 sent_s={1e3 / ms:.0f}{note}",
          flush=True)


def attograd(a, lines, threads):
    def run(text):
        t0 = time.perf_counter()
        r = subprocess.run([a.bin, "translate", "--checkpoint", a.checkpoint, "--beam", str(a.beam)], input=text,
                           capture_output=True, text=True, check=True)
        return time.perf_counter() - t0, r.stdout

    # the program's start and the checkpoint's loading, timed with no input, are taken off: the
    # PyTorch side is timed after its imports and loading
    text = "".join(s + "\n" for s in lines)
    times, starts, out = [], [], None
    for _ in range(a.reps):
        starts.append(run("")[0])
        t, out = run(text)
        times.append(t)
    start = statistics.median(starts)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(out)
    report("attograd", a.beam, threads, [t - start for t in times], len(lines), f",start_ms={start * 1e3:.0f}")


def pytorch(a, lines, threads):
    sys.path.insert(0, HERE)
    import torch
    import torch_translate as tt
    from common import setup_threads
    setup_threads()
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
    model, src_itos, tgt_itos, cfg = tt.load_checkpoint(a.checkpoint, ("transformer", "gru", "lstm", "rnn"))
    codec = tt.Codec(cfg, src_itos, tgt_itos)
    tt.translate_lines(model, codec, lines[:64], a.beam)  # warm up: one batch
    times, out = [], None
    for _ in range(a.reps):
        t0 = time.perf_counter()
        out = tt.translate_lines(model, codec, lines, a.beam)
        times.append(time.perf_counter() - t0)
    note = f",torch={torch.__version__.split('+')[0]}"
    if a.compare:
        with open(a.compare, encoding="utf-8") as f:
            theirs = f.read().split("\n")[:len(lines)]
        note += f",mismatch={sum(x != y for x, y in zip(out, theirs)) + len(lines) - len(theirs)}/{len(lines)}"
    report("pytorch", a.beam, threads, times, len(lines), note)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("side", choices=("attograd", "pytorch"))
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--bin", help="attograd-translate")
    ap.add_argument("--out", help="attograd: its translations go here")
    ap.add_argument("--compare", help="pytorch: count the lines that differ from this file")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="the first 500 sentences, one rep")
    a = ap.parse_args()
    lines = sources()
    if a.quick:
        lines, a.reps = lines[:500], 1
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    (attograd if a.side == "attograd" else pytorch)(a, lines, threads)


if __name__ == "__main__":
    main()
