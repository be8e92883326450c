#!/usr/bin/python3
"""The attention walkthrough (examples/mha_walkthrough.c) in PyTorch, from its saved weights.

    mha_walkthrough --seed 5 --save-weights w.h5
    /usr/bin/python3 examples/mha_walkthrough_torch.py w.h5 [--mask]

loads in_proj_weight, in_proj_bias, out_proj.weight and out_proj.bias (the checkpoint's
/model group) into torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=float64), runs the
walkthrough's input through it and through the same steps written with torch ops, and prints
every number the walkthrough prints (forward steps, attn_output, weights, and the gradients of
loss = 1/2 sum(attn_output^2)), in the walkthrough's format.

    /usr/bin/python3 examples/mha_walkthrough_torch.py --check PATH/TO/mha_walkthrough

runs the walkthrough (--seed 5, with and without --mask), reproduces every block of numbers it
prints and fails if one differs by more than 1e-9 (it prints 10 decimals). Exits 77 (skipped)
without torch or h5py."""
import math
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import torch
except ImportError as e:
    if "--check" in sys.argv:
        print(f"mha_walkthrough_torch: skipped, cannot import {e.name}", file=sys.stderr)
        sys.exit(77)
    raise

L, E, H, DH = 3, 4, 2, 2
WORDS = ["cat", "catches", "mouse"]
X = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.9, 1.0, 1.1, 1.2]], dtype=torch.float64)[None]
AVG = "attn_weights (averaged over heads, as need_weights=True)"


def load(path):
    with h5py.File(path, "r") as f:
        return {k: torch.tensor(f["model"][k][()], dtype=torch.float64) for k in f["model"]}


def compute(sd, mask):
    """every printed block, by the walkthrough's names: the steps with torch ops (retain_grad on
    each intermediate), and nn.MultiheadAttention itself for the output and dW"""
    wq, wk, wv = (w.clone().requires_grad_(True) for w in sd["in_proj_weight"].chunk(3))
    wo = sd["out_proj.weight"].clone().requires_grad_(True)
    kpm = torch.tensor([[False, False, True]]) if mask else None
    q, k, v = X @ wq.T, X @ wk.T, X @ wv.T

    def heads(t):
        return t.view(1, L, H, DH).transpose(1, 2)

    qh, kh, vh = heads(q), heads(k), heads(v)
    scores = qh @ kh.transpose(2, 3) / math.sqrt(DH)
    if mask:
        scores = scores.masked_fill(kpm.view(1, 1, 1, L), float("-inf"))
    p = torch.softmax(scores, -1)
    oh = p @ vh
    merged = oh.transpose(1, 2).contiguous().view(1, L, E)
    out = merged @ wo.T
    inter = {"Q": q, "K": k, "V": v, "Q heads": qh, "K heads": kh, "V heads": vh, "scores": scores,
             "attention weights": p, "head outputs": oh, "concat": merged, "attn_output": out}
    for t in inter.values():
        t.retain_grad()
    loss = 0.5 * (out ** 2).sum()
    loss.backward()
    blocks = {name: t.detach() for name, t in inter.items()}
    blocks[AVG] = p.detach().mean(1)
    grads = {"dWo": wo.grad, "dconcat": merged.grad, "dhead outputs": oh.grad, "dP": p.grad, "dV heads": vh.grad,
             "dscores": scores.grad, "dQ heads": qh.grad, "dK heads": kh.grad, "dQ": q.grad, "dK": k.grad,
             "dV": v.grad, "dWq": wq.grad, "dWk": wk.grad, "dWv": wv.grad}
    blocks.update(grads)

    # the module itself gives the same output, weights and parameter gradients
    m = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
    m.load_state_dict(sd)
    y, w = m(X, X, X, key_padding_mask=kpm, average_attn_weights=False)
    (0.5 * (y ** 2).sum()).backward()
    g = m.in_proj_weight.grad.chunk(3)
    for name, a, b in [("attn_output", y, out), ("attention weights", w, p), ("dWq", g[0], wq.grad),
                       ("dWk", g[1], wk.grad), ("dWv", g[2], wv.grad), ("dWo", m.out_proj.weight.grad, wo.grad)]:
        assert torch.allclose(a, b, atol=1e-13, rtol=0), f"nn.MultiheadAttention's {name} differs from the steps"
    return blocks, loss.item()


