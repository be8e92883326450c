#!/usr/bin/env python3
"""The installed library exports the API the installed headers declare, and nothing else.

usage: check_exports.py --build DIR --cc "CC" --lib LIB.so [--lib LIB2.so ...]

The installed headers are the ones meson installs in this build (DIR/meson-info/
intro-installed.json). One translation unit that includes every one of them is compiled with
GCC's -aux-info, which writes out every function the unit declares, with the file and line of
the declaration: the functions declared in the installed headers (static inline ones aside) are
the declared API; extern variables are read from the headers' code. The exported names are
`nm -D --defined-only` of the libraries (the linker's own _init, _fini, _edata, _end,
__bss_start aside, and names with a dot, which no C program can name: the NAME.resolver that
GCC 12 exports for every target_clones function whatever its visibility, and AddressSanitizer's
__odr_asan.NAME beside an exported variable; NAME itself is checked). Fails, naming them, on an exported name no installed header declares (an
internal that escaped the hidden default visibility) and on a declared name no library exports
(a declaration without AG_API, which a program would fail to link). Exit 77 (skipped) when the
compiler is not GCC-compatible enough for -aux-info or nm is missing.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

LINKER_NAMES = {"_init", "_fini", "_edata", "_end", "__bss_start"}
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
# extern T name; extern T name[N]; extern T (*name)(...);
EXTERN_VAR = re.compile(r'\bextern\s+(?!"C")[^;{}]*?(?:\(\s*\*\s*(\w+)\s*\)\s*\([^;]*\)|\b(\w+)\s*(?:\[[^\]]*\])?)\s*;')
AUX_LINE = re.compile(r"^/\* (.+?):(\d+):([A-Z]+) \*/ (.*)$")


def installed_headers(build):
    with open(os.path.join(build, "meson-info", "intro-installed.json"), encoding="utf-8") as f:
        installed = json.load(f)
    return sorted(os.path.realpath(src) for src in installed if src.endswith(".h"))


def declared_functions(cc, headers, build):
    with tempfile.TemporaryDirectory() as tmp:
        unit = os.path.join(tmp, "api.c")
        with open(unit, "w", encoding="utf-8") as f:
            f.writelines(f'#include "{h}"\n' for h in headers)
        aux = os.path.join(tmp, "api.aux")
        cmd = cc + ["-std=c11", "-I", build, "-aux-info", aux, "-c", unit, "-o", os.path.join(tmp, "api.o")]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"check_exports: the installed headers do not compile together:\n{run.stderr}")
        if not os.path.exists(aux):
            print("check_exports: the compiler wrote no -aux-info: skipped")
            sys.exit(77)
        lines = open(aux, encoding="utf-8").read().splitlines()
    wanted = set(headers)
    names = {}
    for line in lines:
        m = AUX_LINE.match(line)
        if not m or os.path.realpath(m.group(1)) not in wanted:
            continue
        decl = m.group(4)
        if re.match(r"(extern\s+)?static\b", decl) or " static " in decl:
            continue
        name = re.search(r"(\w+)\s*\(", decl)
        if name:
            names[name.group(1)] = f"{os.path.relpath(m.group(1))}:{m.group(2)}"
    return names


def declared_variables(headers):
    names = {}
    for h in headers:
        code = COMMENT.sub(" ", open(h, encoding="utf-8").read())
        for m in EXTERN_VAR.finditer(code):
            names[m.group(1) or m.group(2)] = os.path.relpath(h)
    return names


def exported(libs):
    names = set()
    for lib in libs:
        out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 3 and "." not in parts[2].split("@")[0]:
                names.add(parts[2].split("@")[0])
    return names - LINKER_NAMES


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--cc", required=True)
    ap.add_argument("--lib", action="append", required=True)
    args = ap.parse_args()
    if not shutil.which("nm"):
        print("check_exports: no nm: skipped")
        return 77
    headers = installed_headers(args.build)
    declared = declared_functions(shlex.split(args.cc), headers, args.build)
    declared.update(declared_variables(headers))
    have = exported(args.lib)
    escaped = sorted(have - declared.keys())
    missing = sorted(n for n in declared if n not in have)
    for n in escaped:
        print(f"exported but declared by no installed header: {n}")
    for n in missing:
        print(f"declared ({declared[n]}) but not exported: {n}")
    if escaped or missing:
        print(f"check_exports: {len(escaped)} escaped, {len(missing)} missing", file=sys.stderr)
        return 1
    print(f"check_exports: {len(have)} exported names = the {len(declared)} the {len(headers)} installed headers declare")
    return 0


if __name__ == "__main__":
    sys.exit(main())
