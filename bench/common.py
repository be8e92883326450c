"""Shared by the PyTorch side of the benchmarks: threads, timing, the data formula and the
RESULT lines bench/report.py joins with attograd's (see bench/bench_util.h)."""
import math
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch


def setup_threads():
    """torch's intra-op threads from OMP_NUM_THREADS (run.sh sets it for both sides)."""
    n = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(n)
    torch.set_num_interop_threads(1)
    return n


def reps_from_argv(default):
    reps = default
    argv = sys.argv[1:]
    for i, a in enumerate(argv):
        if a == "--reps":
            reps = int(argv[i + 1])
        elif a == "--quick":
            reps = default // 4
    return max(reps, 3)


def arg_value(name):
    argv = sys.argv[1:]
    return argv[argv.index(name) + 1] if name in argv else None


def fill(shape, k, scale):
    """bench_fill: scale * sin(0.37 i + 1.3 k + 0.1) in double, rounded to f32."""
    n = int(np.prod(shape)) if len(shape) else 1
    v = scale * np.sin(0.37 * np.arange(n, dtype=np.float64) + 1.3 * k + 0.1)
    return torch.from_numpy(v.reshape(shape).astype(np.float32))


def time_median(fn, reps, warm):
    """median wall time of fn() in ms after warm calls"""
    for _ in range(warm):
        fn()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t)


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def result(name, shape, threads, ms, gflop, note="-"):
    print(f"RESULT pytorch {name} {shape} {threads} {ms:.4f} {gflop:.6f} {note or '-'}", flush=True)
