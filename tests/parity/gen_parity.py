#!/usr/bin/python3
"""Generate the PyTorch parity cases (schema: tests/parity/README.md).

Run from the repository root with Debian's python3-torch and python3-h5py:
    /usr/bin/python3 tests/parity/gen_parity.py [FAMILY ...]
Each family writes tests/parity/<family>.h5. Seeds are fixed, so regenerating gives the same
inputs; PyTorch's outputs may differ in the last bits across versions (cases are from 1.13)."""
import math
import os
import sys

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def _np(t):
    return t.detach().cpu().numpy()


def write_case(f, name, op, dtype, inputs, outputs, description, attrs=None, params=None,
               grad_outputs=None, deviation=None):
    """inputs: list of tensors (or None for an absent optional input); float tensors that
    require grad get their gradient checked. outputs: torch outputs (their .grad_fn graph is
    used for backward when grad_outputs is given: 'random' draws one per output)."""
    g = f.create_group(name)
    g.attrs["op"] = op
    g.attrs["dtype"] = dtype
    g.attrs["description"] = description
    if deviation:
        g.attrs["deviation"] = deviation
    for k, v in (attrs or {}).items():
        if isinstance(v, (list, tuple)):
            g.create_dataset(k, data=np.asarray(v, dtype=np.int64))
        else:
            g.attrs[k] = v
    gi = g.create_group("inputs")
    for k, t in enumerate(inputs):
        if t is None:
            d = gi.create_dataset(f"in{k}", data=np.zeros(0, dtype=np.float32))
            d.attrs["none"] = 1
            continue
        if t.dtype == torch.bool:
            d = gi.create_dataset(f"in{k}", data=_np(t).astype(np.uint8))
            d.attrs["bool"] = 1
        else:
            d = gi.create_dataset(f"in{k}", data=_np(t))
            if t.requires_grad:
                d.attrs["requires_grad"] = 1
    if params:
        gp = g.create_group("params")
        for pname, p in params.items():
            gp.create_dataset(pname, data=_np(p))
    ge = g.create_group("expected")
    for k, o in enumerate(outputs):
        ge.create_dataset(f"out{k}", data=_np(o))
    if grad_outputs is not None:
        gen = torch.Generator().manual_seed(1234)
        if grad_outputs == "random":
            grad_outputs = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outputs]
        elif grad_outputs == "first":  # only the first output is differentiated
            grad_outputs = [torch.randn(outputs[0].shape, generator=gen, dtype=outputs[0].dtype)]
            grad_outputs += [None] * (len(outputs) - 1)
        go = g.create_group("grad_outputs")
        for k, gt in enumerate(grad_outputs):
            if gt is not None:
                go.create_dataset(f"out{k}", data=_np(gt))
        pairs = [(o, gt) for o, gt in zip(outputs, grad_outputs) if gt is not None]
        leaves = [t for t in inputs if t is not None and t.requires_grad]
        leaves += list(params.values()) if params else []
        grads = torch.autograd.grad([o for o, _ in pairs], leaves, [gt for _, gt in pairs],
                                    allow_unused=True)
        grads = dict(zip(map(id, leaves), grads))
        gg = g.create_group("expected_grads")
        for k, t in enumerate(inputs):
            if t is not None and t.requires_grad:
                gr = grads[id(t)]
                gg.create_dataset(f"in{k}", data=_np(gr if gr is not None else torch.zeros_like(t)))
        if params:
            gpg = g.create_group("expected_grads_params")
            for pname, p in params.items():
                gr = grads[id(p)]
                gpg.create_dataset(pname, data=_np(gr if gr is not None else torch.zeros_like(p)))


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def family_tensor_ops(f):
    torch.manual_seed(0)
    x = leaf(torch.randn(2, 3, 5))
    for dim in (-1, 1, 0):
        write_case(f, f"softmax_dim{dim}", "softmax", "f32", [x], [torch.softmax(x, dim)],
                   f"softmax over dim {dim} of a (2,3,5) tensor", {"dim": dim}, grad_outputs="random")
        write_case(f, f"log_softmax_dim{dim}", "log_softmax", "f32", [x], [torch.log_softmax(x, dim)],
                   f"log_softmax over dim {dim}", {"dim": dim}, grad_outputs="random")
    big = leaf(torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1002.0, -1001.0]]))
    write_case(f, "log_softmax_large_logits", "log_softmax", "f32", [big], [torch.log_softmax(big, -1)],
               "log_softmax stays finite for logits near +-1000", {"dim": -1}, grad_outputs="random")

    a, b = leaf(torch.randn(4, 3)), leaf(torch.randn(3, 5))
    write_case(f, "matmul_2d", "matmul", "f32", [a, b], [a @ b], "(4,3) @ (3,5)", grad_outputs="random")
    at, bt = leaf(torch.randn(3, 4)), leaf(torch.randn(5, 3))
    write_case(f, "matmul_2d_both_transposed", "matmul", "f32", [at, bt], [at.t() @ bt.t()],
               "A^T @ B^T through transposed views (BLAS transpose flags)",
               {"transpose_a": 1, "transpose_b": 1}, grad_outputs="random")
    ba, bb = leaf(torch.randn(2, 1, 3, 4)), leaf(torch.randn(5, 4, 2))
    write_case(f, "matmul_batched_broadcast", "matmul", "f32", [ba, bb], [ba @ bb],
               "(2,1,3,4) @ (5,4,2) -> (2,5,3,2), batch dims broadcast", grad_outputs="random")
    v, m = leaf(torch.randn(4)), leaf(torch.randn(4, 3))
    write_case(f, "matmul_vector_matrix", "matmul", "f32", [v, m], [v @ m], "(4) @ (4,3) -> (3)",
               grad_outputs="random")
    m2, v2 = leaf(torch.randn(2, 3, 4)), leaf(torch.randn(4))
    write_case(f, "matmul_batched_matrix_vector", "matmul", "f32", [m2, v2], [m2 @ v2],
               "(2,3,4) @ (4) -> (2,3)", grad_outputs="random")

    g = leaf(torch.linspace(-4, 4, 17))
    for approx in ("none", "tanh"):
        write_case(f, f"gelu_{approx}", "gelu", "f32", [g],
                   [torch.nn.functional.gelu(g, approximate=approx)], f"GELU, approximate='{approx}'",
                   {"approximate": approx}, grad_outputs="random")

    r = leaf(torch.randn(3, 4, 5))
    write_case(f, "sum_dims_0_2_keepdim", "sum", "f32", [r], [r.sum(dim=(0, 2), keepdim=True)],
               "sum over dims (0,2) with keepdim", {"dims": [0, 2], "keepdim": 1}, grad_outputs="random")
    write_case(f, "mean_dim_neg1", "mean", "f32", [r], [r.mean(dim=-1)], "mean over the last dim",
               {"dims": [-1]}, grad_outputs="random")
    write_case(f, "var_unbiased_dim1", "var", "f32", [r], [r.var(dim=1, unbiased=True)],
               "sample variance (correction 1) over dim 1", {"dims": [1], "correction": 1},
               grad_outputs="random")
    write_case(f, "var_biased_all", "var", "f32", [r], [r.var(unbiased=False)],
               "population variance over all elements", {"correction": 0}, grad_outputs="random")

    p, q = leaf(torch.rand(3, 4) + 0.5), leaf(torch.randn(1, 4))
    for fn, out in (("add", p + q), ("sub", p - q), ("mul", p * q), ("div", p / q), ("pow", p ** q)):
        write_case(f, f"elementwise_{fn}_broadcast", "elementwise", "f32", [p, q], [out],
                   f"{fn} with (3,4) and (1,4) broadcast", {"fn": fn}, grad_outputs="random")
    u = leaf(torch.rand(2, 5) + 0.1)
    for fn in ("exp", "log", "sqrt", "tanh", "sigmoid", "relu", "abs", "neg"):
        write_case(f, f"elementwise_{fn}", "elementwise", "f32", [u], [getattr(torch, fn)(u)], fn,
                   {"fn": fn}, grad_outputs="random")