def show(name, t):
    t = t.detach()
    cols = t.shape[-1]
    rows = t.reshape(-1, cols)
    per_block = t.shape[-2] if t.dim() >= 2 else 1
    print(f"{name} ({','.join(str(s) for s in t.shape)}):")
    for r in range(rows.shape[0]):
        if t.dim() == 4 and r % per_block == 0:
            print(f"   [head {(r // per_block) % t.shape[1]}]")
        label = WORDS[r % L] if per_block == L and t.dim() >= 2 else ""
        print(f"   {label:<8}" + "".join(f" {v: .10f}" for v in rows[r].tolist()))


def parse(text):
    """{block name: [numbers]} from the walkthrough's output"""
    blocks, name = {}, None
    for line in text.splitlines():
        if line.endswith(":") and " (" in line and not line.startswith(" "):
            name = line[:line.rindex(" (")]
            blocks[name] = []
        elif name is not None and line.startswith("   ") and not line.strip().startswith("check"):
            for tok in line.split():
                try:
                    blocks[name].append(float(tok))
                except ValueError:
                    pass
        else:
            name = None
    return blocks


def compare(text, blocks, what):
    printed = parse(text)
    n = 0
    for name, t in blocks.items():
        if name not in printed:
            raise SystemExit(f"mha_walkthrough_torch: {what}: the walkthrough prints no block '{name}'")
        got = printed[name]
        want = t.reshape(-1).tolist()
        if len(got) != len(want):
            raise SystemExit(f"mha_walkthrough_torch: {what}: '{name}' has {len(got)} numbers, torch {len(want)}")
        for i, (a, b) in enumerate(zip(got, want)):
            same = a == b if math.isinf(a) or math.isinf(b) else abs(a - b) <= 1e-9
            if not same:
                raise SystemExit(f"mha_walkthrough_torch: {what}: '{name}' element {i}: walkthrough {a}, torch {b}")
        n += len(want)
    return n


def check(binary):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "w.h5")
        full = subprocess.run([binary, "--seed", "5", "--save-weights", path], capture_output=True, text=True)
        masked = subprocess.run([binary, "--seed", "5", "--mask"], capture_output=True, text=True)
        for r in (full, masked):
            if r.returncode != 0:
                raise SystemExit(f"mha_walkthrough_torch: the walkthrough failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        sd = load(path)
    first, again = full.stdout.split("########", 1)
    # the printed weights are the saved ones, to the last bit
    pw = parse(first)
    for i, name in enumerate(["Wq", "Wk", "Wv"]):
        assert pw[name] == sd["in_proj_weight"][i * E:(i + 1) * E].reshape(-1).tolist(), name
    assert pw["Wo"] == sd["out_proj.weight"].reshape(-1).tolist(), "Wo"
    n = 0
    for text, mask, what in [(first, False, "no mask"), (again, True, "second pass, key padding mask"),
                             (masked.stdout.split("########", 1)[1], True, "--mask")]:
        blocks, loss = compute(sd, mask)
        n += compare(text, blocks, what)
        line = next(l for l in text.splitlines() if l.strip().startswith("loss = "))
        assert abs(float(line.split("=")[1]) - loss) <= 1e-9, f"{what}: loss"
    print(f"mha_walkthrough_torch: {n} printed numbers reproduced by torch {torch.__version__} "
          "(nn.MultiheadAttention and the steps in torch ops)")


def main(argv):
    if argv[:1] == ["--check"] and len(argv) == 2:
        check(argv[1])
        return
    if not argv or argv[0].startswith("-"):
        raise SystemExit(__doc__)
    sd = load(argv[0])
    blocks, loss = compute(sd, "--mask" in argv[1:])
    for name, t in blocks.items():
        show(name, t)
    print(f"loss = {loss:.10f}")


if __name__ == "__main__":
    main(sys.argv[1:])
