"""Joins the RESULT lines of both sides (bench/bench_util.h, bench/common.py) into one table.

usage: report.py RESULTS_FILE
Each (side, benchmark, shape, threads) may have several lines, one per round of run.sh; the
table shows the best round's median (the least disturbed by other load on the machine), and
the spread of round medians in the last column. GFLOP/s and % of peak are attograd's; the
peak is the best sgemm rate (over n = 512 and 1024) at the same thread count in this run."""
import collections
import sys

rows = collections.OrderedDict()
notes = []
for line in open(sys.argv[1]):
    f = line.split()
    if not f:
        continue
    if f[0] == "NOTE":
        if line[5:].rstrip() not in notes:
            notes.append(line[5:].rstrip())
        continue
    if f[0] != "RESULT":
        continue
    side, name, shape, threads, ms, gflop = f[1], f[2], f[3], int(f[4]), float(f[5]), float(f[6])
    note = f[7] if len(f) > 7 else "-"
    r = rows.setdefault((name, shape, threads), {"gflop": gflop, "attograd": [], "pytorch": [], "notes": {}})
    r[side].append(ms)
    r["notes"][side] = note

peak = {}
for (name, shape, threads), r in rows.items():
    if name == "sgemm" and r["attograd"]:
        peak[threads] = max(peak.get(threads, 0), r["gflop"] / min(r["attograd"]) * 1e3)

# the sgemm rows carry torch.mm as their PyTorch side
for (name, shape, threads), r in list(rows.items()):
    if name == "matmul" and (("sgemm", shape, threads) in rows) and r["pytorch"]:
        rows[("sgemm", shape, threads)]["pytorch"] = r["pytorch"]
        rows[("sgemm", shape, threads)]["notes"]["pytorch"] = r["notes"].get("pytorch", "-")
        if not r["attograd"]:
            del rows[(name, shape, threads)]
        else:
            r["pytorch"] = []


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


hdr = ("benchmark", "shape", "thr", "attograd ms", "PyTorch ms", "ratio", "GFLOP/s", "% peak", "torch GFLOP/s",
       "rounds (ag spread %)", "notes")
table = []
for (name, shape, threads), r in rows.items():
    a = min(r["attograd"]) if r["attograd"] else None
    t = min(r["pytorch"]) if r["pytorch"] else None
    rss = name.endswith("_rss")
    secs = name.startswith("translate_to")  # time_to.py's rows: wall time in s, steps in the notes
    if secs:
        a, t = (None if v is None else v / 1e3 for v in (a, t))
    ratio = a / t if a is not None and t else None
    gf = r["gflop"] / a * 1e3 if a and not rss and not secs and r["gflop"] > 0 else None
    tgf = r["gflop"] / t * 1e3 if t and not rss and not secs and r["gflop"] > 0 else None
    pk = 100 * gf / peak[threads] if gf and threads in peak else None
    spread = None
    if len(r["attograd"]) > 1:
        spread = 100 * (max(r["attograd"]) - a) / a
    note = ";".join(f"{k[:2]}:{v}" for k, v in r["notes"].items() if v != "-")
    unit = " MiB" if rss else " s" if secs else ""
    table.append((name, shape, str(threads), fmt(a, ".3f") + unit if a is not None else "-",
                  fmt(t, ".3f") + unit if t is not None else "-", fmt(ratio, ".2f"), fmt(gf, ".1f"),
                  fmt(pk, ".0f"), fmt(tgf, ".1f"), f"{len(r['attograd'])} ({fmt(spread, '.0f')})", note))

w = [max(len(h), *(len(row[i]) for row in table)) if table else len(h) for i, h in enumerate(hdr)]
for n in notes:
    print("#", n)
print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)).rstrip())
print("  ".join("-" * w[i] for i in range(len(hdr))))
for row in table:
    print("  ".join(c.ljust(w[i]) for i, c in enumerate(row)).rstrip())

