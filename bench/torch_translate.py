#!/usr/bin/python3
"""The PyTorch side of the toy-translation comparison: the same Transformer, data and
hyperparameters as `attograd-translate train` (defaults), trained with torch 1.13 on CPU.

    /usr/bin/python3 bench/torch_translate.py [--steps N] [--threads T] [--eval-every N]
        [--max-eval N] [--lr X] [--warmup N] [--batch N] [--label-smoothing E] [--dropout P]
        [--stop-at A] [--no-test] [--like CHECKPOINT]

Prints dev exact match every --eval-every steps (on --max-eval dev pairs) and, at the end, the
test exact match, the steps and the wall time to the first evaluation at or above --stop-at
(0.99). The defaults are attograd-translate train's (RECIPE); --like takes the recipe and the
SentencePiece models of an attograd-translate checkpoint, so both sides train on the same ids
(bench/run.sh's time-to-99 % row). Mirrors examples/translate: without --like, word tokens
(punctuation and hyphens split off), vocabularies from the training file with <pad> <bos> <eos>
<unk> first; 5% of the training file held out (not the same pairs as attograd's draw), batches
of --batch pairs of similar length in a shuffled order each epoch, embeddings initialised N(0, 1/d) then * sqrt(d) + sinusoidal positions, nn.Transformer (d 128, 4 heads, 2+2 layers,
ff 512, dropout, post-norm, batch-first), Linear generator, cross entropy with label
smoothing ignoring <pad>, Adam(0.9, 0.98, 1e-9), linear warmup then inverse square root,
gradient clipping 1.0, greedy decoding.

The model's state_dict has attograd's parameter names and nothing else (the positional table is
a non-persistent buffer), so an attograd-translate Transformer checkpoint loads with
strict=True: load_checkpoint(path) (tests/translate_torch.py checks it computes what attograd
computes)."""
import argparse
import math
import os
import random
import sys
import time
import unicodedata

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "examples", "translate", "data", "num-en-fr")
PAD, BOS, EOS, UNK = 0, 1, 2, 3
# attograd-translate train's defaults for the Transformer (examples/translate/train.c)
RECIPE = {"steps": 8000, "lr": 2e-3, "warmup": 100, "batch": 64, "label_smoothing": 0.1, "dropout": 0.1,
          "eval_every": 100, "max_eval": 1000}


def tokenize(s):
    out, word = [], []
    for ch in s:
        if ch.isspace():
            if word:
                out.append("".join(word))
                word = []
        elif unicodedata.category(ch).startswith("P") or ch in "$+<=>^`|~":
            if word:
                out.append("".join(word))
                word = []
            out.append(ch)
        else:
            word.append(ch)
    if word:
        out.append("".join(word))
    return out


def read(path):
    with open(path, encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t")) for line in f if "\t" in line]


def vocab(sentences):
    counts = {}
    for s in sentences:
        for t in tokenize(s):
            counts[t] = counts.get(t, 0) + 1
    words = sorted(counts, key=lambda w: (-counts[w], w.encode()))
    itos = ["<pad>", "<bos>", "<eos>", "<unk>"] + words
    return {w: i for i, w in enumerate(itos)}, itos


def encode(s, stoi):
    return [stoi.get(t, UNK) for t in tokenize(s)] + [EOS]


def batches(pairs, size, rng):
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0]), len(pairs[i][1]), rng.random()))
    return [order[k:k + size] for k in range(0, len(order), size)]


