#!/usr/bin/env python3
"""Check the include rules of attograd's layers; exit 1 with one line per violation.

Every #include "..." in tensor/, autograd/, nn/, data/, examples/ and bench/ (and the umbrella
attograd.h) is resolved as the compiler does (the including file's folder, then the project
root, then examples/translate for its programs) and checked against:

  upward     Dependencies point down tensor/ -> autograd/ -> nn/ -> data/ -> examples/ (bench/
             sits with examples/; attograd.h, which includes all of nn/ and data/, sits just
             above data/): a file never includes a header of a later layer.
  private    A private header is used only inside its own folder (subfolders included):
             - every header of tensor/, autograd/, nn/ and data/ that the folder's meson.build does
               not install (install_headers) is private to that top folder;
             - every internal.h and *_internal.h is private to the folder it is in
               (nn/nn_internal.h to nn/, examples/translate/data_internal.h to
               examples/translate/, tensor/internal.h to tensor/).
  via        A header listed in VIA is installed only because another header includes it:
             outside its folder, it is reached through that header, never directly.
  installed  An installed header includes only installed headers (else the installed tree
             does not compile).
  unresolved An include that names no file of the tree (nor one that GENERATED says a
             meson.build makes in the build tree).
  api        The user's headers (every installed header but the op-author ones in OP_AUTHOR, and
             the headers they include) declare no ag__ name outside comments: what op authors
             need of the internals is in tensor/op.h.
  user       A user header never includes an op-author header: attograd.h shows the API alone
             (no struct ag_node), and op.h, which includes node.h, is the one op-author header.

Tests (tests/) may include anything: they test internals. Prints "include rules: N files ok"
when every file passes.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCANNED = ["tensor", "autograd", "nn", "data", "examples", "bench"]
# the order of the layers: an include may point at the same layer or an earlier one
RANK = {"tensor": 0, "autograd": 1, "nn": 2, "data": 2.2, "attograd.h": 2.5, "examples": 3, "bench": 3}
# extra include directories a folder's meson.build gives its programs (besides the root)
EXTRA_INC = {"examples/translate": ["examples/translate"]}
# installed header -> the header that code outside its top folder reaches it through
VIA = {"tensor/fastmath.h": "tensor/op.h", "tensor/node.h": "tensor/op.h"}
# installed for op authors (ag__ names allowed); every other installed header is the user API
OP_AUTHOR = {"tensor/op.h", "tensor/node.h", "tensor/fastmath.h"}
INTERNAL_NAME = re.compile(r"\bag__\w+")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
# headers a meson.build generates (configure_file) in its build directory, by the folder whose
# files may include them ("" for the whole tree)
GENERATED = {"": {"attograd_config.h"}, "examples/translate": {"translate_version.h"}}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_EXT = (".c", ".h", ".inc")


def rel(path):
    return os.path.relpath(os.path.normpath(path), ROOT).replace(os.sep, "/")


def layer(path):
    top = path.split("/", 1)[0]
    return RANK.get(top if "/" in path else path)


def installed_headers():
    """Headers that some meson.build installs (install_headers('a.h', 'sub/b.h', ...))."""
    found = set()
    for top in ("tensor", "autograd", "nn", "data"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            if "meson.build" not in files:
                continue
            text = open(os.path.join(folder, "meson.build"), encoding="utf-8").read()
            for call in re.finditer(r"install_headers\((.*?)\)", text, re.S):
                args = call.group(1).split("subdir", 1)[0]
                for name in re.findall(r"'([^']+\.h)'", args):
                    found.add(rel(os.path.join(folder, name)))
    return found


def private_scope(header, installed):
    """The folder a private header may be used in, or None when it is public."""
    folder, name = os.path.split(header)
    if name == "internal.h" or name.endswith("_internal.h"):
        return folder
    top = header.split("/", 1)[0]
    if top in ("tensor", "autograd", "nn", "data") and header not in installed:
        return top
    return None


def inside(path, folder):
    return path == folder or path.startswith(folder + "/")


def resolve(src, target):
    dirs = [os.path.dirname(src), ""]
    for folder, extra in EXTRA_INC.items():
        if inside(src, folder):
            dirs += extra
    for d in dirs:
        cand = rel(os.path.join(ROOT, d, target))
        if os.path.isfile(os.path.join(ROOT, cand)):
            return cand
    return None


def check_file(src, installed, problems):
    with open(os.path.join(ROOT, src), encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    for lineno, line in enumerate(lines, 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        where = f"{src}:{lineno}: includes \"{m.group(1)}\""
        hdr = resolve(src, m.group(1))
        generated = any((d == "" or inside(src, d)) and m.group(1) in names for d, names in GENERATED.items())
        if hdr is None and generated:
            continue
        if hdr is None:
            problems.append(f"{where}: no such file in the tree (unresolved)")
            continue
        src_rank, hdr_rank = layer(src), layer(hdr)
        if hdr_rank is not None and src_rank is not None and hdr_rank > src_rank:
            problems.append(f"{where} ({hdr}): upward include, {src.split('/')[0]}/ may not depend on "
                            f"{hdr.split('/')[0] if '/' in hdr else hdr}")
        scope = private_scope(hdr, installed)
        if scope is not None and not inside(src, scope):
            problems.append(f"{where} ({hdr}): private to {scope}/, used outside it")
        if hdr in VIA and not inside(src, hdr.split("/")[0]) and src != VIA[hdr]:
            problems.append(f"{where} ({hdr}): reach it through {VIA[hdr]}, not directly")
        if src in installed and hdr not in installed:
            problems.append(f"{where} ({hdr}): an installed header includes one that is not installed")
        if src in installed and src not in OP_AUTHOR and hdr in OP_AUTHOR:
            problems.append(f"{where} ({hdr}): a user header includes an op-author header (reach it through "
                            f"tensor/op.h only)")


def check_api(header, problems):
    """An installed user header: no ag__ name in its code (comments may mention them)."""
    text = open(os.path.join(ROOT, header), encoding="utf-8").read()
    code = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    for lineno, line in enumerate(code.split("\n"), 1):
        for name in INTERNAL_NAME.findall(line):
            problems.append(f"{header}:{lineno}: declares or uses {name}: a public header holds the API only "
                            f"(move it to a private header, or to tensor/op.h for op authors)")


def main():
    installed = installed_headers() | {"attograd.h"}
    files = ["attograd.h"]
    for top in SCANNED:
        for folder, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs.sort()
            files += sorted(rel(os.path.join(folder, n)) for n in names if n.endswith(SOURCE_EXT))
    problems = []
    for src in files:
        check_file(src, installed, problems)
    for header in sorted(installed - OP_AUTHOR):
        check_api(header, problems)
    for p in problems:
        print(p)
    if problems:
        print(f"include rules: {len(problems)} violation(s) in {len(files)} files", file=sys.stderr)
        return 1
    print(f"include rules: {len(files)} files ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
