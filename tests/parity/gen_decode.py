#!/usr/bin/python3
"""PyTorch's greedy and beam-4 translations of attograd-translate checkpoints: the fixture of
tests/test_translate_decode.c, which runs `attograd-translate translate` on the same sentences
and requires the same output, line for line.

Run from the repository root:
    /usr/bin/python3 tests/parity/gen_decode.py            -> tests/parity/decode/expected.tsv
    /usr/bin/python3 tests/parity/gen_decode.py --train BIN   first (re)trains the checkpoints

The checkpoints (tests/parity/decode/KIND.h5, committed) are tiny models that attograd-translate
BIN trains on examples/translate/data/num-en-fr (word tokens, 400 steps: partly trained, so that
greedy and beam search often disagree), kept without their optimizer state. The translations
come from bench/torch_translate.py: the model loaded with strict=True, decoded incrementally
with the algorithm of attograd's model_translate (its docstring), 50 sentences of the test split
in one batch, greedy and beam 4 with GNMT length penalty 0.6.

expected.tsv: one row per (kind, beam, sentence): kind, beam, margin, source, translation.
margin is the least gap between two scores whose order the search used (the last beam kept and
the first dropped at each step, the best and the runner-up at the end); float rounding differs
between attograd and PyTorch by about 1e-6 per token, so a margin below TIE (1e-4) is a near tie
that either may decide: the script names each one, and the test names it when it differs."""
import argparse
import os
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import checkpoint_torch  # noqa: E402
import torch  # noqa: E402
import torch_translate as tt  # noqa: E402

OUT = os.path.join(HERE, "decode")
DATA = os.path.join(ROOT, "examples", "translate", "data", "num-en-fr")
TIE = 1e-4
BEAMS = (1, 4)
ALPHA = 0.6
# kind -> attograd-translate train options (small enough that each checkpoint stays < 200 KB)
KINDS = {
    "transformer": ["--d-model", "32", "--heads", "4", "--layers", "1", "--ff", "64"],
    "gru": ["--d-model", "16", "--hidden", "32"],
    "lstm": ["--d-model", "16", "--hidden", "32"],
}


def train(binary):
    """each kind trained by attograd-translate, saved as OUT/KIND.h5 without /optimizer"""
    os.makedirs(OUT, exist_ok=True)
    for kind, opts in KINDS.items():
        with tempfile.TemporaryDirectory(prefix="ag_gen_decode_") as d:
            subprocess.run([binary, "train", "--train", os.path.join(DATA, "train.tsv"), "--out", d, "--model", kind,
                            "--tokenizer", "word", "--steps", "400", "--lr", "3e-3", "--warmup", "100",
                            "--eval-every", "400", "--max-eval", "200", "--samples", "0", "--threads", "1",
                            "--seed", "1", *opts], check=True, stdout=subprocess.DEVNULL)
            src = os.path.join(d, "last.h5")
            cfg = checkpoint_torch.read_config(src)
            cfg.pop("train_file", None)  # a path on the machine that trained it
            checkpoint_torch.write_checkpoint(os.path.join(OUT, kind + ".h5"), checkpoint_torch.read_state_dict(src),
                                              config=cfg)
        print(f"{kind}.h5: {os.path.getsize(os.path.join(OUT, kind + '.h5'))} bytes")


def sentences():
    """every 40th source sentence of the test split: 50"""
    return [s for s, _ in tt.read(os.path.join(DATA, "test.tsv"))][::40]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", metavar="BIN", help="retrain the checkpoints with this attograd-translate first")
    a = ap.parse_args()
    if a.train:
        train(a.train)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
    lines = sentences()
    rows, ties = [], 0
    for kind in KINDS:
        path = os.path.join(OUT, kind + ".h5")
        model, src_itos, tgt_itos, cfg = tt.load_checkpoint(path, tuple(KINDS))
        codec = tt.Codec(cfg, src_itos, tgt_itos)
        out = {}
        for beam in BEAMS:
            margins = []
            out[beam] = tt.translate_lines(model, codec, lines, beam, ALPHA, margins=margins)
            for i, (s, t, m) in enumerate(zip(lines, out[beam], margins)):
                if m < TIE:
                    ties += 1
                    print(f"near tie: {kind} beam {beam} sentence {i + 1} '{s}': margin {m:.3g}")
                rows.append(f"{kind}\t{beam}\t{m:.6g}\t{s}\t{t}")
        differ = sum(g != b for g, b in zip(out[1], out[4]))
        print(f"{kind}: greedy and beam {BEAMS[-1]} differ on {differ} of {len(lines)} sentences")
    with open(os.path.join(OUT, "expected.tsv"), "w", encoding="utf-8") as f:
        f.write("# kind\tbeam\tmargin\tsource\ttranslation  (tests/parity/gen_decode.py, torch "
                f"{torch.__version__}, length penalty {ALPHA})\n")
        f.write("\n".join(rows) + "\n")
    print(f"expected.tsv: {len(rows)} translations, {ties} at a near tie (margin < {TIE:g})")


if __name__ == "__main__":
    main()