def pad(seqs, prefix=None):
    L = max(len(s) for s in seqs) + (1 if prefix is not None else 0)
    out = torch.full((len(seqs), L), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        s = ([prefix] if prefix is not None else []) + s
        out[i, :len(s)] = torch.tensor(s)
    return out


class Seq2Seq(nn.Module):
    def __init__(self, vs, vt, d=128, heads=4, layers=2, ff=512, dropout=0.1, max_len=136, dec_layers=None):
        super().__init__()
        self.d = d
        self.src_embed = nn.Embedding(vs, d, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(vt, d, padding_idx=PAD)
        self.transformer = nn.Transformer(d, heads, layers, layers if dec_layers is None else dec_layers, ff, dropout,
                                          batch_first=True)
        self.generator = nn.Linear(d, vt)
        self.drop = nn.Dropout(dropout)
        for e in (self.src_embed, self.tgt_embed):  # N(0, 1/d) as fairseq, the pad row zero
            nn.init.normal_(e.weight, 0.0, d ** -0.5)
            with torch.no_grad():
                e.weight[PAD].zero_()
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(max_len, d)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        # computed, not learnt: not in the state_dict, as attograd's checkpoints do not hold it
        self.register_buffer("pe", pe, persistent=False)

    def embed(self, e, ids):
        return self.drop(e(ids) * math.sqrt(self.d) + self.pe[:ids.shape[1]])

    def encode(self, src):
        return self.transformer.encoder(self.embed(self.src_embed, src), src_key_padding_mask=src == PAD)

    def decode(self, tgt, memory, src):
        T = tgt.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        h = self.transformer.decoder(self.embed(self.tgt_embed, tgt), memory, tgt_mask=causal,
                                     tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD)
        return self.generator(h)

    def forward(self, src, tgt):
        return self.decode(tgt, self.encode(src), src)


def vocabularies(cfg):
    """(src, tgt) token lists of a checkpoint's config: its word or character vocabularies, or
    the pieces of the SentencePiece models it carries (python3-sentencepiece reads them)."""
    if cfg.get("tokens") == "spm":
        import base64
        import sentencepiece as spm
        sps = [spm.SentencePieceProcessor(model_proto=base64.b64decode(cfg[k])) for k in ("src_spm", "tgt_spm")]
        return [[sp.id_to_piece(i) for i in range(sp.get_piece_size())] for sp in sps]
    return cfg["src_vocab"].rstrip("\n").split("\n"), cfg["tgt_vocab"].rstrip("\n").split("\n")


def load_checkpoint(path):
    """(model in eval mode, src_itos, tgt_itos, config) from an attograd-translate Transformer
    checkpoint, its parameters loaded with strict=True (a missing or extra name is an error)."""
    import sys
    sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
    import checkpoint_torch
    cfg = checkpoint_torch.read_config(path)
    if cfg.get("model") != "transformer":
        raise ValueError(f"{path}: a {cfg.get('model')} model; this reference model is the Transformer")
    src_itos, tgt_itos = vocabularies(cfg)
    model = Seq2Seq(len(src_itos), len(tgt_itos), d=cfg["d_model"], heads=cfg["nhead"], layers=cfg["encoder_layers"],
                    ff=cfg["dim_feedforward"], dropout=cfg["dropout"], max_len=cfg["positions"],
                    dec_layers=cfg["decoder_layers"])
    sd = checkpoint_torch.read_state_dict(path)
    model.load_state_dict(sd, strict=True)
    return model.eval(), src_itos, tgt_itos, cfg


@torch.no_grad()
def greedy(model, src):
    """Greedy ids of the padded batch src (B, S) after <bos>, each cut after its <eos>; a sentence
    runs at most 2 n + 8 tokens for its n source ids (as attograd's model_translate)."""
    memory = model.encode(src)
    n = (src != PAD).sum(1)
    limit = 2 * n + 8
    ys = torch.full((len(src), 1), BOS, dtype=torch.long)
    done = torch.zeros(len(src), dtype=torch.bool)
    for t in range(int(limit.max())):
        nxt = model.decode(ys, memory, src)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
        ys = torch.cat([ys, nxt.unsqueeze(1)], 1)
        done |= (nxt == EOS) | (t + 1 >= limit)
        if done.all():
            break
    out = []
    for i in range(len(src)):
        got = [x for x in ys[i, 1:].tolist()[:int(limit[i])] if x != PAD]
        out.append(got[:got.index(EOS) + 1] if EOS in got else got)
    return out


@torch.no_grad()
def exact_match(model, pairs, src_stoi, tgt_stoi, enc=encode):
    model.eval()
    hits = 0
    for k in range(0, len(pairs), 128):
        chunk = pairs[k:k + 128]
        got = greedy(model, pad([enc(s, src_stoi) for s, _ in chunk]))
        hits += sum(g == enc(t, tgt_stoi) for g, (_, t) in zip(got, chunk))
    model.train()
    return hits / len(pairs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # attograd-translate train's defaults (examples/translate/train.c), or --like's
    ap.add_argument("--steps", type=int, default=RECIPE["steps"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=RECIPE["eval_every"])
    ap.add_argument("--max-eval", type=int, default=RECIPE["max_eval"], help="dev pairs per evaluation (0: all)")
    ap.add_argument("--lr", type=float, default=RECIPE["lr"])
    ap.add_argument("--warmup", type=int, default=RECIPE["warmup"])
    ap.add_argument("--batch", type=int, default=RECIPE["batch"])
    ap.add_argument("--label-smoothing", type=float, default=RECIPE["label_smoothing"])
    ap.add_argument("--dropout", type=float, default=RECIPE["dropout"])
    ap.add_argument("--stop-at", type=float, default=0.99)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-test", action="store_true", help="skip the test split at the end")
    ap.add_argument("--like", metavar="CHECKPOINT",
                    help="an attograd-translate checkpoint: its SentencePiece models and recipe (lr, warmup, batch, "
                         "label smoothing, dropout, sizes; evaluation when it records them) replace the defaults")
    a = ap.parse_args()
    cfg = {}
    enc_fn = encode
    if a.like:
        sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
        import checkpoint_torch
        cfg = checkpoint_torch.read_config(a.like)
        given = {k for k in vars(a) if "--" + k.replace("_", "-") in sys.argv}
        for k in ("lr", "warmup", "batch", "label_smoothing", "dropout", "eval_every", "max_eval"):
            if k in cfg and k not in given:
                setattr(a, k, type(getattr(a, k))(cfg[k]))
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    train = read(os.path.join(DATA, "train.tsv"))
    test = read(os.path.join(DATA, "test.tsv"))
    if cfg.get("tokens") == "spm":  # the checkpoint's pieces: ids as attograd's
        import base64
        import sentencepiece as spm
        src_stoi, tgt_stoi = (spm.SentencePieceProcessor(model_proto=base64.b64decode(cfg[k]))
                              for k in ("src_spm", "tgt_spm"))
        enc_fn = lambda s, sp: sp.encode(s) + [EOS]  # noqa: E731
    else:
        src_stoi, _ = vocab(s for s, _ in train)
        tgt_stoi, _ = vocab(t for _, t in train)
    vs, vt = (len(src_stoi), len(tgt_stoi)) if not cfg.get("tokens") == "spm" else \
        (src_stoi.get_piece_size(), tgt_stoi.get_piece_size())
    idx = list(range(len(train)))
    rng.shuffle(idx)
    n_dev = round(0.05 * len(train))
    dev = [train[i] for i in sorted(idx[:n_dev])]
    train = [train[i] for i in sorted(idx[n_dev:])]
    dev_eval = [dev[i] for i in sorted(rng.sample(range(len(dev)), a.max_eval))] if 0 < a.max_eval < len(dev) else dev
    enc = [(enc_fn(s, src_stoi), enc_fn(t, tgt_stoi)) for s, t in train]
    sizes = {k: cfg[c] for k, c in (("d", "d_model"), ("heads", "nhead"), ("layers", "encoder_layers"),
                                    ("ff", "dim_feedforward"), ("dec_layers", "decoder_layers")) if c in cfg}
    model = Seq2Seq(vs, vt, dropout=a.dropout, **sizes)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=a.label_smoothing)
    bs = batches(enc, a.batch, rng)
    print(f"torch {torch.__version__}, {a.threads} thread(s), {sum(p.numel() for p in model.parameters())} "
          f"parameters, {len(train)} training pairs; lr {a.lr}, warmup {a.warmup}, batch {a.batch}, label smoothing "
          f"{a.label_smoothing}, dropout {a.dropout}; {len(dev_eval)} dev pairs every {a.eval_every} steps", flush=True)
    step, t0, reached = 0, time.time(), None
    while step < a.steps and reached is None:
        rng.shuffle(bs)
        for b in bs:
            src = pad([enc[i][0] for i in b])
            tgt_in = pad([enc[i][1][:-1] for i in b], prefix=BOS)
            tgt_out = pad([enc[i][1] for i in b])
            logits = model(src, tgt_in)
            loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            step += 1
            for g in opt.param_groups:
                g["lr"] = a.lr * min(step / a.warmup, math.sqrt(a.warmup / step))
            opt.step()
            if step % a.eval_every == 0 or step == a.steps:
                acc = exact_match(model, dev_eval, src_stoi, tgt_stoi, enc_fn)
                el = time.time() - t0
                print(f"step {step}: loss {loss.item():.4f}, dev exact match {100 * acc:.2f}%, {el:.1f} s", flush=True)
                if acc >= a.stop_at:
                    reached = (step, el)
                    break
            if step >= a.steps:
                break
    if not a.no_test:
        acc = exact_match(model, test, src_stoi, tgt_stoi, enc_fn)
        print(f"test exact match {100 * acc:.2f}% after {step} steps, {time.time() - t0:.1f} s")
    if reached:
        print(f"reached {100 * a.stop_at:.0f}% dev exact match at step {reached[0]}, {reached[1]:.1f} s")


if __name__ == "__main__":
    main()
