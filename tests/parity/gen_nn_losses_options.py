#!/usr/bin/python3
"""PyTorch parity cases for the pointwise losses (F.binary_cross_entropy, ..._with_logits, F.l1_loss,
F.smooth_l1_loss, F.kl_div), class weights in F.cross_entropy / F.nll_loss, Adam and AdamW with
amsgrad, MultiheadAttention on unbatched input and the Transformer layers with the tanh GELU.

Run from the repository root: /usr/bin/python3 tests/parity/gen_nn_losses_options.py
  -> tests/parity/nn_losses_options.h5
Schema: tests/parity/README.md; adapters: ops_nn_losses_options.c."""
import os
import sys

import h5py
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_parity import _np, leaf, module_params, run_with, write_case  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def losses(f):
    torch.manual_seed(11)
    # binary_cross_entropy: probabilities, including exact 0 and 1 (the log clamp at -100)
    x = leaf(torch.rand(3, 4) * 0.98 + 0.01)
    y = leaf(torch.rand(3, 4))
    w = torch.rand(4) + 0.5
    write_case(f, "bce_mean", "binary_cross_entropy", "f32", [x, y], [F.binary_cross_entropy(x, y)],
               "F.binary_cross_entropy, soft targets, reduction mean", {"reduction": "mean"}, grad_outputs="random")
    xd, yd = leaf(x.double()), leaf(y.double())
    write_case(f, "bce_weight_none", "binary_cross_entropy", "f64", [xd, yd, w.double()],
               [F.binary_cross_entropy(xd, yd, weight=w.double(), reduction="none")],
               "F.binary_cross_entropy with a (4) weight broadcast over (3,4), reduction none",
               {"reduction": "none"}, grad_outputs="random")
    xc = torch.tensor([[0.0, 1.0, 0.5], [1.0, 0.0, 0.25]], requires_grad=True)
    yc = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    write_case(f, "bce_clamped_log_sum", "binary_cross_entropy", "f32", [xc, yc],
               [F.binary_cross_entropy(xc, yc, reduction="sum")],
               "inputs at exactly 0 and 1: log clamped at -100, reduction sum", {"reduction": "sum"})
    # with logits: large magnitudes stay finite; pos_weight along the last dim
    z = leaf(torch.randn(4, 3) * 3)
    z.data[0, 0], z.data[1, 1] = 80.0, -90.0
    t = leaf(torch.rand(4, 3))
    pw = torch.tensor([0.5, 2.0, 3.0])
    write_case(f, "bce_logits_mean", "binary_cross_entropy_with_logits", "f32", [z, t],
               [F.binary_cross_entropy_with_logits(z, t)],
               "F.binary_cross_entropy_with_logits, logits up to +-90, reduction mean", {"reduction": "mean"},
               grad_outputs="random")
    w2 = torch.rand(4, 1) + 0.5
    zd, td = leaf(z.double()), leaf(t.double())
    write_case(f, "bce_logits_pos_weight_weight_sum", "binary_cross_entropy_with_logits", "f64",
               [zd, td, w2.double(), pw.double()],
               [F.binary_cross_entropy_with_logits(zd, td, weight=w2.double(), pos_weight=pw.double(), reduction="sum")],
               "pos_weight (3) along the last dim, weight (4,1), reduction sum", {"reduction": "sum"},
               grad_outputs="random")
    write_case(f, "bce_logits_pos_weight_none", "binary_cross_entropy_with_logits", "f32",
               [z, t, None, pw], [F.binary_cross_entropy_with_logits(z, t, pos_weight=pw, reduction="none")],
               "pos_weight only, reduction none", {"reduction": "none"}, grad_outputs="random")
    # l1 and smooth l1 (beta, beta = 0)
    a, b = leaf(torch.randn(2, 5)), leaf(torch.randn(2, 5))
    write_case(f, "l1_mean", "l1_loss", "f32", [a, b], [F.l1_loss(a, b)], "F.l1_loss, reduction mean",
               {"reduction": "mean"}, grad_outputs="random")
    ad, bd = leaf(a.double()), leaf(b.double())
    write_case(f, "l1_none", "l1_loss", "f64", [ad, bd], [F.l1_loss(ad, bd, reduction="none")],
               "F.l1_loss, reduction none", {"reduction": "none"}, grad_outputs="random")
    for beta, red in ((1.0, "mean"), (0.5, "sum"), (0.0, "mean"), (2.0, "none")):
        write_case(f, f"smooth_l1_beta{beta}_{red}", "smooth_l1_loss", "f32", [a, b],
                   [F.smooth_l1_loss(a, b, beta=beta, reduction=red)],
                   f"F.smooth_l1_loss, beta {beta}, reduction {red}" + (" (PyTorch's l1_loss)" if beta == 0 else ""),
                   {"reduction": red, "beta": beta}, grad_outputs="random")
    # kl_div: input log-probabilities; target probabilities (some 0) or log-probabilities
    lp = leaf(torch.log_softmax(torch.randn(3, 4), -1))
    p = torch.softmax(torch.randn(3, 4), -1)
    pz = p.clone()
    pz[0, 1] = 0.0
    pz = pz.requires_grad_(False)
    for red in ("batchmean", "sum", "mean", "none"):
        write_case(f, f"kl_div_{red}", "kl_div", "f32", [lp, pz], [F.kl_div(lp, pz, reduction=red)],
                   f"F.kl_div, probabilities as target (one exactly 0), reduction {red}",
                   {"reduction": red, "log_target": 0}, grad_outputs="random")
    lt = leaf(torch.log_softmax(torch.randn(3, 4), -1).double())
    lpd = leaf(lp.double())
    write_case(f, "kl_div_log_target_batchmean", "kl_div", "f64", [lpd, lt],
               [F.kl_div(lpd, lt, reduction="batchmean", log_target=True)],
               "F.kl_div with log_target, reduction batchmean; the target's gradient too",
               {"reduction": "batchmean", "log_target": 1}, grad_outputs="random")
    # class weights in cross_entropy and nll_loss (inputs: logits, targets, weight)
    logits = leaf(torch.randn(6, 4) * 2)
    tgt = torch.tensor([0, 3, -100, 2, 2, 1])
    cw = torch.tensor([0.5, 2.0, 1.0, 3.0])
    for red, ls in (("mean", 0.0), ("mean", 0.2), ("none", 0.1), ("sum", 0.1)):
        write_case(f, f"cross_entropy_weight_{red}_smoothing{ls}", "cross_entropy", "f32", [logits, tgt, cw],
                   [F.cross_entropy(logits, tgt, weight=cw, label_smoothing=ls, reduction=red)],
                   f"cross entropy with class weights, reduction {red}, label_smoothing {ls}, one target ignored",
                   {"ignore_index": -100, "label_smoothing": ls, "reduction": red}, grad_outputs="random")
    l3 = leaf(torch.randn(2, 4, 3).double())
    t3 = torch.tensor([[1, 3, 0], [2, 2, 1]])
    write_case(f, "cross_entropy_weight_ncl", "cross_entropy", "f64", [l3, t3, cw.double()],
               [F.cross_entropy(l3, t3, weight=cw.double(), label_smoothing=0.1, ignore_index=2)],
               "(N,C,L) logits, class weights, ignore_index 2, smoothing", {"ignore_index": 2, "label_smoothing": 0.1},
               grad_outputs="random")
    lpn = leaf(torch.log_softmax(torch.randn(5, 4), -1))
    tn = torch.tensor([1, 0, 3, 3, 2])
    write_case(f, "nll_loss_weight_mean", "nll_loss", "f32", [lpn, tn, cw],
               [F.nll_loss(lpn, tn, weight=cw, ignore_index=0)], "nll_loss with class weights, ignore_index 0",
               {"ignore_index": 0, "reduction": "mean"}, grad_outputs="random")


