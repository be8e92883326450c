"""PyTorch side of bench_train.c: the same toy translation Transformer (nn.Transformer,
batch_first, dropout 0.1), data, weights (filled by the shared formula in state_dict order),
loss (cross entropy, label smoothing 0.1, ignore_index=pad) and Adam; one training step timed
as zero_grad + forward + loss + backward + step."""
import math
import sys
import warnings

import torch

from common import arg_value, fill, peak_rss_mib, reps_from_argv, result, setup_threads, time_median

warnings.filterwarnings("ignore")  # the nested-tensor prototype notice of the eval forward
PAD, BOS, EOS = 0, 1, 2
CONFIGS = {
    "small": dict(d=128, heads=4, enc=2, dec=2, ff=512, batch=64, len=20, vocab=40, reps=30),
    "large": dict(d=256, heads=8, enc=3, dec=3, ff=1024, batch=64, len=32, vocab=1000, reps=8),
}
name = arg_value("--config") or "small"
c = CONFIGS[name]
rss = "--rss" in sys.argv
# attograd's side recomputes its attention in backward (attograd-translate
# --recompute-attention); torch runs the same plain step, under the row name of that comparison
suffix = "_recompute" if "--recompute" in sys.argv else ""
# attograd's side keeps the feed-forward activation (--keep-ff), as torch always does
suffix += "_keepff" if "--keep-ff" in sys.argv else ""
# attograd's side computes the padded positions too (--no-skip-padding); torch's step is the same
suffix += "_padded" if "--no-skip-padding" in sys.argv else ""
# run while a busy loop occupies one core (bench/run.sh starts it); only the row's name
suffix += "_busy" if "--busy" in sys.argv else ""
threads = setup_threads()
reps = 3 if rss else reps_from_argv(c["reps"])
warm = 2 if rss else 3


def forward_flops():
    N, S, T, d, ff, V = c["batch"], c["len"], c["len"], c["d"], c["ff"], c["vocab"]
    enc = 8 * N * S * d * d + 4 * N * S * S * d + 4 * N * S * d * ff
    dec = 8 * N * T * d * d + 4 * N * T * T * d + 4 * N * T * d * d + 4 * N * S * d * d + 4 * N * T * S * d \
        + 4 * N * T * d * ff
    return c["enc"] * enc + c["dec"] * dec + 2 * N * T * d * V


def make_batch():
    N, L, V = c["batch"], c["len"], c["vocab"]
    src = torch.zeros(N, L, dtype=torch.long)
    tin = torch.zeros(N, L, dtype=torch.long)
    tout = torch.zeros(N, L, dtype=torch.long)
    for b in range(N):
        n = L - b % 8
        for i in range(L):
            src[b, i] = 3 + (b * 7 + i * 13) % (V - 3) if i < n - 1 else EOS if i == n - 1 else PAD
            tout[b, i] = 3 + (b * 5 + i * 11 + 1) % (V - 3) if i < n - 1 else EOS if i == n - 1 else PAD
            tin[b, i] = BOS if i == 0 else tout[b, i - 1]
        for i in range(1, L):
            if tout[b, i - 1] == PAD:
                tin[b, i] = PAD
    return src, tin, tout


def sinusoidal(L, D):
    pe = torch.zeros(L, D, dtype=torch.float64)
    pos = torch.arange(L, dtype=torch.float64)[:, None]
    j = torch.arange(D)
    div = torch.pow(torch.tensor(10000.0, dtype=torch.float64), (j - j % 2).double() / D)
    pe[:, 0::2] = torch.sin(pos / div[0::2])
    pe[:, 1::2] = torch.cos(pos / div[1::2])
    return pe.float()


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        d = c["d"]
        self.src_emb = torch.nn.Embedding(c["vocab"], d, padding_idx=PAD)
        self.tgt_emb = torch.nn.Embedding(c["vocab"], d, padding_idx=PAD)
        self.transformer = torch.nn.Transformer(d, c["heads"], c["enc"], c["dec"], c["ff"], dropout=0.1,
                                                batch_first=True)
        self.generator = torch.nn.Linear(d, c["vocab"])
        self.register_buffer("pe", sinusoidal(c["len"], d))

    def forward(self, src, tin):
        d = c["d"]
        spad, tpad = src == PAD, tin == PAD
        mask = torch.nn.Transformer.generate_square_subsequent_mask(c["len"])
        x = self.src_emb(src) * math.sqrt(d) + self.pe
        y = self.tgt_emb(tin) * math.sqrt(d) + self.pe
        h = self.transformer(x, y, tgt_mask=mask, src_key_padding_mask=spad, tgt_key_padding_mask=tpad,
                             memory_key_padding_mask=spad)
        return self.generator(h)


torch.manual_seed(0)
m = Model()
with torch.no_grad():
    for k, (pname, p) in enumerate(m.named_parameters()):
        if p.dim() == 2:
            p.copy_(fill(tuple(p.shape), 10 + k, 1 / math.sqrt(p.shape[1])))
        elif "norm" in pname and pname.endswith(".weight"):
            p.fill_(1.0)
        else:
            p.copy_(fill(tuple(p.shape), 10 + k, 0.02))
src, tin, tout = make_batch()
loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)
opt = torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

m.eval()
with torch.no_grad():
    loss0 = float(loss_fn(m(src, tin).reshape(-1, c["vocab"]), tout.reshape(-1)))
m.train()
final = [0.0]


def step():
    opt.zero_grad(set_to_none=False)
    loss = loss_fn(m(src, tin).reshape(-1, c["vocab"]), tout.reshape(-1))
    loss.backward()
    opt.step()
    final[0] = float(loss)


ms = time_median(step, reps, warm)
shape = "d{d},h{heads},{enc}+{dec},ff{ff},N{batch},L{len},V{vocab}".format(**c)
if rss:
    result(f"train_{name}{suffix}_rss", shape, threads, peak_rss_mib(), 0, "ru_maxrss")
else:
    result(f"train_{name}{suffix}", shape, threads, ms, 3 * forward_flops() * 1e-9, f"loss0={loss0:.6g},final={final[0]:.9g}")
