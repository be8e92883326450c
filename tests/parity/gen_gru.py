#!/usr/bin/python3
"""PyTorch parity cases for nn/recurrent/gru.h: GRUCell, GRU (layers, directions, batch_first, h0, padded
lengths through pack_padded_sequence), and for nn/attention/seq2seq_attention.h: additive (Bahdanau)
and dot-product (Luong) attention.

Run from the repository root: /usr/bin/python3 tests/parity/gen_gru.py  -> tests/parity/nn_gru.h5
Schema: tests/parity/README.md."""
import os
import sys

import h5py
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
from gen_parity import leaf, module_params, run_with, safe_softmax, write_case  # noqa: E402
import torch_translate  # noqa: E402


class AdditiveAttention(torch_translate.AdditiveAttention):
    """Bahdanau: score(s, h_j) = v^T tanh(W1 h_j + W2 s); attograd's ag_additive_attention_module"""

    def forward(self, query, keys, mask=None):
        scores = self.v(torch.tanh(self.W1(keys) + self.W2(query).unsqueeze(1))).squeeze(-1)
        return attend(scores, keys, mask)


class DotAttention(nn.Module):
    """Luong: score = s^T h_j, or s^T W h_j (general); attograd's ag_dot_attention_module"""

    def __init__(self, query_size, key_size, general):
        super().__init__()
        self.W = nn.Linear(key_size, query_size, bias=False) if general else None

    def forward(self, query, keys, mask=None):
        k = self.W(keys) if self.W is not None else keys
        scores = torch.bmm(k, query.unsqueeze(-1)).squeeze(-1)
        return attend(scores, keys, mask)


def attend(scores, keys, mask):
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    w = safe_softmax(scores)  # a fully padded row: zeros (torch's softmax gives NaN)
    return torch.bmm(w.unsqueeze(1), keys).squeeze(1), w


def gru_reference(m, p, x, h0, lengths):
    """the GRU equations step by step, skipping steps t >= length; checks our reading of torch"""
    L, N, _ = x.shape
    D = 2 if m.bidirectional else 1
    H = m.hidden_size
    h0 = torch.zeros(m.num_layers * D, N, H, dtype=x.dtype) if h0 is None else h0
    live = (torch.arange(L)[:, None] < lengths[None, :]).unsqueeze(-1)  # (L,N,1)
    inp, hn = x, []
    for layer in range(m.num_layers):
        outs = []
        for d in range(D):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            wi, wh = p["weight_ih" + sfx], p["weight_hh" + sfx]
            bi, bh = p.get("bias_ih" + sfx), p.get("bias_hh" + sfx)
            h = h0[layer * D + d]
            out = [None] * L
            for t in (reversed(range(L)) if d else range(L)):
                gi = nn.functional.linear(inp[t], wi, bi).chunk(3, -1)
                gh = nn.functional.linear(h, wh, bh).chunk(3, -1)
                r, z = torch.sigmoid(gi[0] + gh[0]), torch.sigmoid(gi[1] + gh[1])
                n = torch.tanh(gi[2] + r * gh[2])
                h = torch.where(live[t], (h - n) * z + n, h)
                out[t] = torch.where(live[t], h, torch.zeros_like(h))
            outs.append(torch.stack(out))
            hn.append(h)
        inp = torch.cat(outs, -1)
    return inp, torch.stack(hn)


