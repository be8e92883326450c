#!/usr/bin/python3
"""Runs a training command and prints, as a RESULT line, the wall time and the step at which its
dev exact match first reached a target: for the translation runs run.sh compares.

    time_to.py SIDE NAME SHAPE THREADS TARGET -- command args...

SIDE is attograd or pytorch, TARGET a fraction (0.99). Both programs print an evaluation line
`step N: ... dev exact match X%...`; each line is timed as it arrives, so the seconds count from
the command's start (reading the corpus and, for attograd, training its SentencePiece models
included) to the evaluation's line, the same way for both sides. The RESULT line holds the
time in ms and the note steps=N. The command's output goes to stderr; a command that fails, or
never reaches the target, fails this script."""
import re
import subprocess
import sys
import time

side, name, shape, threads, target = sys.argv[1:6]
assert sys.argv[6] == "--", "usage: time_to.py SIDE NAME SHAPE THREADS TARGET -- command..."
target = float(target)
line_re = re.compile(r"step (\d+):.*dev exact match ([\d.]+)%")
t0 = time.perf_counter()
p = subprocess.Popen(sys.argv[7:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
reached = None
for line in p.stdout:
    sys.stderr.write(line)
    m = line_re.search(line)
    if reached is None and m and float(m.group(2)) >= 100 * target - 1e-9:
        reached = (int(m.group(1)), time.perf_counter() - t0)
if p.wait() != 0:
    sys.exit(f"time_to.py: {' '.join(sys.argv[7:])} exited with {p.returncode}")
if reached is None:
    sys.exit(f"time_to.py: {' '.join(sys.argv[7:])} never reached {100 * target:g}% dev exact match")
print(f"RESULT {side} {name} {shape} {threads} {1e3 * reached[1]:.1f} 0.000000 steps={reached[0]}", flush=True)
