#!/usr/bin/python3
"""attograd-translate's recurrent models in PyTorch: a tiny GRU, LSTM and RNN model trained by
attograd-translate ($AG_TRANSLATE_BIN), converted by scripts/checkpoint_torch.py to-torch, loads
with load_state_dict(strict=True) into the same model written with torch.nn (nn.GRU / nn.LSTM /
nn.RNN encoder, GRUCell / LSTMCell / RNNCell decoder, additive attention), and torch's greedy
translations equal attograd's. Exits 0 when all pass, 1 when one fails, 77 (meson's "skipped")
without torch or h5py."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
sys.path.insert(0, os.path.join(HERE, "parity"))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
try:
    import torch

    import checkpoint_torch as ct
    import torch_translate as tt
    from gen_gru import AdditiveAttention  # attograd's ag_additive_attention_module
except (ImportError, SystemExit) as e:
    print(f"translate_torch_recurrent: skipped, cannot import torch or h5py ({e})", file=sys.stderr)
    sys.exit(77)

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SENTENCES = ["a b c", "f", "e e d a", "c d e f a b c", "b b b b"]


class Seq2Seq(tt.RecurrentSeq2Seq):
    """examples/translate/model.c's recurrent encoder-decoder (bench/torch_translate.py's
    modules), with a greedy search of its own: one sentence at a time, step by step"""

    def __init__(self, kind, src_vocab, tgt_vocab, E, H, layers):
        super().__init__(kind, src_vocab, tgt_vocab, E, H, layers)
        self.attention = AdditiveAttention(H, 2 * H, H)  # the same parameters, and a forward

    @torch.no_grad()
    def greedy(self, src):
        """ids of one sentence (<eos> ending it) -> the generated ids up to <eos> (excluded), at most 2n + 8"""
        keys, hn = self.encoder(self.src_embed(torch.tensor([src])))
        hn = hn[0] if self.kind == "lstm" else hn
        h = torch.tanh(self.bridge(torch.cat([hn[-2], hn[-1]], -1)))
        c = torch.zeros_like(h)
        ids, out = torch.tensor([BOS]), []
        for _ in range(2 * len(src) + 8):
            ctx = self.attention(h, keys)[0]
            x = torch.cat([self.tgt_embed(ids), ctx], -1)
            if self.kind == "lstm":
                h, c = self.decoder(x, (h, c))
            else:
                h = self.decoder(x, h)
            logits = self.generator(torch.cat([h, ctx], -1))[0]
            logits[[PAD, BOS]] = -float("inf")  # never words of a translation
            ids = logits.argmax(-1, keepdim=True)
            if ids.item() == EOS:
                break
            out.append(ids.item())
        return out


def toy_corpus(path, lines=40, seed=12345):
    """source letters a-f, target the same reversed in capitals (tests/test_util.c's tu_write_toy_corpus)"""
    x, rows = seed, []
    for _ in range(lines):
        x = (x * 1664525 + 1013904223) % 2**32
        n = 2 + (x >> 30) % 3
        w = []
        for _ in range(n):
            x = (x * 1664525 + 1013904223) % 2**32
            w.append(chr(ord("a") + (x >> 24) % 6))
        rows.append(" ".join(w) + "\t" + " ".join(c.upper() for c in reversed(w)))
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")


def run(*args):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def check(bin_, kind, d):
    out = os.path.join(d, kind)
    run(bin_, "train", "--train", os.path.join(d, "toy.tsv"), "--out", out, "--model", kind, "--d-model", "16",
        "--hidden", "16", "--batch", "8", "--steps", "150", "--warmup", "10", "--lr", "0.01", "--eval-every", "150", "--max-eval", "8",
        "--threads", "1", "--seed", "3", "--dropout", "0.1", "--tokenizer", "word")
    ckpt = os.path.join(out, "last.h5")
    sd = ct.to_torch(ckpt, os.path.join(out, "last.pt"))
    cfg = ct.read_config(ckpt)
    src_vocab, tgt_vocab = cfg["src_vocab"].split("\n"), cfg["tgt_vocab"].split("\n")
    m = Seq2Seq(kind, len(src_vocab), len(tgt_vocab), cfg["d_model"], cfg["hidden"], cfg["encoder_layers"])
    if list(m.state_dict()) != list(sd):
        raise AssertionError(f"{kind}: names differ: torch {list(m.state_dict())}, checkpoint {list(sd)}")
    m.load_state_dict(torch.load(os.path.join(out, "last.pt")), strict=True)
    m.eval()
    got = run(bin_, "translate", "--checkpoint", ckpt, *SENTENCES).split("\n")[:-1]
    index = {t: i for i, t in enumerate(src_vocab)}
    want = [" ".join(tgt_vocab[i] for i in m.greedy([index.get(w, UNK) for w in s.split()] + [EOS])) for s in SENTENCES]
    if got != want:
        raise AssertionError(f"{kind}: attograd translates {got}, torch {want}")
    print(f"  ok: {kind}: {len(sd)} tensors load strictly into torch; {len(SENTENCES)} greedy translations agree "
          f"({SENTENCES[3]!r} -> {want[3]!r})")


def main():
    bin_ = os.environ.get("AG_TRANSLATE_BIN")
    if not bin_ or not os.access(bin_, os.X_OK):
        print("translate_torch_recurrent: needs attograd-translate in AG_TRANSLATE_BIN", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="ag_translate_torch_") as d:
        toy_corpus(os.path.join(d, "toy.tsv"))
        try:
            for kind in ("gru", "lstm", "rnn"):
                check(bin_, kind, d)
        except (AssertionError, RuntimeError) as e:
            print(f"translate_torch_recurrent: FAILED: {e}", file=sys.stderr)
            return 1
    print("translate_torch_recurrent: all comparisons passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