def optim_amsgrad(f):
    """three steps of Adam and AdamW with amsgrad; step 2's gradients are small, so the running
    maximum of exp_avg_sq, not exp_avg_sq itself, sets the denominator (the cases would fail
    without amsgrad)"""
    torch.manual_seed(12)
    w0, b0 = torch.randn(3, 4), torch.randn(5)
    grads = [(torch.randn(3, 4) * 3, torch.randn(5) * 3), (torch.randn(3, 4) * 0.01, torch.randn(5) * 0.01),
             (torch.randn(3, 4), torch.randn(5))]
    configs = [
        ("adam_amsgrad", torch.optim.Adam, {"lr": 0.01, "betas": (0.8, 0.9), "eps": 1e-8, "amsgrad": True}),
        ("adam_amsgrad_l2", torch.optim.Adam, {"lr": 0.01, "betas": (0.9, 0.5), "weight_decay": 0.1, "amsgrad": True}),
        ("adamw_amsgrad", torch.optim.AdamW, {"lr": 0.02, "betas": (0.9, 0.95), "weight_decay": 0.05,
                                              "amsgrad": True}),
    ]
    for name, cls, kw in configs:
        w, b = w0.clone().requires_grad_(True), b0.clone().requires_grad_(True)
        opt = cls([w, b], foreach=False, **kw)
        outs = []
        for gw, gb in grads:
            w.grad, b.grad = gw.clone(), gb.clone()
            opt.step()
            outs += [w.detach().clone(), b.detach().clone()]
        attrs = {"optimizer": cls.__name__.lower(), "lr": kw["lr"], "steps": 3,
                 "weight_decay": kw.get("weight_decay", 0.0 if cls is torch.optim.Adam else 1e-2), "amsgrad": 1}
        if "betas" in kw:
            attrs["beta1"], attrs["beta2"] = kw["betas"]
        if "eps" in kw:
            attrs["eps"] = kw["eps"]
        write_case(f, f"optim_{name}", "optim", "f32", [], outs,
                   f"three steps of torch.optim.{cls.__name__}({kw}), foreach=False", attrs, params={"w": w0, "b": b0})
        gg = f[f"optim_{name}"].create_group("grads")
        for k, (gw, gb) in enumerate(grads):
            gk = gg.create_group(f"step{k}")
            gk.create_dataset("w", data=_np(gw))
            gk.create_dataset("b", data=_np(gb))


