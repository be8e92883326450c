#!/usr/bin/python3
"""PyTorch parity cases for the tensor ops of tensor/pointwise.c, sort.c and norm.c and the
scalar comparisons: sin, cos, clamp, leaky_relu, silu, softplus, elu, minimum/maximum, max/min
along a dim with indices, topk, sort, cumsum, vector_norm, any/all, full_like/ones_like and
lt/le/gt/ge/ne/eq with a number. Outputs that are indices or bools are compared too (as
numbers: an index must match exactly to pass the 1e-5 absolute tolerance).

Run from the repository root: /usr/bin/python3 tests/parity/gen_ops_math_select.py
  -> tests/parity/ops_math_select.h5 (adapters: tests/parity/ops_math_select.c). Schema: tests/parity/README.md.
An attribute transpose = 1 means the stored in0 is used through transpose(-2, -1), a
non-contiguous view, on both sides."""
import math
import os
import sys

import h5py
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_parity import leaf, write_case  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
F = torch.nn.functional
NAN = float("nan")
INF = float("inf")


def as_numbers(outs):
    """bool outputs as uint8 (the runner reads every expected output as numbers)"""
    return [o.to(torch.uint8) if o.dtype == torch.bool else o for o in outs]


def view(x, attrs):
    return x.transpose(-2, -1) if attrs.get("transpose") else x