# time to a dev exact match (time_to.py's rows): attograd's seconds and steps at each thread count
# against PyTorch's at 1 thread, the same recipe
for (name, shape, threads), r in rows.items():
    if not name.startswith("translate_to") or not r["attograd"]:
        continue
    torch1 = rows.get((name, shape, 1), {}).get("pytorch")
    a = min(r["attograd"])
    line = (f"# {name} {shape}: attograd {a / 1e3:.1f} s ({r['notes'].get('attograd', '-')}) at {threads} "
            f"thread{'s' if threads > 1 else ''}")
    if torch1:
        line += (f", PyTorch {min(torch1) / 1e3:.1f} s ({rows[(name, shape, 1)]['notes'].get('pytorch', '-')}) at 1 "
                 f"thread: attograd takes {a / min(torch1):.2f} of PyTorch's time")
    print(line)

# thread scaling and thread-count independence, for benchmarks run at several thread counts
by_bench = collections.defaultdict(dict)
for (name, shape, threads), r in rows.items():
    if name != "sgemm" and name != "matmul" and r["attograd"]:
        by_bench[(name, shape)][threads] = r
for (name, shape), per in by_bench.items():
    if len(per) < 2:
        continue
    t1, tn = min(per), max(per)
    a1, an = min(per[t1]["attograd"]), min(per[tn]["attograd"])
    line = f"# {name}: {tn} threads vs {t1}: attograd {a1 / an:.2f}x faster"
    if per[t1]["pytorch"] and per[tn]["pytorch"]:
        line += f", PyTorch {min(per[t1]['pytorch']) / min(per[tn]['pytorch']):.2f}x"
    finals = {t: n.split("final=")[1].split(",")[0] for t, r in per.items()
              for n in [r["notes"].get("attograd", "")] if "final=" in n}
    if len(finals) > 1:
        same = len(set(finals.values())) == 1
        line += "; attograd's final loss " + ("identical" if same else "DIFFERS") + " across thread counts (" + \
            ", ".join(f"{t}: {v}" for t, v in sorted(finals.items())) + ")"
    print(line)

# data-parallel rows (train_<config>_np<N>, N processes x 1 thread on the same global batch)
# against the same step in one process at 1 thread
for (name, shape, threads), r in rows.items():
    if "_np" not in name or not r["attograd"]:
        continue
    base, n = name.rsplit("_np", 1)
    one = rows.get((base, shape, 1))
    if not one or not one["attograd"]:
        continue
    a = min(r["attograd"])
    line = f"# {name}: {n} processes x {threads} thread vs 1 x 1: attograd {min(one['attograd']) / a:.2f}x the throughput"
    if r["pytorch"]:
        line += f"; step {a / min(r['pytorch']):.2f}x DistributedDataParallel's (gloo)"
    # the least time a rank's GEMMs can take: their work at the best sgemm rate of this run
    gemm = [v[5:-2] for v in r["notes"].get("attograd", "").split(",") if v.startswith("gemm=")]
    if gemm and threads in peak:
        g = float(gemm[0])
        line += (f"; a rank's GEMMs ({g:.2f} GFLOP) take {g / peak[threads] * 1e3:.0f} ms at this run's "
                 f"sgemm peak ({peak[threads]:.1f} GFLOP/s)")
        if r["pytorch"]:
            line += f", half of DDP's step is {min(r['pytorch']) / 2:.0f} ms"
    print(line)

# decoding rows (bench_decode.py): time per sentence in ms; sentences per second both sides, and
# the lines where PyTorch's translation differs from attograd's (the same search on the same
# checkpoint: 0 expected)
for (name, shape, threads), r in rows.items():
    if not name.startswith("decode_") or not r["attograd"] or not r["pytorch"]:
        continue
    a, t = min(r["attograd"]), min(r["pytorch"])
    note = r["notes"].get("pytorch", "")
    mismatch = note.split("mismatch=")[1].split(",")[0] if "mismatch=" in note else "not compared"
    print(f"# {name}, {threads} thread{'s' if threads > 1 else ''}: attograd {1e3 / a:.0f} sentences/s, PyTorch "
          f"{1e3 / t:.0f}: attograd takes {a / t:.2f} of PyTorch's time per sentence; translations that differ: "
          f"{mismatch}")
