#!/usr/bin/env bash
# The vector kernels are chosen at run time from the CPU: what tensor/cpu.c detects (cpu_isa)
# is what /proc/cpuinfo's flags say the CPU runs, AVX-512F before AVX2 with FMA, and generic in
# a build without vector kernels.
# usage: isa_dispatch.sh CPU_ISA_PROGRAM SIMD(true|false)
set -euo pipefail
prog=$1 simd=$2
flags=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -1) "
want=generic
if [ "$simd" = true ]; then
  case $flags in
    *" avx512f "*) want=avx512 ;;
    *" avx2 "*" fma "* | *" fma "*" avx2 "*) want=avx2 ;;
  esac
fi
got=$(env -u AG_ISA "$prog")
[ "$got" = "cpu $want in use $want" ] || { echo "expected 'cpu $want in use $want' from /proc/cpuinfo, got '$got'"; exit 1; }
echo "$got (/proc/cpuinfo agrees)"
