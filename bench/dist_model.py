"""Predicted data-parallel scaling of a training step past one machine (docs/distributed.md).

usage: dist_model.py [--step-ms MS] [--batch B] [--grad-mb MB] [--buckets K] [--last-mb MB]
                     [--backward FRACTION] [--latency-us US]
From measured inputs (defaults: the d256 3+3 step of bench_train --config large at 1 thread,
docs/performance.md; its gradient slab; nn/dist's 4 MiB buckets) it prints, for 2..64 nodes at
10 and 100 Gbit/s, the ring allreduce time, the part of it backward does not hide, and the
efficiency (one node's step time over the N-node step time, each node with the same batch), and
the per-node batch below which communication no longer hides behind backward.

Model: a ring allreduce moves 2(N-1)/N of the gradient bytes through each node's link and takes
2(N-1) latency steps per bucket. Buckets start in reverse parameter order as backward finishes
them, so all of the reduction can overlap backward except the last bucket's (the first
parameters', ready only when backward ends): exposed = max(comm - last - backward, 0) + last."""
import sys


def arg(name, default):
    return float(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


step_ms = arg("--step-ms", 1494.8)   # 1 process, 1 thread, batch 64 (docs/performance.md)
batch = arg("--batch", 64)
grad_mb = arg("--grad-mb", 25.2)     # 6.3 M f32 parameters
nb = int(arg("--buckets", 6))          # bench_train --dist's note: buckets=, last=
last_mb = arg("--last-mb", 3.1)        # the first parameters' bucket, ready when backward ends
bucket_mb = (grad_mb - last_mb) / max(nb - 1, 1)
bwd = arg("--backward", 2 / 3)       # backward's share of the step (2 of its 3 GEMM passes)
lat_us = arg("--latency-us", 25)     # one message over TCP (Open MPI's tcp BTL)


def comm_ms(n, gbit, mb):
    return 2 * (n - 1) / n * mb * 8e-3 / gbit * 1e3 + 2 * (n - 1) * lat_us * 1e-3


print(f"inputs: step {step_ms:.1f} ms at batch {batch:.0f} per node, backward {bwd:.0%} of it, gradient {grad_mb:.1f} MB "
      f"in {nb} buckets (last {last_mb:.1f} MB), latency {lat_us:.0f} us")
print(f"{'nodes':>5}  {'Gbit/s':>6}  {'allreduce ms':>12}  {'exposed ms':>10}  {'efficiency':>10}  "
      f"{'hiding batch/node':>17}")
for gbit in (10, 100):
    for n in (2, 4, 8, 16, 32, 64):
        c = sum(comm_ms(n, gbit, bucket_mb) for _ in range(nb - 1)) + comm_ms(n, gbit, last_mb)
        last = comm_ms(n, gbit, last_mb)
        exposed = max(c - last - bwd * step_ms, 0) + last
        eff = step_ms / (step_ms + exposed)
        # the per-node batch whose backward just covers the reduction before the last bucket
        hide = (c - last) / (bwd * step_ms / batch)
        print(f"{n:5d}  {gbit:6d}  {c:12.1f}  {exposed:10.1f}  {eff:10.1%}  {hide:17.1f}")
