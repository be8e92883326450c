#!/usr/bin/env python3
"""The default build holds no instruction beyond x86-64's baseline (SSE2) outside the code chosen
at run time: the vector kernel files (named avx2*/avx512*, each function compiled for its set by
a target attribute, tensor/cpu.c picks the table) and the variants of a target_clones function
(foo.fma beside foo.default, picked by the loader through an ifunc). Every other function of the
given objects is disassembled and searched for AVX/AVX-512/FMA mnemonics and registers and for
the instructions of SSE3 to SSE4.2, POPCNT, LZCNT, BMI1/2, MOVBE and ADX. The kernel objects
must show their instructions to the same search, so that the check is seen to find them.

usage: baseline_isa.py OBJDUMP DIR...   (the targets' object directories, NAME.p)"""
import pathlib
import re
import subprocess
import sys

BEYOND = re.compile(r"""^(
    v\w+ | k\w+                                              # AVX, AVX2, FMA, F16C, AVX-512; mask registers
  | addsubp[sd] | h(add|sub)p[sd] | movddup | movs[hl]dup | lddqu | fisttp\w*              # SSE3
  | pshufb | ph(add|sub)(w|d|sw) | pmaddubsw | pmulhrsw | psign[bwd] | pabs[bwd] | palignr  # SSSE3
  | blendv?p[sd] | pblendvb | pblendw | dpp[sd] | extractps | insertps | pextr[bdq] | pinsr[bdq]
  | pmins[bd] | pmaxs[bd] | pminu[wd] | pmaxu[wd] | pmulld | pmuldq | ptest | round[ps][sd]
  | pcmpeqq | packusdw | pmov[sz]x\w+ | movntdqa | mpsadbw | phminposuw                    # SSE4.1
  | pcmpgtq | pcmp[ei]str[im] | crc32[bwlq]?                                                # SSE4.2
  | (popcnt | lzcnt | tzcnt | andn | bextr | blsi | blsmsk | blsr | bzhi | mulx | pdep | pext
     | rorx | sarx | shlx | shrx | movbe | adcx | adox)[wlq]?
)$""", re.X)
WIDE_REG = re.compile(r"%([yz]mm\d+|k[0-7])\b")
FUNC = re.compile(r"^[0-9a-f]+ <(.+)>:$")
INSN = re.compile(r"^\s+[0-9a-f]+:\s+(.*)$")
KERNEL_FILE = re.compile(r"(^|_)avx(2|512)")
CLONE_PART = re.compile(r"^(fma|avx\w*|sse\w*|popcnt|bmi\w*|arch_\w+)$")


def beyond(insn):
    """the first token of insn past the baseline, or None"""
    reg = WIDE_REG.search(insn)
    if reg:
        return reg.group(0)
    for tok in insn.split():
        if tok.startswith(("%", "$", "<", "(", "*", "#")) or "," in tok or tok[0].isdigit():
            break  # the operands
        if BEYOND.match(tok):
            return tok
    return None


def functions(objdump, obj):
    """{function: [instruction text]} of an object file"""
    out = subprocess.run([objdump, "-d", "-w", "--no-show-raw-insn", str(obj)], check=True,
                         capture_output=True, text=True).stdout
    funcs, cur = {}, None
    for line in out.splitlines():
        m = FUNC.match(line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
        elif cur is not None and (m := INSN.match(line)):
            cur.append(m.group(1))
    return funcs


def main():
    objdump, dirs = sys.argv[1], sys.argv[2:]
    objs = sorted(o for d in dirs for o in pathlib.Path(d).glob("*.o"))
    if not objs:
        print(f"no object files in {' '.join(dirs)}")
        return 1
    bad, kernels, clones, checked = [], 0, 0, 0
    for obj in objs:
        funcs = functions(objdump, obj)
        if KERNEL_FILE.search(obj.name):
            kernels += 1
            if not any(beyond(i) for f in funcs.values() for i in f):
                bad.append(f"{obj.name}: a kernel file, yet no AVX instruction found: is the search blind?")
            continue
        for name, insns in funcs.items():
            if any(CLONE_PART.match(p) for p in name.split(".")[1:]):
                clones += 1
                continue
            checked += 1
            hit = next((i for i in insns if beyond(i)), None)
            if hit:
                bad.append(f"{obj.name}: {name}: {hit}")
    if bad:
        print("beyond x86-64's baseline outside the run-time dispatch:")
        print("\n".join(bad[:40]))
        return 1
    print(f"{len(objs) - kernels} objects, {checked} functions: x86-64 baseline only "
          f"({kernels} kernel objects and {clones} target_clones variants chosen at run time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