def transformer_gelu_tanh(f):
    """Transformer layers whose feed-forward activation is F.gelu(x, approximate="tanh"), given to
    torch as a callable (activation="gelu" is the exact GELU in torch 1.13)"""
    from gen_transformer import E, FF, H, causal_bool, layer_attrs, pad_tail, randomize
    torch.manual_seed(13)
    act = lambda x: F.gelu(x, approximate="tanh")  # noqa: E731
    nn = torch.nn
    for norm_first in (False, True):
        m = randomize(nn.TransformerEncoderLayer(E, H, FF, 0.1, act, 1e-5, True, norm_first))
        p = module_params(m)
        src = leaf(torch.randn(3, 5, E))
        kpm = pad_tail(3, 5, [5, 3, 4])
        out = run_with(m, p, src, src_key_padding_mask=kpm)
        write_case(f, f"encoder_layer_gelu_tanh{'_norm_first' if norm_first else ''}", "transformer_encoder_layer",
                   "f32", [src, None, kpm], [out],
                   "TransformerEncoderLayer(activation=lambda x: F.gelu(x, approximate='tanh')), batch_first, "
                   f"key padding{', norm_first' if norm_first else ''}",
                   layer_attrs("gelu_tanh", True, norm_first), params=p, grad_outputs="random")
    m = randomize(nn.TransformerDecoderLayer(E, H, FF, 0.1, act, 1e-5, False, False))
    p = module_params(m)
    tgt, memory = leaf(torch.randn(4, 2, E)), leaf(torch.randn(6, 2, E))
    out = run_with(m, p, tgt, memory, tgt_mask=causal_bool(4))
    write_case(f, "decoder_layer_gelu_tanh", "transformer_decoder_layer", "f32",
               [tgt, memory, causal_bool(4), None, None, None], [out],
               "TransformerDecoderLayer with the tanh GELU as a callable, causal target mask",
               layer_attrs("gelu_tanh"), params=p, grad_outputs="random")
    # the exact and the tanh GELU differ by more than the tolerance here, so the cases tell them apart
    x = torch.linspace(-4, 4, 101)
    assert (F.gelu(x) - F.gelu(x, approximate="tanh")).abs().max() > 1e-4


