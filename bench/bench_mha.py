"""PyTorch side of bench_mha.c: nn.MultiheadAttention, self-attention, batch_first, key padding
mask over the last quarter of the keys, need_weights=False, eval mode; the same data formula.
Forward runs under no_grad (torch 1.13 then takes its fused fast path when it can: the note
says which aten op ran); forward + backward with grads on (the ordinary path)."""
import math

import torch

from common import arg_value, fill, reps_from_argv, result, setup_threads, time_median

threads = setup_threads()
reps = reps_from_argv(60)
only = arg_value("--only")


def which_path(m, x, kpm):
    """'fast' if the no-grad forward ran torch's fused _native_multi_head_attention"""
    with torch.no_grad(), torch.autograd.profiler.profile() as prof:
        m(x, x, x, key_padding_mask=kpm, need_weights=False)
    names = {e.name for e in prof.function_events}
    return "fast_path" if "aten::_native_multi_head_attention" in names else "slow_path"


for B, L, E, H in [(32, 64, 256, 8), (64, 16, 64, 4), (8, 256, 512, 8)]:
    key = f"{B},{L},{E},{H}"
    if only and only != key:
        continue
    m = torch.nn.MultiheadAttention(E, H, batch_first=True)
    m.eval()
    with torch.no_grad():  # same order as attograd's parameter list
        for k, (name, p) in enumerate(m.named_parameters()):
            p.copy_(fill(tuple(p.shape), 10 + k, 1 / math.sqrt(E)))
    x = fill((B, L, E), 1, 1.0)
    gy = fill((B, L, E), 2, 1.0)
    kpm = torch.zeros(B, L, dtype=torch.bool)
    kpm[:, L - L // 4:] = True
    gflop = 2.0 * B * L * (4.0 * E * E + 2.0 * L * E) * 1e-9
    warm = reps // 5 + 2

    def fwd():
        with torch.no_grad():
            return m(x, x, x, key_padding_mask=kpm, need_weights=False)[0]

    check = float(fwd().double().sum())
    ms = time_median(fwd, reps, warm)
    result("mha_fwd", key, threads, ms, gflop, f"check={check:.6g},{which_path(m, x, kpm)}")

    xg = x.clone().requires_grad_(True)

    def fwd_bwd():
        xg.grad = None
        y = m(xg, xg, xg, key_padding_mask=kpm, need_weights=False)[0]
        y.backward(gy)

    fwd_bwd()
    check = float(xg.grad.double().sum())
    ms = time_median(fwd_bwd, reps, warm)
    result("mha_fwd_bwd", key, threads, ms, 3 * gflop, f"check={check:.6g}")