def module_params(m):
    return {k: v.detach().clone().requires_grad_(True) for k, v in m.named_parameters()}


def run_with(m, params, *args, **kw):
    """call module m with params substituted (so gradients land in our leaf tensors)"""
    return torch.nn.utils.stateless.functional_call(m, params, args, kw)


def family_nn_layers(f):
    torch.manual_seed(1)
    for bias in (True, False):
        m = torch.nn.Linear(5, 3, bias=bias)
        p = module_params(m)
        x = leaf(torch.randn(2, 4, 5))
        write_case(f, f"linear_3d_bias{int(bias)}", "linear", "f32", [x], [run_with(m, p, x)],
                   "nn.Linear(5,3) on a (2,4,5) input", {"in_features": 5, "out_features": 3, "bias": int(bias)},
                   params=p, grad_outputs="random")
    for affine in (True, False):
        m = torch.nn.LayerNorm(6, eps=1e-5, elementwise_affine=affine)
        if affine:
            with torch.no_grad():
                m.weight.normal_()
                m.bias.normal_()
        p = module_params(m)
        x = leaf(torch.randn(3, 2, 6) * 3 + 1)
        write_case(f, f"layer_norm_affine{int(affine)}", "layer_norm", "f32", [x], [run_with(m, p, x)],
                   "nn.LayerNorm(6) over the last dim", {"normalized_shape": 6, "eps": 1e-5,
                                                        "elementwise_affine": int(affine)},
                   params=p, grad_outputs="random")
    m = torch.nn.Embedding(7, 4, padding_idx=0)
    p = module_params(m)
    ids = torch.tensor([[1, 0, 3, 3], [6, 2, 0, 1]])
    write_case(f, "embedding_padding_idx", "embedding", "f32", [ids], [run_with(m, p, ids)],
               "nn.Embedding(7,4,padding_idx=0): repeated ids accumulate, the padding row gets no gradient",
               {"num_embeddings": 7, "embedding_dim": 4, "padding_idx": 0}, params=p, grad_outputs="random")

    # the in-place and fused ops attograd's Transformer uses for memory
    x, w1, b1 = leaf(torch.randn(3, 100, 8)), leaf(torch.randn(512, 8) * 0.3), leaf(torch.randn(512))
    w2, b2 = leaf(torch.randn(6, 512) * 0.05), leaf(torch.randn(6))
    F = torch.nn.functional
    write_case(f, "feed_forward_two_row_blocks", "feed_forward", "f32", [x, w1, b1, w2, b2],
               [F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)],
               "linear2(relu(linear1(x))) with dropout 0: 300 rows x 512 hidden, so attograd's backward "
               "unpacks the hidden activation in two row blocks", grad_outputs="random")
    r = leaf(torch.randn(4, 5))
    write_case(f, "relu_dropout_inplace_eval", "relu_dropout_", "f32", [r], [F.relu(r * 1.0)],
               "ag_relu_dropout_ not training: relu in place on a non-leaf (x * 1)", grad_outputs="random")
    a, c = leaf(torch.randn(2, 3, 4)), leaf(torch.randn(3, 1))
    write_case(f, "add_inplace_broadcast", "add_", "f32", [a, c], [(a * 1.0).add_(c)],
               "(x * 1).add_(b), b (3,1) broadcast to (2,3,4)", grad_outputs="random")
    e = leaf(torch.randn(3, 4))
    write_case(f, "mul_scalar_inplace", "mul_scalar_", "f32", [e], [(e * 1.0).mul_(11.3137)],
               "(x * 1).mul_(s), s = sqrt(128) as the Transformer's embedding scale", {"scalar": 11.3137},
               grad_outputs="random")


