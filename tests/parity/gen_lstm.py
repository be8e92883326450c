#!/usr/bin/python3
"""PyTorch parity cases for nn/recurrent/lstm.h and rnn.h: LSTMCell, LSTM, RNNCell, RNN (tanh and
relu; layers, directions, batch_first, initial states, padded lengths through
pack_padded_sequence).

Run from the repository root: /usr/bin/python3 tests/parity/gen_lstm.py  -> tests/parity/nn_lstm.h5
Schema: tests/parity/README.md."""
import os
import sys

import h5py
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_parity import leaf, module_params, run_with, write_case  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
I, H = 4, 5


def reference(m, p, x, h0, c0, lengths):
    """nn.LSTM / nn.RNN step by step, skipping steps t >= length; checks our reading of torch"""
    L, N, _ = x.shape
    D = 2 if m.bidirectional else 1
    lstm = isinstance(m, nn.LSTM)
    zeros = torch.zeros(m.num_layers * D, N, m.hidden_size, dtype=x.dtype)
    h0 = zeros if h0 is None else h0
    c0 = zeros if c0 is None else c0
    act = torch.relu if getattr(m, "nonlinearity", "tanh") == "relu" else torch.tanh
    live = (torch.arange(L)[:, None] < lengths[None, :]).unsqueeze(-1)  # (L,N,1)
    inp, hn, cn = x, [], []
    for layer in range(m.num_layers):
        outs = []
        for d in range(D):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            wi, wh = p["weight_ih" + sfx], p["weight_hh" + sfx]
            bi, bh = p.get("bias_ih" + sfx), p.get("bias_hh" + sfx)
            h, c = h0[layer * D + d], c0[layer * D + d]
            out = [None] * L
            for t in (reversed(range(L)) if d else range(L)):
                pre = nn.functional.linear(h, wh, bh) + nn.functional.linear(inp[t], wi, bi)
                if lstm:
                    i, f, g, o = pre.chunk(4, -1)
                    cn_ = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                    hn_ = torch.sigmoid(o) * torch.tanh(cn_)
                    c = torch.where(live[t], cn_, c)
                else:
                    hn_ = act(pre)
                h = torch.where(live[t], hn_, h)
                out[t] = torch.where(live[t], h, torch.zeros_like(h))
            outs.append(torch.stack(out))
            hn.append(h)
            cn.append(c)
        inp = torch.cat(outs, -1)
    return inp, torch.stack(hn), torch.stack(cn)


def layer_case(f, name, desc, kind, cfg, L=6, N=3, with_h0=False, lengths=None, dtype="f32"):
    tdt = torch.float64 if dtype == "f64" else torch.float32
    m = (nn.LSTM if kind == "lstm" else nn.RNN)(I, H, **cfg).to(tdt)
    # functional_call does not reach the cached _flat_weights in torch 1.13 (gradients would be
    # missing): call the module with its own parameters, which are leaves
    p = dict(m.named_parameters())
    bf = cfg.get("batch_first", False)
    D = 2 if cfg.get("bidirectional") else 1
    x = leaf(torch.randn(*((N, L, I) if bf else (L, N, I)), dtype=tdt))
    NL = cfg.get("num_layers", 1) * D
    h0 = leaf(torch.randn(NL, N, H, dtype=tdt)) if with_h0 else None
    c0 = leaf(torch.randn(NL, N, H, dtype=tdt)) if with_h0 and kind == "lstm" else None
    hx = (h0, c0) if kind == "lstm" and with_h0 else h0
    if lengths is None:
        out, hn = m(x, hx)
    else:
        pout, hn = m(pack_padded_sequence(x, lengths, batch_first=bf, enforce_sorted=False), hx)
        out, _ = pad_packed_sequence(pout, batch_first=bf, total_length=L)
    ref = reference(m, p, x.transpose(0, 1) if bf else x, h0, c0, torch.full((N,), L) if lengths is None else lengths)
    assert torch.allclose(ref[0].transpose(0, 1) if bf else ref[0], out, atol=1e-5), name
    outs = [out] + (list(hn) if kind == "lstm" else [hn])
    for r, o in zip(ref[1:], outs[1:]):
        assert torch.allclose(r, o, atol=1e-5), name
    attrs = {"input_size": I, "hidden_size": H}
    for k, v in cfg.items():
        attrs[k] = int(v) if k != "nonlinearity" else int(v == "relu")
    ins = [x, h0, c0, lengths] if kind == "lstm" else [x, h0, lengths]
    write_case(f, name, kind, dtype, ins, outs, desc, attrs, params=p, grad_outputs="random")


