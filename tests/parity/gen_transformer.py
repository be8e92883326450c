#!/usr/bin/python3
"""PyTorch parity cases for the transformer layers and stacks (schema: README.md).

Run from the repository root: /usr/bin/python3 tests/parity/gen_transformer.py
Writes tests/parity/nn_transformer.h5. Every case runs torch in eval mode (dropout off) with
gradients enabled (so torch takes its differentiable path, not the inference fast path), with
random non-zero biases and LayerNorm affine parameters, and checks the output and the gradients
of the inputs and of every parameter for a random grad output."""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_parity import leaf, module_params, run_with, write_case  # noqa: E402

E, H, FF = 8, 2, 16
nn = torch.nn


def randomize(m):
    """distinct values everywhere: torch's clones start identical and biases start at zero"""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() > 1:
                p.uniform_(-0.5, 0.5)
            elif name.endswith("norm1.weight") or name.endswith("norm2.weight") or name.endswith(
                    "norm3.weight") or name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
            else:
                p.copy_(0.5 * torch.randn_like(p))
    m.eval()
    return m


def layer_attrs(act="relu", batch_first=False, norm_first=False, eps=1e-5):
    return {"d_model": E, "nhead": H, "dim_feedforward": FF, "dropout": 0.1, "activation": act,
            "layer_norm_eps": eps, "batch_first": int(batch_first), "norm_first": int(norm_first)}


def seq(L, N, batch_first):
    return leaf(torch.randn(N, L, E) if batch_first else torch.randn(L, N, E))


def pad_tail(N, S, lengths):
    """key padding mask (N,S), True after each sequence's length (never a fully padded row)"""
    m = torch.zeros(N, S, dtype=torch.bool)
    for i, n in enumerate(lengths):
        m[i, n:] = True
    return m


def causal_bool(L):
    return torch.ones(L, L, dtype=torch.bool).triu(1)


def encoder_layer_case(f, name, desc, act, batch_first, norm_first, L=5, N=3, mask=None, kpm=None, eps=1e-5,
                       unbatched=False):
    m = randomize(nn.TransformerEncoderLayer(E, H, FF, 0.1, act, eps, batch_first, norm_first))
    p = module_params(m)
    src = leaf(torch.randn(L, E)) if unbatched else seq(L, N, batch_first)
    out = run_with(m, p, src, src_mask=mask, src_key_padding_mask=kpm)
    write_case(f, name, "transformer_encoder_layer", "f32", [src, mask, kpm], [out], desc,
               layer_attrs(act, batch_first, norm_first, eps), params=p, grad_outputs="random")


def decoder_layer_case(f, name, desc, act, batch_first, norm_first, T=4, S=6, N=3, tgt_mask=None, memory_mask=None,
                       tgt_kpm=None, memory_kpm=None, tgt_is_causal=False):
    m = randomize(nn.TransformerDecoderLayer(E, H, FF, 0.1, act, 1e-5, batch_first, norm_first))
    p = module_params(m)
    tgt, memory = seq(T, N, batch_first), seq(S, N, batch_first)
    # torch 1.13 has no tgt_is_causal: give torch the mask the flag stands for, attograd the flag
    torch_tgt_mask = causal_bool(T) if tgt_is_causal else tgt_mask
    out = run_with(m, p, tgt, memory, tgt_mask=torch_tgt_mask, memory_mask=memory_mask,
                   tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=memory_kpm)
    attrs = layer_attrs(act, batch_first, norm_first)
    attrs["tgt_is_causal"] = int(tgt_is_causal)
    write_case(f, name, "transformer_decoder_layer", "f32", [tgt, memory, tgt_mask, memory_mask, tgt_kpm, memory_kpm],
               [out], desc, attrs, params=p, grad_outputs="random")


