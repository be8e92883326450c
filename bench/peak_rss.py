#!/usr/bin/python3
"""Runs a command and prints its peak resident set (ru_maxrss of the child) as a RESULT line,
for whole programs whose memory run.sh compares (the translation training run).

    peak_rss.py SIDE NAME SHAPE THREADS NOTE -- command args...

SIDE is attograd or pytorch. The command's own output goes to stderr (it is not a RESULT line);
a failing command fails this script."""
import resource
import subprocess
import sys

side, name, shape, threads, note = sys.argv[1:6]
assert sys.argv[6] == "--", "usage: peak_rss.py SIDE NAME SHAPE THREADS NOTE -- command..."
done = subprocess.run(sys.argv[7:], stdout=sys.stderr, stderr=sys.stderr)
if done.returncode != 0:
    sys.exit(f"peak_rss.py: {' '.join(sys.argv[7:])} exited with {done.returncode}")
mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
print(f"RESULT {side} {name} {shape} {threads} {mib:.4f} 0.000000 {note}", flush=True)