def family(f):
    torch.manual_seed(7)
    gen = torch.Generator().manual_seed(7)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    def case(name, op, dtype, inputs, fn, desc, attrs=None, grad="random"):
        attrs = attrs or {}
        outs = fn(*inputs)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        differentiable = any(t is not None and t.requires_grad for t in inputs)
        write_case(f, name, op, dtype, inputs, as_numbers(outs), desc, attrs,
                   grad_outputs=grad if differentiable else None)

    # ---- unary math and activations ----
    x = leaf(randn(3, 4) * 2)
    case("sin_f32", "sin", "f32", [x], torch.sin, "torch.sin on a (3,4) tensor")
    xt = leaf(randn(5, 2, dtype=torch.float64) * 3)
    case("sin_f64_transposed", "sin", "f64", [xt], lambda a: torch.sin(a.transpose(-2, -1)),
         "torch.sin on a transposed (2,5) view", {"transpose": 1})
    case("cos_f32", "cos", "f32", [x], torch.cos, "torch.cos on a (3,4) tensor")
    case("cos_f64_transposed", "cos", "f64", [xt], lambda a: torch.cos(a.transpose(-2, -1)),
         "torch.cos on a transposed (2,5) view", {"transpose": 1})

    edges = leaf(torch.tensor([[-2.0, -1.0, -0.5, 0.0], [0.5, 1.0, 1.5, 3.0]]))
    case("clamp_min_max_at_bounds", "clamp", "f32", [edges], lambda a: torch.clamp(a, -1.0, 1.0),
         "torch.clamp(x, -1, 1) with elements exactly at both bounds: the gradient passes there",
         {"min": -1.0, "max": 1.0})
    case("clamp_min_only", "clamp", "f32", [x], lambda a: torch.clamp(a, min=-0.25),
         "torch.clamp(x, min=-0.25)", {"min": -0.25})
    case("clamp_max_only_f64", "clamp", "f64", [xt], lambda a: torch.clamp(a.transpose(-2, -1), max=0.5),
         "torch.clamp(x, max=0.5) on a transposed view", {"max": 0.5, "transpose": 1})
    case("clamp_min_above_max", "clamp", "f32", [edges], lambda a: torch.clamp(a, 1.0, -1.0),
         "torch.clamp(x, 1, -1): min > max gives max everywhere and no gradient", {"min": 1.0, "max": -1.0})

    case("leaky_relu_default", "leaky_relu", "f32", [edges], lambda a: F.leaky_relu(a),
         "F.leaky_relu(x) with torch's default slope 0.01, zero included", {"negative_slope": 0.01})
    case("leaky_relu_slope_0.2_f64", "leaky_relu", "f64", [xt],
         lambda a: F.leaky_relu(a.transpose(-2, -1), 0.2), "F.leaky_relu(x, 0.2) on a transposed view",
         {"negative_slope": 0.2, "transpose": 1})
    wide = leaf(torch.linspace(-12, 12, 25))
    case("silu_wide_range", "silu", "f32", [wide], F.silu, "F.silu on -12..12")
    case("silu_f64", "silu", "f64", [xt], F.silu, "F.silu on a (5,2) f64 tensor")
    case("softplus_default", "softplus", "f32", [wide], lambda a: F.softplus(a),
         "F.softplus(x), beta 1, threshold 20", {"beta": 1.0, "threshold": 20.0})
    cross = leaf(torch.tensor([-3.0, -1.0, 0.0, 1.0, 1.49, 1.51, 2.0, 4.0]))
    case("softplus_beta2_threshold3", "softplus", "f32", [cross], lambda a: F.softplus(a, 2.0, 3.0),
         "F.softplus(x, beta=2, threshold=3): linear above x = 1.5", {"beta": 2.0, "threshold": 3.0})
    case("elu_default", "elu", "f32", [edges], lambda a: F.elu(a), "F.elu(x), alpha 1, zero included",
         {"alpha": 1.0})
    case("elu_alpha_0.5_f64", "elu", "f64", [xt], lambda a: F.elu(a, 0.5), "F.elu(x, 0.5)", {"alpha": 0.5})

    # ---- minimum / maximum ----
    a, b = leaf(randn(3, 1)), leaf(randn(4))
    case("maximum_broadcast", "maximum", "f32", [a, b], torch.maximum, "torch.maximum of (3,1) and (4)")
    case("minimum_broadcast", "minimum", "f32", [a, b], torch.minimum, "torch.minimum of (3,1) and (4)")
    ta = leaf(torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64))
    tb = leaf(torch.tensor([[1.0, 0.0, 3.0], [5.0, 5.0, 2.0]], dtype=torch.float64))
    case("maximum_ties_f64", "maximum", "f64", [ta, tb], torch.maximum,
         "torch.maximum with ties: each operand gets half the gradient there")
    case("minimum_ties_f64", "minimum", "f64", [ta, tb], torch.minimum,
         "torch.minimum with ties: each operand gets half the gradient there")

    # ---- max / min along a dim, with indices ----
    r = leaf(randn(3, 4, 5))
    case("max_dim1", "max_dim", "f32", [r], lambda t: torch.max(t, 1), "torch.max(x, 1): values and indices",
         {"dim": 1}, grad="first")
    tie = leaf(torch.tensor([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 0.0, 5.0], [-1.0, -2.0, -2.0, 0.0]]))
    case("max_dim_ties_keepdim", "max_dim", "f32", [tie], lambda t: torch.max(t, -1, keepdim=True),
         "torch.max(x, -1, keepdim=True) with tied maxima: the first one's index", {"dim": -1, "keepdim": 1},
         grad="first")
    case("min_dim0_f64_transposed", "min_dim", "f64", [xt], lambda t: torch.min(t.transpose(-2, -1), 0),
         "torch.min(x, 0) of a transposed view", {"dim": 0, "transpose": 1}, grad="first")
    case("min_dim_ties_keepdim", "min_dim", "f32", [tie], lambda t: torch.min(t, 1, keepdim=True),
         "torch.min(x, 1, keepdim=True) with tied minima: the first one's index", {"dim": 1, "keepdim": 1},
         grad="first")

    # ---- topk, sort ----
    case("topk_largest_dim_last", "topk", "f32", [r], lambda t: torch.topk(t, 3),
         "torch.topk(x, 3): largest, sorted, along the last dim", {"k": 3, "dim": -1, "largest": 1}, grad="first")
    case("topk_smallest_dim0_f64", "topk", "f64", [xt], lambda t: torch.topk(t, 2, 0, largest=False),
         "torch.topk(x, 2, dim=0, largest=False)", {"k": 2, "dim": 0, "largest": 0}, grad="first")
    case("topk_dim1_transposed", "topk", "f32", [x], lambda t: torch.topk(t.transpose(-2, -1), 2, 1),
         "torch.topk of a transposed (4,3) view along dim 1", {"k": 2, "dim": 1, "largest": 1, "transpose": 1},
         grad="first")
    s = leaf(torch.tensor([[3.0, 1.0, 2.0, 1.0, 3.0, 0.0], [2.0, 2.0, -1.0, 4.0, 2.0, -1.0]]))
    case("sort_ascending_stable_ties", "sort", "f32", [s], lambda t: torch.sort(t, dim=1, stable=True),
         "torch.sort(x, dim=1, stable=True) with ties: they keep their order", {"dim": 1, "descending": 0},
         grad="first")
    case("sort_descending_stable_ties", "sort", "f32", [s],
         lambda t: torch.sort(t, dim=-1, descending=True, stable=True),
         "torch.sort(x, descending=True, stable=True) with ties", {"dim": -1, "descending": 1}, grad="first")
    case("sort_dim0_f64", "sort", "f64", [r.detach().double().requires_grad_()],
         lambda t: torch.sort(t, dim=0, stable=True), "torch.sort along dim 0 of (3,4,5)",
         {"dim": 0, "descending": 0}, grad="first")
    nan_row = torch.tensor([[0.5, NAN, -1.0, 2.0]])
    case("sort_nan_descending", "sort", "f32", [nan_row], lambda t: torch.sort(t, descending=True, stable=True),
         "torch.sort puts NaN first when descending (forward only)", {"dim": -1, "descending": 1})

    # ---- cumsum ----
    case("cumsum_dim1", "cumsum", "f32", [r], lambda t: torch.cumsum(t, 1), "torch.cumsum(x, 1)", {"dim": 1})
    case("cumsum_f64_transposed_dim0", "cumsum", "f64", [xt], lambda t: torch.cumsum(t.transpose(-2, -1), 0),
         "torch.cumsum of a transposed view along dim 0", {"dim": 0, "transpose": 1})
    ints = torch.tensor([[1, 2, 3], [40, -50, 60]])
    case("cumsum_int64", "cumsum", "f32", [ints], lambda t: torch.cumsum(t, -1),
         "torch.cumsum of int64 (forward only)", {"dim": -1})

    # ---- norm ----
    z = leaf(torch.tensor([[0.0, 0.0, 0.0, 0.0], [3.0, -4.0, 1.0, -1.0], [0.5, 0.0, -2.0, 2.0]]))
    for p, pname in ((2.0, "2"), (1.0, "1"), (INF, "inf"), (-INF, "neg_inf"), (0.5, "0.5"), (3.0, "3"),
                     (0.0, "0")):
        case(f"norm_p{pname}_dim1_zero_row", "norm", "f32", [z],
             lambda t, p=p: torch.linalg.vector_norm(t, p, dim=1),
             f"torch.linalg.vector_norm(x, {pname}, dim=1) with an all-zero row (its gradient is 0) and "
             "a row with the tie |-2| = |2| (the inf norm splits its gradient)", {"p": p, "dims": [1]})
    case("norm_p2_all_dims_f64", "norm", "f64", [r.detach().double().requires_grad_()],
         lambda t: torch.linalg.vector_norm(t), "torch.linalg.vector_norm(x) over all dims", {"p": 2.0})
    case("norm_p1.5_dims_0_2_keepdim", "norm", "f32", [r],
         lambda t: torch.linalg.vector_norm(t, 1.5, dim=(0, 2), keepdim=True),
         "torch.linalg.vector_norm(x, 1.5, dim=(0,2), keepdim=True)", {"p": 1.5, "dims": [0, 2], "keepdim": 1})
    case("norm_inf_transposed_keepdim", "norm", "f32", [x],
         lambda t: torch.linalg.vector_norm(t.transpose(-2, -1), INF, dim=-1, keepdim=True),
         "inf norm of a transposed view along the last dim", {"p": INF, "dims": [-1], "keepdim": 1,
                                                              "transpose": 1})

    # ---- any, all ----
    m = torch.tensor([[0.0, NAN, 0.0], [0.0, 0.0, 0.0], [1.0, 2.0, -3.0]])
    case("any_dim1_nan_is_true", "any", "f32", [m], lambda t: torch.any(t, 1), "torch.any(x, 1): NaN is true",
         {"dims": [1]})
    case("all_dim0_keepdim", "all", "f32", [m], lambda t: torch.all(t, 0, keepdim=True),
         "torch.all(x, 0, keepdim=True)", {"dims": [0], "keepdim": 1})
    bm = torch.tensor([[True, False], [True, True]])
    case("any_bool_all_dims", "any", "f32", [bm], torch.any, "torch.any of a bool tensor over everything")
    case("all_int64_dim_last", "all", "f32", [ints], lambda t: torch.all(t, -1), "torch.all of int64 along -1",
         {"dims": [-1]})

    # ---- full_like, ones_like ----
    case("full_like_f32", "full_like", "f32", [x.detach()], lambda t: torch.full_like(t, 3.5),
         "torch.full_like(x, 3.5)", {"value": 3.5})
    case("full_like_int64", "full_like", "f32", [ints], lambda t: torch.full_like(t, -7),
         "torch.full_like of int64", {"value": -7.0})
    case("ones_like_f64", "ones_like", "f64", [xt.detach()], torch.ones_like, "torch.ones_like")
    case("ones_like_int64", "ones_like", "f32", [ints], torch.ones_like, "torch.ones_like of int64")

    # ---- comparisons with a number ----
    c = torch.tensor([[0.1, 0.2, 0.3], [NAN, -1.0, 0.2]])
    for fn in ("lt", "le", "gt", "ge", "ne", "eq"):
        case(f"{fn}_scalar_f32", "compare_scalar", "f32", [c], lambda t, fn=fn: getattr(torch, fn)(t, 0.2),
             f"torch.{fn}(x, 0.2) in f32 (0.2 rounded to f32 as the data), NaN included",
             {"fn": fn, "scalar": 0.2})
        case(f"{fn}_scalar_int64_fraction", "compare_scalar", "f32", [ints],
             lambda t, fn=fn: getattr(torch, fn)(t, 2.5),
             f"torch.{fn}(int64 x, 2.5): compared exactly, not with 2.5 truncated", {"fn": fn, "scalar": 2.5})


def main():
    path = os.path.join(HERE, "ops_math_select.h5")
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        family(f)
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