def family_nn_lstm(f):
    torch.manual_seed(6)

    # ---- cells ----
    for name, bias, with_h, shape, desc in (
            ("lstm_cell", True, True, (3, I), "nn.LSTMCell(4,5), batch of 3 with (hx, cx)"),
            ("lstm_cell_no_bias_zero_state", False, False, (3, I), "nn.LSTMCell(4,5,bias=False), no state (zeros)"),
            ("lstm_cell_unbatched", True, True, (I,), "nn.LSTMCell(4,5) on an unbatched (4) input, (5) states")):
        m = nn.LSTMCell(I, H, bias=bias)
        p = module_params(m)
        x = leaf(torch.randn(*shape))
        h = leaf(torch.randn(*shape[:-1], H)) if with_h else None
        c = leaf(torch.randn(*shape[:-1], H)) if with_h else None
        hy, cy = run_with(m, p, x, (h, c) if with_h else None)
        write_case(f, name, "lstm_cell", "f32", [x, h, c], [hy, cy], desc,
                   {"input_size": I, "hidden_size": H, "bias": int(bias)}, params=p, grad_outputs="random")
    for name, nl, bias, with_h, shape, desc in (
            ("rnn_tanh_cell", "tanh", True, True, (3, I), "nn.RNNCell(4,5), batch of 3 with hx"),
            ("rnn_relu_cell", "relu", True, True, (3, I), "nn.RNNCell(4,5,nonlinearity='relu') with hx"),
            ("rnn_relu_cell_unbatched_no_bias", "relu", False, False, (I,),
             "nn.RNNCell(4,5,bias=False,nonlinearity='relu'), unbatched, no hx")):
        m = nn.RNNCell(I, H, bias=bias, nonlinearity=nl)
        p = module_params(m)
        x = leaf(torch.randn(*shape))
        h = leaf(torch.randn(*shape[:-1], H)) if with_h else None
        write_case(f, name, "rnn_cell", "f32", [x, h], [run_with(m, p, x, h)], desc,
                   {"input_size": I, "hidden_size": H, "bias": int(bias), "nonlinearity": int(nl == "relu")},
                   params=p, grad_outputs="random")

    # ---- layers ----
    lens = "lengths (4,6,1) unsorted through pack_padded_sequence(enforce_sorted=False) and " \
           "pad_packed_sequence(total_length=6): the reverse direction starts at each sequence's last real step"
    for kind in ("lstm", "rnn"):
        mod = "nn.LSTM" if kind == "lstm" else "nn.RNN"
        state = "(h0, c0)" if kind == "lstm" else "h0"
        layer_case(f, f"{kind}_1layer", f"{mod}(4,5), (L,N,in) = (6,3,4), no initial state", kind, {})
        layer_case(f, f"{kind}_2layers_bidirectional", f"{mod}(4,5,num_layers=2,bidirectional=True) with {state}",
                   kind, {"num_layers": 2, "bidirectional": True}, with_h0=True)
        layer_case(f, f"{kind}_2layers_bidirectional_f64", "the same in float64, no bias", kind,
                   {"num_layers": 2, "bidirectional": True, "bias": False}, with_h0=True, dtype="f64")
        layer_case(f, f"{kind}_batch_first_state", f"{mod}(4,5,batch_first=True), (N,L,in) = (3,6,4) with {state}",
                   kind, {"batch_first": True}, with_h0=True)
        layer_case(f, f"{kind}_lengths_2layers_bidirectional", f"{mod}, 2 layers, bidirectional, {state}, {lens}",
                   kind, {"num_layers": 2, "bidirectional": True}, with_h0=True, lengths=torch.tensor([4, 6, 1]))
        layer_case(f, f"{kind}_lengths_batch_first_shorter_than_L",
                   f"{mod}, batch_first, bidirectional, lengths (2,5,3) all below L=6", kind,
                   {"batch_first": True, "bidirectional": True}, lengths=torch.tensor([2, 5, 3]))
    layer_case(f, "rnn_relu_2layers_lengths", "nn.RNN(4,5,num_layers=2,nonlinearity='relu') with h0 and lengths (4,6,1)",
               "rnn", {"num_layers": 2, "nonlinearity": "relu"}, with_h0=True, lengths=torch.tensor([4, 6, 1]))


def main():
    path = os.path.join(HERE, "nn_lstm.h5")
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        family_nn_lstm(f)
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