def family_nn_loss(f):
    torch.manual_seed(2)
    logits = leaf(torch.randn(6, 5) * 2)
    tgt = torch.tensor([0, 4, -100, 2, 2, 1])
    for red in ("mean", "sum", "none"):
        for ls in (0.0, 0.1):
            out = torch.nn.functional.cross_entropy(logits, tgt, ignore_index=-100, label_smoothing=ls,
                                                    reduction=red)
            write_case(f, f"cross_entropy_{red}_smoothing{ls}", "cross_entropy", "f32", [logits, tgt], [out],
                       f"cross entropy, reduction {red}, label_smoothing {ls}, one target ignored",
                       {"ignore_index": -100, "label_smoothing": ls, "reduction": red}, grad_outputs="random")
    l3 = leaf(torch.randn(2, 5, 3))
    t3 = torch.tensor([[1, 4, 0], [3, 3, 2]])
    write_case(f, "cross_entropy_ncl_layout", "cross_entropy", "f32", [l3, t3],
               [torch.nn.functional.cross_entropy(l3, t3, label_smoothing=0.1, ignore_index=3)],
               "(N,C,L) logits with ignore_index 3 and smoothing", {"ignore_index": 3, "label_smoothing": 0.1},
               grad_outputs="random")
    lp = leaf(torch.log_softmax(torch.randn(4, 3), -1))
    nt = torch.tensor([2, 0, 1, 1])
    for red in ("mean", "sum"):
        write_case(f, f"nll_loss_{red}", "nll_loss", "f32", [lp, nt],
                   [torch.nn.functional.nll_loss(lp, nt, reduction=red, ignore_index=0)],
                   f"nll_loss, reduction {red}, ignore_index 0", {"ignore_index": 0, "reduction": red},
                   grad_outputs="random")
    a, b = leaf(torch.randn(3, 4)), leaf(torch.randn(3, 4))
    write_case(f, "mse_loss_mean", "mse_loss", "f32", [a, b], [torch.nn.functional.mse_loss(a, b)],
               "mse_loss, reduction mean", {"reduction": "mean"}, grad_outputs="random")


