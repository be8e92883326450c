#!/usr/bin/env python3
"""Convert between attograd HDF5 checkpoints and PyTorch state_dict files, and check that
an equivalent torch model computes what attograd computes (docs/checkpoint.md). Installed as
the command attograd-torch (the checks run test programs of a build tree).

  checkpoint_torch.py to-torch CKPT.h5 OUT.pt
      /model's datasets -> an OrderedDict name -> tensor (same names, shapes, dtypes, bits),
      saved with torch.save.
  checkpoint_torch.py from-torch IN.pt OUT.h5 [--dtype keep|float32|float64]
                      [--config KEY=VALUE ...] [--config-from CKPT.h5]
      a state_dict (or a dict holding one under "state_dict" or "model", or a whole
      nn.Module) -> an attograd checkpoint with /model, a fresh /training (step 0) and /config
      from the options. Written atomically (temporary file, fsync, rename).
  checkpoint_torch.py check [--child PATH]
      runs tests/checkpoint_child (PATH or $AG_CHECKPOINT_CHILD) to make attograd MLPs and
      their outputs, converts both ways and compares with torch.nn.Sequential(Linear, ReLU,
      Linear). Exits 0 when every comparison passed, 1 when one failed, 77 (meson's "skipped")
      when torch or h5py cannot be imported.
  checkpoint_torch.py check-translate [--bin PATH]
      trains a tiny attograd-translate model (PATH or $AG_TRANSLATE_BIN, SentencePiece subwords),
      loads its checkpoint into bench/torch_translate.py's Seq2Seq (strict), tokenizes with
      python3-sentencepiece from the model bytes the checkpoint holds, decodes greedily in torch
      and compares the text with `attograd-translate translate`. Exits as check does (77 also
      without sentencepiece).
"""
import argparse
import collections
import os
import subprocess
import sys
import tempfile
import zlib

FORMAT = "attograd-checkpoint"
FORMAT_VERSION = 2  # written; 1 (chunked, Fletcher32, variable-length strings) is still read
HEADER = 512  # the user block holding attograd's header (docs/checkpoint.md)
SKIP = 77

try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:  # the check must not pass without running; conversions cannot run
    if len(sys.argv) > 1 and sys.argv[1] in ("check", "check-translate"):
        print(f"checkpoint_torch check: skipped, cannot import {e.name}", file=sys.stderr)
        sys.exit(SKIP)
    if not {"-h", "--help"} & set(sys.argv[1:]):  # the usage needs none of them
        sys.exit(f"checkpoint_torch: needs torch, numpy and h5py ({e})")


class ConvertError(Exception):
    pass


def _attr_str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def open_checkpoint(path):
    """h5py.File of an attograd checkpoint, after checking its format attributes."""
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ConvertError(f"{path}: cannot open as HDF5: {e}") from None
    fmt = f.attrs.get("format")
    if fmt is None or _attr_str(fmt) != FORMAT:
        f.close()
        raise ConvertError(f"{path}: not an attograd checkpoint (format {fmt!r})")
    if int(f.attrs.get("format_version", -1)) not in (1, FORMAT_VERSION):
        f.close()
        raise ConvertError(f"{path}: format_version {f.attrs.get('format_version')} is not 1 or {FORMAT_VERSION}")
    return f


def write_header(path):
    """attograd's header in the user block: the file's length and the CRC-32 of what follows it.
    Also the recipe after editing a checkpoint by hand (docs/checkpoint.md)."""
    with open(path, "r+b") as f:
        b = f.read()
        head = f"{FORMAT}\nlength {len(b)}\ncrc32 {zlib.crc32(b[HEADER:]):08x}\n".encode()
        f.seek(0)
        f.write(head.ljust(HEADER, b"\0"))


def _crc32_le(a):
    """what a dataset's crc32 attribute holds: the CRC-32 of its data's little-endian bytes"""
    return np.uint32(zlib.crc32(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()))


def read_state_dict(path):
    """The /model group as an OrderedDict in the order the parameters were added."""
    with open_checkpoint(path) as f:
        if "model" not in f:
            raise ConvertError(f"{path}: no /model group")
        sd = collections.OrderedDict()
        for name, ds in f["model"].items():
            if not isinstance(ds, h5py.Dataset) or ds.dtype.kind != "f" or ds.dtype.itemsize not in (4, 8):
                raise ConvertError(f"{path}: '{name}' is not a float32/float64 dataset")
            arr = np.ascontiguousarray(ds[()], dtype=ds.dtype.newbyteorder("="))
            sd[name] = torch.from_numpy(np.array(arr, ndmin=0))
        return sd


