#!/usr/bin/python3
"""attograd-translate's Transformer checkpoint in PyTorch: bench/torch_translate.py's reference
model loads it with strict=True and computes what attograd computes.

    translate_torch.py [--bin PATH]     (PATH or $AG_TRANSLATE_BIN)

Trains a tiny model with attograd-translate on a toy corpus (letters to capitals, reversed),
then checks: the state_dict names are exactly the reference model's (strict loading passes, and
fails on a missing or an extra tensor); the teacher-forced loss `eval` prints equals torch's on
the same pairs; greedy translations by `translate` equal torch's token for token. Exits 0 when
every check passed, 1 when one failed, 77 (meson's "skipped") without torch or h5py."""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import warnings

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("AG_SOURCE_ROOT", os.path.join(HERE, ".."))

try:
    import h5py  # noqa: F401  (checkpoint_torch reads the checkpoint with it)
    import torch
except ImportError as e:
    print(f"translate_torch: skipped, cannot import {e.name}", file=sys.stderr)
    sys.exit(SKIP)

sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import checkpoint_torch  # noqa: E402
import torch_translate as tt  # noqa: E402


class CheckFailed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise CheckFailed(what)
    print(f"  ok: {what}")


def toy_corpus(path, lines, seed):
    r = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(lines):
            w = [r.choice("abcdef") for _ in range(r.randint(2, 5))]
            f.write(" ".join(w) + "\t" + " ".join(c.upper() for c in reversed(w)) + "\n")


def run(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise CheckFailed(f"attograd-translate {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def check(binary):
    with tempfile.TemporaryDirectory(prefix="ag_translate_torch_") as d:
        corpus, out = os.path.join(d, "toy.tsv"), os.path.join(d, "run")
        toy_corpus(corpus, 120, 5)
        args = ["train", "--train", corpus, "--out", out, "--d-model", "32", "--heads", "4", "--layers", "2", "--ff",
                "64", "--batch", "16", "--steps", "200", "--lr", "0.005", "--warmup", "20", "--eval-every", "60",
                "--threads", "1", "--seed", "3"]
        if "--tokenizer" in run(binary, "train", "--help"):
            args += ["--tokenizer", "word"]  # the reference model's tokens: words
        run(binary, *args)
        ckpt = os.path.join(out, "last.h5")

        model, src_itos, tgt_itos, cfg = tt.load_checkpoint(ckpt)  # strict=True
        sd = checkpoint_torch.read_state_dict(ckpt)
        expect(sorted(model.state_dict()) == sorted(sd),
               f"the checkpoint's {len(sd)} tensors are the reference model's state_dict, loaded with strict=True")
        for broken, what in ((dict(list(sd.items())[1:]), "a missing tensor"),
                             (dict(sd, extra=torch.zeros(1)), "an extra tensor")):
            try:
                model.load_state_dict(broken, strict=True)
                failed = False
            except RuntimeError:
                failed = True
            expect(failed, f"strict loading refuses {what} (the check can fail)")

        src_stoi = {w: i for i, w in enumerate(src_itos)}
        tgt_stoi = {w: i for i, w in enumerate(tgt_itos)}
        pairs = tt.read(corpus)
        # eval's loss: teacher-forced cross entropy per target token, no label smoothing
        line = run(binary, "eval", "--checkpoint", ckpt, "--data", corpus)
        m = re.search(r": (\d+) pairs, loss ([0-9.]+), ", line)
        expect(m is not None and int(m.group(1)) == len(pairs), f"eval prints the loss: {line.strip()}")
        with torch.no_grad():
            total, tokens = 0.0, 0
            for k in range(0, len(pairs), 32):
                chunk = pairs[k:k + 32]
                src = tt.pad([tt.encode(s, src_stoi) for s, _ in chunk])
                tgt = [tt.encode(t, tgt_stoi) for _, t in chunk]
                logits = model(src, tt.pad([t[:-1] for t in tgt], prefix=tt.BOS))
                ref = tt.pad(tgt)
                total += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ref.reshape(-1),
                                                           ignore_index=tt.PAD, reduction="sum").item()
                tokens += int((ref != tt.PAD).sum())
        torch_loss = total / tokens
        expect(abs(torch_loss - float(m.group(2))) <= 1e-4 + 1e-4 * torch_loss,
               f"torch's loss {torch_loss:.6f} equals eval's {m.group(2)}")
        expect(torch_loss < 1.0, f"the model has learnt something (loss {torch_loss:.3f}), so greedy output varies")

        # greedy translations, word for word
        sentences = [s for s, _ in pairs[:40]] + ["a b c d e f", "f", "c c c c"]
        got = run(binary, "translate", "--checkpoint", ckpt, *sentences).split("\n")[:-1]
        want = tt.greedy(model, tt.pad([tt.encode(s, src_stoi) for s in sentences]))
        want = [" ".join(tgt_itos[i] for i in ids if i != tt.EOS) for ids in want]
        same = sum(g == w for g, w in zip(got, want))
        differ = [(g, w) for g, w in zip(got, want) if g != w]
        expect(len(got) == len(want) and same == len(want), f"greedy translations equal torch's: {same} of {len(want)}"
               + (f" (first differing: attograd '{differ[0][0]}', torch '{differ[0][1]}')" if differ else ""))
        expect(len(set(got)) > 5, f"the translations differ from each other ({len(set(got))} distinct)")
    print("translate_torch: all checks passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("AG_TRANSLATE_BIN"))
    a = ap.parse_args()
    if not a.bin or not os.access(a.bin, os.X_OK):
        print("translate_torch: needs attograd-translate (--bin or AG_TRANSLATE_BIN)", file=sys.stderr)
        return 1
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")  # torch 1.13 says it per call
    try:
        check(a.bin)
    except CheckFailed as e:
        print(f"translate_torch: FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