def safe_softmax(scores):
    """softmax whose fully masked rows (all -inf) are zeros with zero gradient: attograd's
    documented behaviour where PyTorch gives NaN"""
    dead = torch.isneginf(scores).all(-1, keepdim=True)
    p = torch.softmax(scores.masked_fill(dead, 0.0), -1)
    return p.masked_fill(dead, 0.0)


def family_nn_attention(f):
    torch.manual_seed(3)
    s = leaf(torch.randn(2, 3, 4))
    bm = torch.tensor([[False, True, False, True]]).expand(3, 4).clone()
    write_case(f, "masked_softmax_bool", "masked_softmax", "f32", [s, bm],
               [torch.softmax(s.masked_fill(bm, float("-inf")), -1)], "bool mask (3,4) broadcast over (2,3,4)",
               {"dim": -1}, grad_outputs="random")
    fm = torch.randn(3, 4)
    write_case(f, "masked_softmax_float", "masked_softmax", "f32", [s, fm], [torch.softmax(s + fm, -1)],
               "float mask added to the scores", {"dim": -1}, grad_outputs="random")
    dead = torch.tensor([[False] * 4, [True] * 4, [True, False, True, True]])
    write_case(f, "masked_softmax_fully_masked_row", "masked_softmax", "f32", [s, dead],
               [safe_softmax(s.masked_fill(dead, float("-inf")))], "row 1 fully masked",
               {"dim": -1}, grad_outputs="random",
               deviation="a fully masked row gives zeros and zero gradient; PyTorch gives NaN")


