"""torch.mm for the square sizes of bench_sgemm.c (torch 1.13 calls the same OpenBLAS sgemm)."""
import torch

from common import fill, reps_from_argv, result, setup_threads, time_median

threads = setup_threads()
reps = reps_from_argv(40)
for n in (512, 1024):
    a, b = fill((n, n), 1, 1.0), fill((n, n), 2, 1.0)
    out = torch.empty(n, n)
    r = reps // 4 + 3 if n >= 1024 else reps
    ms = time_median(lambda: torch.mm(a, b, out=out), r, 3)
    result("matmul", f"{n}x{n}x{n}", threads, ms, 2 * n**3 * 1e-9, "torch.mm")