def family_nn_transformer(f):
    torch.manual_seed(5)
    N, L = 3, 5
    kpm = pad_tail(N, L, [5, 3, 4])
    encoder_layer_case(f, "encoder_layer_post_norm_relu_seq_first",
                       "TransformerEncoderLayer(8,2,16), post-norm, relu, (L,N,E), key padding mask",
                       "relu", False, False, kpm=kpm)
    encoder_layer_case(f, "encoder_layer_norm_first_gelu_batch_first",
                       "norm_first, gelu, batch_first (N,L,E), key padding mask", "gelu", True, True, kpm=kpm)
    encoder_layer_case(f, "encoder_layer_post_norm_gelu_batch_first_float_mask",
                       "post-norm, gelu, batch_first, float (L,L) src_mask and a bool key padding mask, eps 1e-3",
                       "gelu", True, False, mask=torch.randn(L, L), kpm=kpm, eps=1e-3)
    encoder_layer_case(f, "encoder_layer_norm_first_relu_seq_first_3d_bool_mask",
                       "norm_first, relu, (L,N,E), 3-d bool src_mask (N*nhead,L,L) with the diagonal kept",
                       "relu", False, True, mask=(torch.rand(N * H, L, L) < 0.4) & ~torch.eye(L, dtype=torch.bool))
    encoder_layer_case(f, "encoder_layer_unbatched", "unbatched (L,E) input with an (L) key padding mask",
                       "relu", False, False, kpm=torch.tensor([False, False, False, True, True]), unbatched=True)

    T, S = 4, 6
    mkpm = pad_tail(N, S, [6, 4, 2])
    decoder_layer_case(f, "decoder_layer_post_norm_relu_causal_seq_first",
                       "TransformerDecoderLayer(8,2,16), post-norm, relu, (T,N,E) T=4 S=6, float causal tgt_mask "
                       "(generate_square_subsequent_mask), memory key padding mask", "relu", False, False,
                       tgt_mask=nn.Transformer.generate_square_subsequent_mask(T), memory_kpm=mkpm)
    decoder_layer_case(f, "decoder_layer_norm_first_gelu_batch_first_all_masks",
                       "norm_first, gelu, batch_first, bool causal tgt_mask, tgt and memory key padding masks, "
                       "float memory_mask (T,S)", "gelu", True, True, tgt_mask=causal_bool(T),
                       memory_mask=torch.randn(T, S), tgt_kpm=pad_tail(N, T, [4, 3, 2]), memory_kpm=mkpm)
    decoder_layer_case(f, "decoder_layer_tgt_is_causal_flag",
                       "tgt_is_causal=True without a tgt_mask (torch given the causal bool mask it stands for), "
                       "memory key padding mask, post-norm, batch_first", "relu", True, False, tgt_is_causal=True,
                       memory_kpm=mkpm)

    # stacks: torch's clones start equal; randomize() makes every layer distinct
    enc = randomize(nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, FF, 0.1, "relu"), 2, nn.LayerNorm(E)))
    p = module_params(enc)
    src = seq(L, N, False)
    out = run_with(enc, p, src, mask=None, src_key_padding_mask=kpm)
    attrs = layer_attrs("relu")
    attrs.update({"num_layers": 2, "norm": 1})
    write_case(f, "encoder_stack2_final_norm", "transformer_encoder", "f32", [src, None, kpm], [out],
               "TransformerEncoder of 2 post-norm layers with a final LayerNorm, key padding mask", attrs,
               params=p, grad_outputs="random")

    dec = randomize(nn.TransformerDecoder(
        nn.TransformerDecoderLayer(E, H, FF, 0.1, "gelu", 1e-5, True, True), 2))
    p = module_params(dec)
    tgt, memory = seq(T, N, True), seq(S, N, True)
    tmask = nn.Transformer.generate_square_subsequent_mask(T)
    out = run_with(dec, p, tgt, memory, tgt_mask=tmask, memory_key_padding_mask=mkpm)
    attrs = layer_attrs("gelu", True, True)
    attrs.update({"num_layers": 2, "norm": 0})
    write_case(f, "decoder_stack2_norm_first_no_final_norm", "transformer_decoder", "f32",
               [tgt, memory, tmask, None, None, mkpm], [out],
               "TransformerDecoder of 2 norm_first gelu batch_first layers, no final norm, causal tgt_mask, "
               "memory key padding mask", attrs, params=p, grad_outputs="random")

    dec2 = randomize(nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, FF, 0.1, "relu"), 2, nn.LayerNorm(E)))
    p = module_params(dec2)
    tgt, memory = seq(T, N, False), seq(S, N, False)
    out = run_with(dec2, p, tgt, memory, tgt_mask=causal_bool(T), tgt_key_padding_mask=pad_tail(N, T, [4, 2, 3]))
    attrs = layer_attrs("relu")
    attrs.update({"num_layers": 2, "norm": 1})
    write_case(f, "decoder_stack2_final_norm", "transformer_decoder", "f32",
               [tgt, memory, causal_bool(T), None, pad_tail(N, T, [4, 2, 3]), None], [out],
               "TransformerDecoder of 2 post-norm layers with a final LayerNorm, bool causal tgt_mask, tgt key "
               "padding mask", attrs, params=p, grad_outputs="random")

    tr = randomize(nn.Transformer(E, H, 1, 2, FF, 0.1))
    p = module_params(tr)
    src, tgt = seq(L, N, False), seq(T, N, False)
    smask = torch.randn(L, L)
    out = run_with(tr, p, src, tgt, src_mask=smask, tgt_mask=tmask, src_key_padding_mask=kpm,
                   memory_key_padding_mask=kpm)
    attrs = layer_attrs("relu")
    attrs.update({"num_encoder_layers": 1, "num_decoder_layers": 2})
    write_case(f, "transformer_full", "transformer", "f32", [src, tgt, smask, tmask, None, kpm, None, kpm], [out],
               "nn.Transformer(8,2,1 encoder layer,2 decoder layers,16): encoder.*/decoder.* names, final norms, "
               "float src_mask, causal tgt_mask, src and memory key padding masks", attrs, params=p,
               grad_outputs="random")

    # attograd's recompute_attention (every attention block computed again in backward): torch
    # runs the plain model, the values and gradients must be the same
    tr = randomize(nn.Transformer(E, H, 2, 2, FF, 0.1, "gelu", batch_first=True, norm_first=True))
    p = module_params(tr)
    src, tgt = seq(L, N, True), seq(T, N, True)
    out = run_with(tr, p, src, tgt, tgt_mask=causal_bool(T), src_key_padding_mask=kpm,
                   tgt_key_padding_mask=pad_tail(N, T, [4, 3, 2]), memory_key_padding_mask=kpm)
    attrs = layer_attrs("gelu", True, True)
    attrs.update({"num_encoder_layers": 2, "num_decoder_layers": 2, "recompute_attention": 1})
    write_case(f, "transformer_recompute_attention", "transformer", "f32",
               [src, tgt, None, causal_bool(T), None, kpm, pad_tail(N, T, [4, 3, 2]), kpm], [out],
               "nn.Transformer(8,2,2+2,16, gelu, batch_first, norm_first) with attograd's recompute_attention: "
               "each attention block recomputed in backward; causal tgt_mask, every key padding mask", attrs,
               params=p, grad_outputs="random")

    # attograd's skip_padding (layers and stacks run on the positions that are not padding): torch
    # runs the plain modules; at padded positions attograd outputs 0, so torch's output is masked
    # there (its gradient reaches nothing through them), and everything else must be the same
    skip = "attograd outputs 0 at padded positions (skip_padding): the expected output is torch's with those " \
           "positions set to 0"
    m = randomize(nn.TransformerEncoderLayer(E, H, FF, 0.1, "relu", 1e-5, False, False))
    p = module_params(m)
    src = seq(L, N, False)
    out = run_with(m, p, src, src_key_padding_mask=kpm).masked_fill(kpm.t().unsqueeze(-1), 0)
    attrs = layer_attrs("relu")
    attrs["skip_padding"] = 1
    write_case(f, "encoder_layer_skip_padding", "transformer_encoder_layer", "f32", [src, None, kpm], [out],
               "post-norm, relu, (L,N,E), key padding mask, with attograd's skip_padding", attrs, params=p,
               grad_outputs="random", deviation=skip)

    tkpm = pad_tail(N, T, [4, 3, 2])
    m = randomize(nn.TransformerDecoderLayer(E, H, FF, 0.1, "gelu", 1e-5, True, True))
    p = module_params(m)
    tgt, memory = seq(T, N, True), seq(S, N, True)
    out = run_with(m, p, tgt, memory, tgt_mask=causal_bool(T), tgt_key_padding_mask=tkpm,
                   memory_key_padding_mask=mkpm).masked_fill(tkpm.unsqueeze(-1), 0)
    attrs = layer_attrs("gelu", True, True)
    attrs["skip_padding"] = 1
    write_case(f, "decoder_layer_skip_padding", "transformer_decoder_layer", "f32",
               [tgt, memory, causal_bool(T), None, tkpm, mkpm], [out],
               "norm_first, gelu, batch_first, causal tgt_mask, tgt and memory key padding masks, with attograd's "
               "skip_padding", attrs, params=p, grad_outputs="random", deviation=skip)

    tr = randomize(nn.Transformer(E, H, 2, 2, FF, 0.1, "relu", batch_first=True))
    p = module_params(tr)
    src, tgt = seq(L, N, True), seq(T, N, True)
    out = run_with(tr, p, src, tgt, tgt_mask=causal_bool(T), src_key_padding_mask=kpm, tgt_key_padding_mask=tkpm,
                   memory_key_padding_mask=kpm).masked_fill(tkpm.unsqueeze(-1), 0)
    attrs = layer_attrs("relu", True, False)
    attrs.update({"num_encoder_layers": 2, "num_decoder_layers": 2, "skip_padding": 1})
    write_case(f, "transformer_skip_padding", "transformer", "f32",
               [src, tgt, None, causal_bool(T), None, kpm, tkpm, kpm], [out],
               "nn.Transformer(8,2,2+2,16, batch_first) with attograd's skip_padding: causal tgt_mask, every key "
               "padding mask (memory's equal to the source's)", attrs, params=p, grad_outputs="random",
               deviation=skip)


def main():
    path = os.path.join(HERE, "nn_transformer.h5")
    tmp = path + ".tmp"
    import h5py
    with h5py.File(tmp, "w") as f:
        family_nn_transformer(f)
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