def mha_reference(m, p, q, k, v, kpm=None, attn_mask=None, causal=False):
    """torch 1.13's F.multi_head_attention_forward for batch_first=False, with safe_softmax
    (fully masked queries give zero attention) — used where PyTorch itself gives NaN"""
    E, H = m.embed_dim, m.num_heads
    L, N, _ = q.shape
    S = k.shape[0]
    w, b = p["in_proj_weight"], p.get("in_proj_bias")
    bq, bk, bv = b.chunk(3) if b is not None else (None, None, None)
    wq, wk, wv = w.chunk(3)
    F = torch.nn.functional
    qp, kp, vp = F.linear(q, wq, bq), F.linear(k, wk, bk), F.linear(v, wv, bv)
    qh = qp.reshape(L, N * H, E // H).transpose(0, 1)
    kh = kp.reshape(S, N * H, E // H).transpose(0, 1)
    vh = vp.reshape(S, N * H, E // H).transpose(0, 1)
    mask = torch.zeros(N * H, L, S)
    if attn_mask is not None:
        mask = mask.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else mask + attn_mask
    if kpm is not None:
        km = kpm.view(N, 1, 1, S).expand(N, H, 1, S).reshape(N * H, 1, S)
        mask = mask.masked_fill(km, float("-inf")) if km.dtype == torch.bool else mask + km
    if causal:
        mask = mask.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    att = safe_softmax(torch.bmm(qh / math.sqrt(E // H), kh.transpose(1, 2)) + mask)
    o = torch.bmm(att, vh).transpose(0, 1).reshape(L, N, E)
    return F.linear(o, p["out_proj.weight"], p.get("out_proj.bias")), att.view(N, H, L, S).mean(1)


def family_nn_mha(f):
    torch.manual_seed(4)
    N, L, S, E, H = 3, 4, 6, 8, 2

    def case(name, desc, cfg, q, k=None, v=None, kpm=None, am=None, need_weights=True, avg=True,
             causal=False, reference=False, deviation=None):
        m = torch.nn.MultiheadAttention(E, H, **cfg)
        with torch.no_grad():
            if m.in_proj_bias is not None:
                m.in_proj_bias.normal_()
                m.out_proj.bias.normal_()
        m.eval()
        p = module_params(m)
        kk = q if k is None else k
        vv = kk if v is None else v
        tmask = am
        if causal:
            Lq, Sk = (q.shape[1], kk.shape[1]) if cfg.get("batch_first") else (q.shape[0], kk.shape[0])
            tmask = torch.ones(Lq, Sk, dtype=torch.bool).triu(1)
        if reference:
            out, w = mha_reference(m, p, q, kk, vv, kpm, am, causal)
        else:
            out, w = run_with(m, p, q, kk, vv, key_padding_mask=kpm, need_weights=need_weights, attn_mask=tmask,
                              average_attn_weights=avg)
            # our reference agrees with torch wherever torch is finite
            if not cfg and not avg is False and need_weights:
                r_out, r_w = mha_reference(m, p, q, kk, vv, kpm, am, causal)
                assert torch.allclose(r_out, out, atol=1e-5), name
        attrs = {"embed_dim": E, "num_heads": H, "need_weights": int(need_weights),
                 "average_attn_weights": int(avg), "is_causal": int(causal)}
        for key in ("bias", "add_bias_kv", "add_zero_attn", "batch_first"):
            if key in cfg:
                attrs[key] = int(cfg[key])
        for key in ("kdim", "vdim"):
            if key in cfg:
                attrs[key] = cfg[key]
        outs = [out, w] if need_weights else [out]
        write_case(f, name, "mha", "f32", [q, k, v, kpm, am], outs, desc, attrs, params=p,
                   grad_outputs="first", deviation=deviation)

    x = leaf(torch.randn(L, N, E))
    case("mha_self_seq_first", "self-attention, (L,N,E), no masks, averaged weights", {}, x)
    xb = leaf(torch.randn(N, L, E))
    kpm = torch.zeros(N, L, dtype=torch.bool)
    kpm[:, -1] = True
    case("mha_self_batch_first_key_padding", "batch_first self-attention, last key of every sequence padded, "
         "per-head weights", {"batch_first": True}, xb, kpm=kpm, avg=False)
    q, k, v = leaf(torch.randn(L, N, E)), leaf(torch.randn(S, N, 5)), leaf(torch.randn(S, N, 7))
    am = torch.randn(L, S)
    case("mha_cross_kdim_vdim_float_mask", "cross-attention L=4, S=6, kdim=5, vdim=7, 2-d float attn_mask",
         {"kdim": 5, "vdim": 7}, q, k, v, am=am)
    k2, v2 = leaf(torch.randn(S, N, E)), leaf(torch.randn(S, N, E))
    am3 = torch.rand(N * H, L, S) < 0.3
    kpm2 = torch.zeros(N, S, dtype=torch.bool)
    kpm2[0, 4:] = True
    case("mha_cross_3d_bool_mask_and_key_padding", "3-d bool attn_mask (N*H,L,S) combined with a bool key padding "
         "mask", {}, q, k2, v2, kpm=kpm2, am=am3)
    kpmf = torch.zeros(N, S)
    kpmf[1, :2] = -1.5
    case("mha_float_key_padding_no_weights", "float key padding mask (added), need_weights=False", {}, q, k2, v2,
         kpm=kpmf, need_weights=False)
    case("mha_bias_kv_zero_attn", "add_bias_kv and add_zero_attn with a key padding mask",
         {"add_bias_kv": True, "add_zero_attn": True}, q, k2, v2, kpm=kpm2)
    case("mha_no_bias", "bias=False: no in_proj_bias, no out_proj.bias", {"bias": False}, x)
    xc = leaf(torch.randn(L, N, E))
    case("mha_causal", "is_causal (torch 1.13: the same positions as a causal bool attn_mask)", {}, xc, causal=True)
    dead = torch.zeros(N, L, dtype=torch.bool)
    dead[1, :] = True
    case("mha_fully_masked_sequence", "every key of batch element 1 is padding", {}, x, kpm=dead, reference=True,
         deviation="queries with every key masked attend to nothing: attention output 0 (so the result is "
                   "out_proj.bias) and zero gradient; PyTorch gives NaN")


def family_nn_optim(f):
    torch.manual_seed(5)
    w0, b0 = torch.randn(3, 4), torch.randn(5)
    grads = [(torch.randn(3, 4), torch.randn(5)) for _ in range(3)]
    configs = [
        ("sgd", torch.optim.SGD, {"lr": 0.1}),
        ("sgd_momentum_dampening_wd", torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.1,
                                                        "weight_decay": 0.01}),
        ("sgd_nesterov", torch.optim.SGD, {"lr": 0.05, "momentum": 0.8, "nesterov": True}),
        ("adam", torch.optim.Adam, {"lr": 0.01, "betas": (0.9, 0.98), "eps": 1e-9}),
        ("adam_l2", torch.optim.Adam, {"lr": 0.01, "weight_decay": 0.1}),
        ("adamw", torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
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
                 "weight_decay": kw.get("weight_decay", 0.0), "momentum": kw.get("momentum", 0.0),
                 "dampening": kw.get("dampening", 0.0), "nesterov": int(kw.get("nesterov", False))}
        if "betas" in kw:
            attrs["beta1"], attrs["beta2"] = kw["betas"]
        if "eps" in kw:
            attrs["eps"] = kw["eps"]
        write_case(f, f"optim_{name}", "optim", "f32", [], outs, f"three steps of torch.optim.{cls.__name__}"
                   f"({kw}), foreach=False", attrs, params={"w": w0, "b": b0})
        gg = f[f"optim_{name}"].create_group("grads")
        for k, (gw, gb) in enumerate(grads):
            gk = gg.create_group(f"step{k}")
            gk.create_dataset("w", data=_np(gw))
            gk.create_dataset("b", data=_np(gb))


FAMILIES = {"nn_optim": family_nn_optim, "tensor_ops": family_tensor_ops, "nn_layers": family_nn_layers, "nn_loss": family_nn_loss,
            "nn_attention": family_nn_attention, "nn_mha": family_nn_mha}


def main(argv):
    names = argv or list(FAMILIES)
    for name in names:
        path = os.path.join(HERE, f"{name}.h5")
        tmp = path + ".tmp"
        with h5py.File(tmp, "w") as f:
            FAMILIES[name](f)
        os.replace(tmp, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