# config strings longer than this are one-element string datasets of /config, not attributes
ATTR_STRING_MAX = 255


def read_config(path):
    """/config as a dict: its attributes, then its string datasets (the long strings)."""
    with open_checkpoint(path) as f:
        if "config" not in f:
            return {}
        c = f["config"]
        cfg = {k: (_attr_str(v) if isinstance(v, (bytes, str)) else v.item()) for k, v in c.attrs.items()}
        for k, ds in c.items():
            if not isinstance(ds, h5py.Dataset) or ds.dtype.kind != "S" or ds.shape != (1,):
                raise ConvertError(f"{path}: config dataset '{k}' is not one fixed-length string")
            cfg[k] = _attr_str(ds[0])
        return cfg


def _atomic_write(path, write):
    """write(tmp_path), fsync, rename over path, fsync the directory."""
    d = os.path.dirname(os.path.abspath(path))
    tmp = path + ".tmp"
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDWR)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def to_torch(src, dst):
    sd = read_state_dict(src)
    _atomic_write(dst, lambda tmp: torch.save(sd, tmp))
    return sd


def _state_dict_of(obj, path):
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return obj
        for key in ("state_dict", "model"):
            if isinstance(obj.get(key), dict):
                return _state_dict_of(obj[key], path)
    raise ConvertError(f"{path}: holds no state_dict (a dict of tensors, or one under 'state_dict' or 'model')")


def write_checkpoint(dst, sd, dtype="keep", config=None):
    """An attograd checkpoint holding sd under /model, a fresh /training and config under /config."""
    want = {"keep": None, "float32": torch.float32, "float64": torch.float64}[dtype]
    tensors = []
    for name, t in sd.items():
        if "/" in name or name in ("", "."):
            raise ConvertError(f"'{name}' cannot name an HDF5 dataset")
        if not t.is_floating_point():
            raise ConvertError(f"'{name}' is {t.dtype}: attograd parameters are float32 or float64")
        t = t.detach().cpu().to(want) if want else t.detach().cpu()
        if t.dtype not in (torch.float32, torch.float64):
            raise ConvertError(f"'{name}' is {t.dtype}: pass --dtype float32 or float64 to convert it")
        tensors.append((name, t.contiguous().numpy()))
    if len({a.dtype for _, a in tensors}) > 1:
        raise ConvertError("the state_dict mixes float32 and float64: pass --dtype to pick one")

    def write(tmp):
        # format 2, as attograd writes it: the 1.10 file format (all metadata checksummed),
        # contiguous datasets with a crc32 attribute, fixed-length strings, the header
        with h5py.File(tmp, "w", libver=("v110", "v110"), track_order=True, userblock_size=HEADER) as f:
            _attr_string(f, "format", FORMAT)
            f.attrs["format_version"] = np.int64(FORMAT_VERSION)
            g = _group(f, "model")
            for name, a in tensors:
                _dataset(g, name, a, a.dtype.newbyteorder("<"))
            t = _group(f, "training")
            for k in ("global_step", "epoch", "data_position"):
                t.attrs[k] = np.int64(0)
            _group(t, "rng")
            c = _group(f, "config")
            for k, v in (config or {}).items():
                b = str(v).encode()
                if isinstance(v, (bool, int)):
                    c.attrs[k] = np.int64(v)
                elif isinstance(v, float):
                    c.attrs[k] = np.float64(v)
                elif len(b) <= ATTR_STRING_MAX:
                    _attr_string(c, k, str(v))
                else:
                    sdt = h5py.string_dtype("utf-8", len(b))
                    _dataset(c, k, np.array([b], dtype=sdt), sdt)
        write_header(tmp)
    _atomic_write(dst, write)


def _attr_string(obj, name, s):
    """a fixed-length UTF-8 string attribute (not variable-length: those live in HDF5's global
    heap, which has no checksum)"""
    b = s.encode()
    sdt = h5py.string_dtype("utf-8", max(len(b), 1))
    obj.attrs.create(name, np.array(b, dtype=sdt), dtype=sdt)