def mha_unbatched(f):
    """nn.MultiheadAttention on unbatched input: query (L,E), key (S,kdim), value (S,vdim),
    key_padding_mask (S), attn_mask (L,S) or (H,L,S); outputs (L,E) and weights (L,S) or (H,L,S)"""
    torch.manual_seed(14)
    E, H, L, S = 8, 2, 4, 5

    def case(name, desc, cfg, q, k=None, v=None, kpm=None, am=None, avg=True):
        m = torch.nn.MultiheadAttention(E, H, **cfg)
        with torch.no_grad():
            if m.in_proj_bias is not None:
                m.in_proj_bias.normal_()
                m.out_proj.bias.normal_()
        m.eval()
        p = module_params(m)
        kk = q if k is None else k
        vv = kk if v is None else v
        out, w = run_with(m, p, q, kk, vv, key_padding_mask=kpm, attn_mask=am, average_attn_weights=avg)
        assert out.dim() == 2 and w.dim() == (2 if avg else 3), name
        attrs = {"embed_dim": E, "num_heads": H, "need_weights": 1, "average_attn_weights": int(avg), "is_causal": 0}
        for key in ("bias", "add_bias_kv", "add_zero_attn", "batch_first"):
            if key in cfg:
                attrs[key] = int(cfg[key])
        for key in ("kdim", "vdim"):
            if key in cfg:
                attrs[key] = cfg[key]
        write_case(f, name, "mha", "f32", [q, k, v, kpm, am], [out, w], desc, attrs, params=p,
                   grad_outputs="first")

    x = leaf(torch.randn(L, E))
    kpm = torch.tensor([False, False, True, False])
    case("mha_unbatched_self_key_padding", "unbatched self-attention (L,E), key_padding_mask (S), per-head weights "
         "(H,L,S)", {}, x, kpm=kpm, avg=False)
    q, k, v = leaf(torch.randn(L, E)), leaf(torch.randn(S, 5)), leaf(torch.randn(S, 7))
    case("mha_unbatched_cross_kdim_vdim_float_mask", "unbatched cross-attention, kdim 5, vdim 7, float attn_mask "
         "(L,S), averaged weights (L,S)", {"kdim": 5, "vdim": 7}, q, k, v, am=torch.randn(L, S))
    k2, v2 = leaf(torch.randn(S, E)), leaf(torch.randn(S, E))
    am3 = torch.rand(H, L, S) < 0.3
    am3[:, :, 0] = False  # no query without a key
    case("mha_unbatched_3d_bool_mask_batch_first", "unbatched input to a batch_first module (ignored, as torch), "
         "bool attn_mask (H,L,S) and a bool key_padding_mask", {"batch_first": True}, q, k2, v2,
         kpm=torch.tensor([False, True, False, False, False]), am=am3)
    case("mha_unbatched_float_key_padding", "unbatched, float key_padding_mask (S) (added), per-head weights", {},
         x, kpm=torch.tensor([0.0, -1.0, 0.5, -2.0]), avg=False)
    case("mha_unbatched_bias_kv_zero_attn", "unbatched with add_bias_kv and add_zero_attn", {"add_bias_kv": True,
         "add_zero_attn": True}, q, k2, v2, kpm=torch.tensor([False, True, False, False, False]))


FAMILIES = [losses, optim_amsgrad, transformer_gelu_tanh, mha_unbatched]


def main():
    path = os.path.join(HERE, "nn_losses_options.h5")
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        for fam in FAMILIES:
            fam(f)
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