def family_nn_gru(f):
    torch.manual_seed(5)
    I, H = 4, 5

    # ---- GRUCell ----
    for name, bias, with_h, shape, desc in (
            ("gru_cell", True, True, (3, I), "nn.GRUCell(4,5), batch of 3 with hx"),
            ("gru_cell_no_bias_zero_hx", False, False, (3, I), "nn.GRUCell(4,5,bias=False), hx absent (zeros)"),
            ("gru_cell_unbatched", True, True, (I,), "nn.GRUCell(4,5) on an unbatched (4) input and (5) hx")):
        m = nn.GRUCell(I, H, bias=bias)
        p = module_params(m)
        x = leaf(torch.randn(*shape))
        h = leaf(torch.randn(*shape[:-1], H)) if with_h else None
        write_case(f, name, "gru_cell", "f32", [x, h], [run_with(m, p, x, h)], desc,
                   {"input_size": I, "hidden_size": H, "bias": int(bias)}, params=p, grad_outputs="random")

    # ---- GRU ----
    def gru_case(name, desc, cfg, L=6, N=3, with_h0=False, lengths=None, dtype="f32"):
        m = nn.GRU(I, H, **cfg)
        tdt = torch.float64 if dtype == "f64" else torch.float32
        m = m.to(tdt)
        # functional_call does not reach nn.GRU's cached _flat_weights in torch 1.13 (gradients
        # would be missing): call the module with its own parameters, which are leaves
        p = dict(m.named_parameters())
        bf = cfg.get("batch_first", False)
        D = 2 if cfg.get("bidirectional") else 1
        x = leaf(torch.randn(*((N, L, I) if bf else (L, N, I)), dtype=tdt))
        h0 = leaf(torch.randn(cfg.get("num_layers", 1) * D, N, H, dtype=tdt)) if with_h0 else None
        if lengths is None:
            out, hn = m(x, h0)
        else:
            packed = pack_padded_sequence(x, lengths, batch_first=bf, enforce_sorted=False)
            pout, hn = m(packed, h0)
            out, _ = pad_packed_sequence(pout, batch_first=bf, total_length=L)
        ref_out, ref_hn = gru_reference(m, p, x.transpose(0, 1) if bf else x, h0,
                                        torch.full((N,), L) if lengths is None else lengths)
        assert torch.allclose(ref_out.transpose(0, 1) if bf else ref_out, out, atol=1e-5), name
        assert torch.allclose(ref_hn, hn, atol=1e-5), name
        attrs = {"input_size": I, "hidden_size": H}
        for k, v in cfg.items():
            attrs[k] = int(v)
        write_case(f, name, "gru", dtype, [x, h0, lengths], [out, hn], desc, attrs, params=p,
                   grad_outputs="random")

    gru_case("gru_1layer", "nn.GRU(4,5), (L,N,in) = (6,3,4), no h0", {})
    gru_case("gru_2layers_bidirectional", "nn.GRU(4,5,num_layers=2,bidirectional=True) with h0 (4,3,5)",
             {"num_layers": 2, "bidirectional": True}, with_h0=True)
    gru_case("gru_2layers_bidirectional_f64", "the same in float64, no bias",
             {"num_layers": 2, "bidirectional": True, "bias": False}, with_h0=True, dtype="f64")
    gru_case("gru_batch_first_h0", "nn.GRU(4,5,batch_first=True), (N,L,in) = (3,6,4) with h0 (1,3,5)",
             {"batch_first": True}, with_h0=True)
    gru_case("gru_lengths_2layers_bidirectional",
             "2 layers, bidirectional, lengths (4,6,1) unsorted through pack_padded_sequence(enforce_sorted=False) "
             "and pad_packed_sequence(total_length=6), with h0: the reverse direction starts at each sequence's "
             "last real step, padded outputs are 0",
             {"num_layers": 2, "bidirectional": True}, with_h0=True, lengths=torch.tensor([4, 6, 1]))
    gru_case("gru_lengths_batch_first_shorter_than_L",
             "batch_first, lengths (2,5,3) all below L=6 (pad_packed_sequence(total_length=6))",
             {"batch_first": True, "bidirectional": True}, lengths=torch.tensor([2, 5, 3]))

    # ---- attention ----
    N, S, Hq, Hk, A = 3, 5, 4, 6, 3
    mask = torch.tensor([[False] * 5, [False, False, False, True, True], [False, True, False, False, True]])
    dead = mask.clone()
    dead[1] = True
    fully = "query 1 has every key padded: weights and context 0 with zero gradient (torch's softmax gives NaN)"
    for name, msk, dev in (("additive_attention_padding_mask", mask, None),
                           ("additive_attention_fully_padded_row", dead, fully)):
        m = AdditiveAttention(Hq, Hk, A)
        p = module_params(m)
        q, k = leaf(torch.randn(N, Hq)), leaf(torch.randn(N, S, Hk))
        ctx, w = run_with(m, p, q, k, msk)
        write_case(f, name, "additive_attention", "f32", [q, k, msk], [ctx, w],
                   "Bahdanau attention v^T tanh(W1 h_j + W2 s), key padding mask (True = pad)",
                   {"query_size": Hq, "key_size": Hk, "attn_size": A}, params=p, grad_outputs="random", deviation=dev)
    for name, general, hq, msk, dev in (("dot_attention_padding_mask", False, Hk, mask, None),
                                        ("dot_attention_general_padding_mask", True, Hq, mask, None),
                                        ("dot_attention_general_fully_padded_row", True, Hq, dead, fully)):
        m = DotAttention(hq, Hk, general)
        p = module_params(m)
        q, k = leaf(torch.randn(N, hq)), leaf(torch.randn(N, S, Hk))
        ctx, w = run_with(m, p, q, k, msk)
        write_case(f, name, "dot_attention", "f32", [q, k, msk], [ctx, w],
                   "Luong attention, score " + ("s^T W h_j" if general else "s^T h_j") + ", key padding mask",
                   {"query_size": hq, "key_size": Hk, "general": int(general)}, params=p or None,
                   grad_outputs="random", deviation=dev)


def main():
    path = os.path.join(HERE, "nn_gru.h5")
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        family_nn_gru(f)
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