def _group(parent, name):
    """a group tracking creation order, its attributes kept in its object header (checksummed)"""
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    order = h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED
    gcpl.set_link_creation_order(order)
    gcpl.set_attr_creation_order(order)
    gcpl.set_attr_phase_change(65535, 65535)
    return h5py.Group(h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl))


def _dataset(g, name, a, dtype):
    """a contiguous dataset and its crc32 attribute"""
    ds = g.create_dataset(name, data=a, dtype=dtype)
    ds.attrs["crc32"] = _crc32_le(a)


def from_torch(src, dst, dtype="keep", config=None):
    sd = _state_dict_of(torch.load(src, map_location="cpu"), src)
    write_checkpoint(dst, sd, dtype, config)
    return sd


def _parse_value(v):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


# ---- check ---------------------------------------------------------------------------------

class CheckFailed(Exception):
    pass


def _child(child, *args):
    r = subprocess.run([child, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise CheckFailed(f"{child} {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def _attograd_forward(child, ckpt, batch=4):
    """(x, y) as float64 numpy arrays from checkpoint_child mlp-forward."""
    lines = _child(child, "mlp-forward", ckpt, str(batch)).split("\n")
    out, i = {}, 0
    while i < len(lines) and lines[i]:
        name, rows, cols = lines[i].split()
        n = int(rows) * int(cols)
        out[name] = np.array([float.fromhex(v) for v in lines[i + 1:i + 1 + n]]).reshape(int(rows), int(cols))
        i += 1 + n
    return out["x"], out["y"]


def _mlp(cfg, dt):
    return torch.nn.Sequential(torch.nn.Linear(cfg["in_features"], cfg["hidden"]), torch.nn.ReLU(),
                               torch.nn.Linear(cfg["hidden"], cfg["out_features"])).to(dt)


def _expect(cond, what):
    if not cond:
        raise CheckFailed(what)
    print(f"  ok: {what}")


def _close(a, b, dt):
    tol = dict(rtol=1e-12, atol=1e-14) if dt == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    return np.allclose(a, b, **tol), float(np.max(np.abs(a - b)))


def _check_format2(path):
    """True when h5py reads path as format 2: the header matches the file, strings are
    fixed-length, every dataset is contiguous with a crc32 attribute equal to zlib's CRC-32 of
    its data"""
    b = open(path, "rb").read()
    head = b[:HEADER].rstrip(b"\0").decode().split("\n")
    ok = head[:3] == [FORMAT, f"length {len(b)}", f"crc32 {zlib.crc32(b[HEADER:]):08x}"]
    datasets = []
    with h5py.File(path, "r") as f:
        ok = ok and int(f.attrs["format_version"]) == 2
        ok = ok and h5py.check_string_dtype(f.attrs.get_id("format").dtype).length == len(FORMAT)
        f.visititems(lambda n, o: datasets.append(o) if isinstance(o, h5py.Dataset) else None)
        for ds in datasets:
            ok = ok and ds.chunks is None and ds.attrs["crc32"] == _crc32_le(np.asarray(ds[()]))
    return ok and len(datasets) > 0


def _flip_data_byte(src, dst, name):
    """dst: src with one bit of /model/name's data flipped, the header rewritten to match"""
    with h5py.File(src, "r") as f:
        at = f["model"][name].id.get_offset()
    b = bytearray(open(src, "rb").read())
    b[at + 1] ^= 0x08
    open(dst, "wb").write(b)
    write_header(dst)


def check(child):
    with tempfile.TemporaryDirectory(prefix="ag_torch_check_") as d:
        p = lambda n: os.path.join(d, n)
        for dts, dt in (("f32", torch.float32), ("f64", torch.float64)):
            print(f"{dts}:")
            # attograd -> torch
            _child(child, "mlp-init", p("a.h5"), dts, "11")
            x, y = _attograd_forward(child, p("a.h5"))
            cfg = read_config(p("a.h5"))
            sd = to_torch(p("a.h5"), p("a.pt"))
            loaded = torch.load(p("a.pt"))
            with h5py.File(p("a.h5"), "r") as f:
                same = list(loaded) == list(f["model"]) == ["0.weight", "0.bias", "2.weight", "2.bias"] and all(
                    tuple(loaded[k].shape) == f["model"][k].shape and loaded[k].dtype == dt
                    and np.array_equal(loaded[k].numpy().view(np.uint8), f["model"][k][()].view(np.uint8))
                    for k in loaded)
            _expect(same, "torch file has the checkpoint's names, order, shapes, dtype and bits")
            _expect(_check_format2(p("a.h5")), "h5py reads attograd's format 2: header, fixed-length strings, "
                    "every dataset's crc32 is zlib's CRC-32 of its data")
            model = _mlp(cfg, dt)
            model.load_state_dict(loaded, strict=True)
            with torch.no_grad():
                yt = model(torch.from_numpy(x).to(dt)).double().numpy()
            ok, err = _close(yt, y, dt)
            _expect(ok, f"torch model from the converted file matches attograd's outputs (max |diff| {err:.3g})")
            # torch -> attograd, round trip: same weights give attograd the same outputs, bit for bit
            from_torch(p("a.pt"), p("a2.h5"), config=cfg)
            x2, y2 = _attograd_forward(child, p("a2.h5"))
            _expect(np.array_equal(x2, x) and np.array_equal(y2, y), "h5 -> pt -> h5 round trip is bit-exact")
            _expect(_check_format2(p("a2.h5")), "from-torch writes format 2 with attograd's header and CRC-32s")
            _flip_data_byte(p("a2.h5"), p("a2bad.h5"), "0.weight")
            r = subprocess.run([child, "mlp-forward", p("a2bad.h5"), "4"], capture_output=True, text=True)
            _expect(r.returncode != 0 and "'0.weight' is damaged: the CRC-32 of its data" in r.stderr,
                    "attograd refuses a from-torch file with a flipped data bit behind a rewritten header")
            # a long config string (a vocabulary) goes to a /config dataset that attograd loads
            vocab = "\n".join(f"w{i}\u00e9" for i in range(30000))
            from_torch(p("a.pt"), p("a3.h5"), config=dict(cfg, vocab=vocab))
            with h5py.File(p("a3.h5"), "r") as f:
                stored = isinstance(f["config"].get("vocab"), h5py.Dataset) and "vocab" not in f["config"].attrs
            x4, y4 = _attograd_forward(child, p("a3.h5"))
            _expect(stored and read_config(p("a3.h5")) == dict(cfg, vocab=vocab) and np.array_equal(y4, y),
                    f"a {len(vocab.encode())}-byte config string is a /config dataset, read back and loaded by attograd")
            # a model made by torch, converted for attograd
            torch.manual_seed(3)
            m2 = _mlp(cfg, dt)
            torch.save(m2.state_dict(), p("b.pt"))
            from_torch(p("b.pt"), p("b.h5"), config=cfg)
            x3, y3 = _attograd_forward(child, p("b.h5"))
            with torch.no_grad():
                yt3 = m2(torch.from_numpy(x3).to(dt)).double().numpy()
            ok, err = _close(yt3, y3, dt)
            _expect(ok, f"attograd loading a torch-made state_dict matches torch's outputs (max |diff| {err:.3g})")
            _expect(not np.allclose(y3, y), "different weights give different outputs (the comparison can fail)")
    print("checkpoint_torch check: all comparisons passed")


def _toy_corpus(path, lines, seed):
    """letters to the same letters in capitals, reversed ("a b c" -> "C B A")"""
    import random
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(lines):
            w = [rng.choice("abcdef") for _ in range(rng.randint(2, 4))]
            f.write(" ".join(w) + "\t" + " ".join(c.upper() for c in reversed(w)) + "\n")


def _torch_greedy(model, sp_src, sp_tgt, sentence, max_len, positions):
    """attograd-translate's greedy decoding of one sentence (model_translate, translate_ids)"""
    ids = sp_src.encode(sentence)[:max_len - 1] + [2]
    src = torch.tensor([ids])
    limit = min(2 * len(ids) + 8, positions - 1)
    with torch.no_grad():
        memory = model.encode(src)
        ys = [1]
        for _ in range(limit):
            nxt = int(model.decode(torch.tensor([ys]), memory, src)[0, -1].argmax())
            if nxt == 2:
                break
            ys.append(nxt)
    return sp_tgt.decode([i for i in ys[1:] if i not in (0, 1)])


def check_translate(binary):
    import base64
    import importlib.util
    try:
        import sentencepiece as spm
    except ImportError:
        print("checkpoint_torch check-translate: skipped, cannot import sentencepiece", file=sys.stderr)
        return SKIP
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("torch_translate", os.path.join(here, "..", "bench",
                                                                                  "torch_translate.py"))
    tt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tt)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="ag_torch_translate_") as d:
        corpus, out = os.path.join(d, "toy.tsv"), os.path.join(d, "run")
        _toy_corpus(corpus, 200, 5)
        r = subprocess.run([binary, "train", "--train", corpus, "--out", out, "--d-model", "32", "--heads", "2",
                            "--layers", "1", "--ff", "64", "--batch", "16", "--steps", "300", "--eval-every", "300",
                            "--warmup", "50", "--threads", "1", "--samples", "0"], capture_output=True, text=True)
        if r.returncode != 0:
            raise CheckFailed(f"attograd-translate train failed ({r.returncode}): {r.stderr.strip()}")
        ckpt = os.path.join(out, "best.h5")
        cfg = read_config(ckpt)
        _expect(cfg["tokens"] == "spm", "the checkpoint holds SentencePiece models")
        sp_src = spm.SentencePieceProcessor(model_proto=base64.b64decode(cfg["src_spm"]))
        sp_tgt = spm.SentencePieceProcessor(model_proto=base64.b64decode(cfg["tgt_spm"]))
        model = tt.load_checkpoint(ckpt)[0]  # strict=True: a missing or extra name fails
        sentences = ["a b c", "f e d c", "b b", "a c e f", "d a", "c c c c", "e f a b"]
        theirs = [_torch_greedy(model, sp_src, sp_tgt, s, cfg["max_len"], cfg["positions"]) for s in sentences]
        r = subprocess.run([binary, "translate", "--checkpoint", ckpt, *sentences], capture_output=True, text=True)
        if r.returncode != 0:
            raise CheckFailed(f"attograd-translate translate failed ({r.returncode}): {r.stderr.strip()}")
        ours = r.stdout.split("\n")[:-1]
        for s, a, t in zip(sentences, ours, theirs):
            print(f"  {s!r}: attograd {a!r}, torch {t!r}")
        _expect(ours == theirs, "torch's greedy translations equal attograd's, text for text")
        distinct = len(set(t for t in theirs if t))
        _expect(distinct >= 4,
                f"{distinct} distinct non-empty translations of {len(sentences)}: the comparison can fail")
    print("checkpoint_torch check-translate: all comparisons passed")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("to-torch")
    a.add_argument("src")
    a.add_argument("dst")
    b = sub.add_parser("from-torch")
    b.add_argument("src")
    b.add_argument("dst")
    b.add_argument("--dtype", choices=("keep", "float32", "float64"), default="keep")
    b.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    b.add_argument("--config-from", metavar="CKPT.h5", help="copy /config from an attograd checkpoint")
    c = sub.add_parser("check")
    c.add_argument("--child", default=os.environ.get("AG_CHECKPOINT_CHILD"))
    t = sub.add_parser("check-translate")
    t.add_argument("--bin", default=os.environ.get("AG_TRANSLATE_BIN"))
    args = ap.parse_args(argv)
    try:
        if args.cmd == "to-torch":
            sd = to_torch(args.src, args.dst)
            print(f"{args.dst}: {len(sd)} tensors")
        elif args.cmd == "from-torch":
            cfg = read_config(args.config_from) if args.config_from else {}
            for kv in args.config:
                k, sep, v = kv.partition("=")
                if not sep:
                    raise ConvertError(f"--config {kv}: expected KEY=VALUE")
                cfg[k] = _parse_value(v)
            sd = from_torch(args.src, args.dst, args.dtype, cfg)
            print(f"{args.dst}: {len(sd)} tensors")
        elif args.cmd == "check-translate":
            if not args.bin or not os.access(args.bin, os.X_OK):
                print("checkpoint_torch check-translate: needs attograd-translate (--bin or AG_TRANSLATE_BIN)",
                      file=sys.stderr)
                return 1
            return check_translate(args.bin)
        else:
            if not args.child or not os.access(args.child, os.X_OK):
                print("checkpoint_torch check: needs the checkpoint_child program (--child or AG_CHECKPOINT_CHILD)",
                      file=sys.stderr)
                return 1
            check(args.child)
    except (ConvertError, CheckFailed) as e:
        print(f"checkpoint_torch {args.cmd}: {'FAILED: ' if isinstance(e, CheckFailed) else ''}{e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
