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
from torch.nn import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "examples", "translate", "data", "num-en-fr")
PAD, BOS, EOS, UNK = 0, 1, 2, 3
# attograd-translate train's defaults for the Transformer (examples/translate/train.c)
RECIPE = {"steps": 8000, "lr": 1e-3, "warmup": 100, "batch": 64, "label_smoothing": 0.1, "dropout": 0.1,
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

    # Incremental decoding, as fairseq's incremental state: the cross-attention keys and values of
    # the memory are computed once, the self-attention keys and values grow by one position a
    # step (written into buffers of T positions, position-major so that the filled part is one
    # contiguous block), and beam search reorders them. Rows are sentences times beams; a
    # sentence's K beams share its memory (queried as K positions at once, not copied K times).
    def begin(self, src, K, T):
        """decoding state for the padded batch src (B, S), K rows per sentence, T positions"""
        memory = self.encode(src)
        B, S = src.shape
        if memory.shape[1] < S:  # the encoder's nested-tensor path pads to the longest sentence only
            memory = F.pad(memory, (0, 0, 0, S - memory.shape[1]))
        d, layers = self.d, self.transformer.decoder.layers
        h = layers[0].self_attn.num_heads
        cross = []
        for L in layers:
            ca = L.multihead_attn
            kv = F.linear(memory, ca.in_proj_weight[d:], ca.in_proj_bias[d:]).view(B, S, 2, h, d // h)
            cross.append((kv[:, :, 0].transpose(1, 2).contiguous(), kv[:, :, 1].transpose(1, 2).contiguous()))
        bias = torch.zeros(B, 1, 1, S).masked_fill_((src == PAD)[:, None, None, :], float("-inf"))
        # per layer: keys, values and a spare buffer for reordering, each (T, R, h, dh)
        cache = [[torch.empty(T, B * K, h, d // h) for _ in range(3)] for _ in layers]
        return {"B": B, "K": K, "h": h, "t": 0, "cross": cross, "bias": bias, "cache": cache}

    def step(self, st, ids):
        """feed ids (R) at the next position: log-probabilities (R, V) of the token after it"""
        R, d, h, t = ids.shape[0], self.d, st["h"], st["t"]
        B, K, dh = st["B"], st["K"], d // st["h"]
        scale = dh ** -0.5
        x = self.tgt_embed(ids) * math.sqrt(d) + self.pe[t]
        for i, L in enumerate(self.transformer.decoder.layers):
            sa, ca = L.self_attn, L.multihead_attn
            q, k, v = F.linear(x, sa.in_proj_weight, sa.in_proj_bias).view(R, 3, h, dh).unbind(1)
            kc, vc = st["cache"][i][0], st["cache"][i][1]
            kc[t], vc[t] = k, v
            # one query against t+1 keys: products and sums, faster on CPU than R h tiny GEMMs
            w = torch.softmax((kc[:t + 1] * (q * scale)).sum(-1), 0)  # (t+1, R, h)
            a = (w.unsqueeze(-1) * vc[:t + 1]).sum(0)
            x = L.norm1(x + F.linear(a.view(R, d), sa.out_proj.weight, sa.out_proj.bias))
            q = (F.linear(x, ca.in_proj_weight[:d], ca.in_proj_bias[:d]) * scale).view(B, K, h, 1, dh).transpose(1, 2)
            ck, cv = st["cross"][i]  # (B, h, S, dh)
            w = torch.softmax((q * ck.unsqueeze(2)).sum(-1) + st["bias"], -1)  # (B, h, K, S)
            a = (w.unsqueeze(-1) * cv.unsqueeze(2)).sum(3).transpose(1, 2).reshape(R, d)
            x = L.norm2(x + F.linear(a, ca.out_proj.weight, ca.out_proj.bias))
            x = L.norm3(x + L.linear2(F.relu(L.linear1(x))))
        st["t"] = t + 1
        return torch.log_softmax(self.generator(self.transformer.decoder.norm(x)), -1)

    def reorder(self, st, rows):
        """row r continues row rows[r]"""
        t = st["t"]
        for c in st["cache"]:
            for i in (0, 1):  # gathered into the spare buffer, which then takes its place
                torch.index_select(c[i][:t], 1, rows, out=c[2][:t])
                c[i], c[2] = c[2], c[i]


class AdditiveAttention(nn.Module):
    """Bahdanau: score(s, h_j) = v^T tanh(W1 h_j + W2 s); attograd's ag_additive_attention_module"""

    def __init__(self, query_size, key_size, attn_size):
        super().__init__()
        self.W1 = nn.Linear(key_size, attn_size, bias=False)
        self.W2 = nn.Linear(query_size, attn_size, bias=False)
        self.v = nn.Linear(attn_size, 1, bias=False)


class RecurrentSeq2Seq(nn.Module):
    """examples/translate/model.c's recurrent encoder-decoder (kind gru, lstm or rnn): a
    bidirectional encoder over the source's real tokens, a tanh Linear bridge from its last
    layer's final states to the decoder cell's first state, additive attention over the encoder
    outputs with the previous decoder state as query, the cell reading [word; context] and the
    generator [state; context]. Parameters in model.c's order and names."""

    def __init__(self, kind, vs, vt, E=128, H=128, layers=1):
        super().__init__()
        self.kind = kind
        self.src_embed = nn.Embedding(vs, E, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(vt, E, padding_idx=PAD)
        rnn = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}[kind]
        self.encoder = rnn(E, H, num_layers=layers, bidirectional=True, batch_first=True)
        self.bridge = nn.Linear(2 * H, H)
        self.attention = AdditiveAttention(H, 2 * H, H)
        self.decoder = {"gru": nn.GRUCell, "lstm": nn.LSTMCell, "rnn": nn.RNNCell}[kind](E + 2 * H, H)
        self.generator = nn.Linear(3 * H, vt)

    def begin(self, src, K, T):
        """decoding state for the padded batch src (B, S), K rows per sentence: the encoder's
        outputs and their attention projection per sentence, the decoder state per row"""
        B, S = src.shape
        lengths = (src != PAD).sum(1)
        packed = nn.utils.rnn.pack_padded_sequence(self.src_embed(src), lengths, batch_first=True, enforce_sorted=False)
        out, hn = self.encoder(packed)
        memory = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=S)[0]  # (B, S, 2H)
        hn = hn[0] if self.kind == "lstm" else hn
        h = torch.tanh(self.bridge(torch.cat((hn[-2], hn[-1]), -1))).repeat_interleave(K, 0)
        bias = torch.zeros(B, 1, S).masked_fill_((src == PAD)[:, None, :], float("-inf"))
        return {"B": B, "K": K, "memory": memory, "keys": self.attention.W1(memory)[:, None], "bias": bias, "h": h,
                "c": torch.zeros_like(h) if self.kind == "lstm" else None}

    def step(self, st, ids):
        """feed ids (R) at the next position: log-probabilities (R, V) of the token after it"""
        B, K, h = st["B"], st["K"], st["h"]
        q = self.attention.W2(h).view(B, K, 1, -1)  # (B, K, 1, A) against keys (B, 1, S, A)
        scores = self.attention.v(torch.tanh(st["keys"] + q)).squeeze(-1) + st["bias"]  # (B, K, S)
        ctx = torch.bmm(torch.softmax(scores, -1), st["memory"]).view(B * K, -1)
        x = torch.cat((self.tgt_embed(ids), ctx), -1)
        if self.kind == "lstm":
            st["h"], st["c"] = self.decoder(x, (h, st["c"]))
        else:
            st["h"] = self.decoder(x, h)
        return torch.log_softmax(self.generator(torch.cat((st["h"], ctx), -1)), -1)

    def reorder(self, st, rows):
        """row r continues row rows[r]"""
        st["h"] = st["h"].index_select(0, rows)
        if st["c"] is not None:
            st["c"] = st["c"].index_select(0, rows)


def vocabularies(cfg):
    """(src, tgt) token lists of a checkpoint's config: its word or character vocabularies, or
    the pieces of the SentencePiece models it carries (python3-sentencepiece reads them)."""
    if cfg.get("tokens") == "spm":
        import base64
        import sentencepiece as spm
        sps = [spm.SentencePieceProcessor(model_proto=base64.b64decode(cfg[k])) for k in ("src_spm", "tgt_spm")]
        return [[sp.id_to_piece(i) for i in range(sp.get_piece_size())] for sp in sps]
    return cfg["src_vocab"].rstrip("\n").split("\n"), cfg["tgt_vocab"].rstrip("\n").split("\n")


def load_checkpoint(path, kinds=("transformer",)):
    """(model in eval mode, src_itos, tgt_itos, config) from an attograd-translate checkpoint of
    one of kinds (transformer; gru, lstm, rnn: RecurrentSeq2Seq), its parameters loaded with
    strict=True (a missing or extra name is an error)."""
    import sys
    sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
    import checkpoint_torch
    cfg = checkpoint_torch.read_config(path)
    kind = cfg.get("model")
    if kind not in kinds:
        raise ValueError(f"{path}: a {kind} model; expected {' or '.join(kinds)}")
    src_itos, tgt_itos = vocabularies(cfg)
    if kind == "transformer":
        model = Seq2Seq(len(src_itos), len(tgt_itos), d=cfg["d_model"], heads=cfg["nhead"],
                        layers=cfg["encoder_layers"], ff=cfg["dim_feedforward"], dropout=cfg["dropout"],
                        max_len=cfg["positions"], dec_layers=cfg["decoder_layers"])
    else:
        model = RecurrentSeq2Seq(kind, len(src_itos), len(tgt_itos), E=cfg["d_model"], H=cfg["hidden"],
                                 layers=cfg["encoder_layers"])
    sd = checkpoint_torch.read_state_dict(path)
    model.load_state_dict(sd, strict=True)
    return model.eval(), src_itos, tgt_itos, cfg


def length_penalty(length, alpha):
    """GNMT's ((5 + len) / 6)^alpha, len at least 1"""
    return ((5.0 + length.clamp(min=1).double()) / 6.0) ** alpha if alpha else torch.ones(length.shape, dtype=torch.float64)


@torch.inference_mode()
def translate(model, src, beam=1, alpha=0.6, max_len=None, margins=None):
    """Greedy (beam 1) or beam search over the padded batch src (B, S), as attograd-translate's
    decoding (nn/decode's defaults): each sentence runs at most min(2 n + 8, max_len) tokens for its n source
    ids, the batch at most min(2 S + 8, max_len, positions - 1); <pad> and <bos> are never
    generated; scores are sums of log-probabilities in float64; a beam that produced <eos> (or
    passed its sentence's limit) is carried on unchanged with its score, competing as one
    candidate; ties go to the lower (beam, token) index; the best beam by score / GNMT length
    penalty wins (greedy: by score). Returns each sentence's ids, <eos> included when produced.
    margins (a list): receives per sentence the least gap, over all steps, between the last
    candidate kept and the first dropped, and at the end between the best and the runner-up:
    a gap near 0 is a choice that float rounding may decide."""
    B, S = src.shape
    K = max(int(beam), 1)
    T = 2 * S + 8
    if max_len is not None:
        T = min(T, max_len)
    if hasattr(model, "pe"):
        T = min(T, model.pe.shape[0] - 1)
    limit = (2 * (src != PAD).sum(1) + 8).clamp(max=T)  # (B)
    V = model.generator.out_features
    st = model.begin(src, K, T)
    neg = float("-inf")
    score = torch.full((B, K), neg, dtype=torch.float64)
    score[:, 0] = 0.0  # identical beams at the start: keep one
    done = torch.zeros(B, K, dtype=torch.bool)
    length = torch.zeros(B, K, dtype=torch.long)
    tokens = torch.empty(B, K, 0, dtype=torch.long)
    last = torch.full((B * K,), BOS, dtype=torch.long)
    base = torch.arange(B)[:, None] * K
    rows = torch.arange(B * K)
    gap = torch.full((B,), float("inf"), dtype=torch.float64) if margins is not None else None
    for t in range(1, T + 1):
        if not bool((~done & (score > neg)).any()):
            break
        lp = model.step(st, last).double().view(B, K, V)
        fin = done | (t > limit)[:, None]  # beams that only carry on
        cand = (score[..., None] + lp).masked_fill_(fin[..., None], neg)
        cand[..., BOS] = neg
        cand[..., PAD] = score.masked_fill(~fin, neg)  # a finished beam: one candidate, itself
        val, idx = cand.view(B, K * V).topk(K + 1 if gap is not None else K, -1)
        if gap is not None:
            ok = val[:, K].isfinite()
            gap = torch.where(ok, torch.minimum(gap, val[:, K - 1] - val[:, K]), gap)
            val, idx = val[:, :K], idx[:, :K]
        parent, tok = idx // V, idx % V
        pfin = fin.gather(1, parent)
        tok = tok.masked_fill(pfin, PAD)
        dead = val == neg
        length = length.gather(1, parent) + (~pfin).long()
        done = pfin | (tok == EOS) | dead
        score = val
        tokens = torch.cat((tokens.gather(1, parent[..., None].expand(-1, -1, tokens.shape[2])), tok[..., None]), 2)
        src_rows = (base + parent).view(-1)
        if bool((src_rows != rows).any()):
            model.reorder(st, src_rows)
        last = tok.view(-1)
    final = score / length_penalty(length, alpha) if K > 1 else score
    best = final.argmax(1)
    if gap is not None and K > 1:
        top2 = final.topk(2, 1).values
        ok = top2[:, 1].isfinite()
        gap = torch.where(ok, torch.minimum(gap, top2[:, 0] - top2[:, 1]), gap)
    if gap is not None:
        margins.extend(gap.tolist())
    out = []
    for b, ids in enumerate(tokens[torch.arange(B), best].tolist()):
        n = next((i for i, x in enumerate(ids) if x in (EOS, PAD)), len(ids))
        out.append(ids[:n + 1] if n < len(ids) and ids[n] == EOS else ids[:n])
    return out


def greedy(model, src):
    """greedy ids of the padded batch src (B, S), each ending with <eos> when produced"""
    return translate(model, src, beam=1)


JOINERS = {"-", "'", "\u2019", "/"}
CLOSERS = {",", ".", ";", ":", "!", "?", ")", "]", "}", "%", "\u2026", "\u00bb", "\u201d"}
OPENERS = {"(", "[", "{", "\u00ab", "\u201c", "\u00bf", "\u00a1"}


def detokenize(words):
    """word tokens as attograd-translate prints them (examples/translate/data.c's writer): no
    space after a joiner or an opener, nor before a joiner or a closer"""
    out = []
    for i, w in enumerate(words):
        if i and words[i - 1] not in JOINERS and words[i - 1] not in OPENERS and w not in JOINERS and w not in CLOSERS:
            out.append(" ")
        out.append(w)
    return "".join(out)


class Codec:
    """a checkpoint's text <-> ids, as attograd-translate reads and prints them: word tokens or
    SentencePiece pieces (python3-sentencepiece), at most max_len - 1 ids and <eos> a sentence"""

    def __init__(self, cfg, src_itos, tgt_itos):
        self.cfg, self.tgt_itos, self.max_len = cfg, tgt_itos, cfg.get("max_len", 64)
        # the longest translation: twice the longest source and 8, within the positions
        self.max_out = min(2 * self.max_len + 8, cfg.get("positions", 2 * self.max_len + 9) - 1)
        self.sp = None
        if cfg.get("tokens") == "spm":
            import base64
            import sentencepiece as spm
            self.sp = [spm.SentencePieceProcessor(model_proto=base64.b64decode(cfg[k])) for k in ("src_spm", "tgt_spm")]
        elif cfg.get("tokens", "words") != "words":
            raise ValueError(f"tokens {cfg.get('tokens')!r}: this reader takes words or spm")
        self.src_stoi = {w: i for i, w in enumerate(src_itos)}

    def encode(self, s):
        ids = self.sp[0].encode(s) if self.sp else [self.src_stoi.get(t, UNK) for t in tokenize(s)]
        return ids[:self.max_len - 1] + [EOS]

    def decode(self, ids):
        ids = [i for i in ids if i not in (PAD, BOS, EOS)]
        return self.sp[1].decode(ids) if self.sp else detokenize([self.tgt_itos[i] for i in ids])


def translate_lines(model, codec, lines, beam=1, alpha=0.6, batch=64, margins=None):
    """the translations of lines as text, decoded batch lines at a time in order (as
    attograd-translate translate reads a file)"""
    out = []
    for k in range(0, len(lines), batch):
        ids = translate(model, pad([codec.encode(s) for s in lines[k:k + batch]]), beam, alpha,
                        max_len=codec.max_out, margins=margins)
        out.extend(codec.decode(x) for x in ids)
    return out

def same_translation(got, ref, stoi, enc):
    """attograd-translate's exact match: the reference's ids, or with SentencePiece its text in
    other pieces; a translation holding <unk> matches by ids only"""
    if got == enc(ref, stoi):
        return True
    if isinstance(stoi, dict) or UNK in got:
        return False
    return stoi.decode([i for i in got if i != EOS]).rstrip() == ref.rstrip()


@torch.no_grad()
def exact_match(model, pairs, src_stoi, tgt_stoi, enc=encode):
    model.eval()
    hits = 0
    for k in range(0, len(pairs), 128):
        chunk = pairs[k:k + 128]
        got = greedy(model, pad([enc(s, src_stoi) for s, _ in chunk]))
        hits += sum(same_translation(g, t, tgt_stoi, enc) for g, (_, t) in zip(got, chunk))
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
