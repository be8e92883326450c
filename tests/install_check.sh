#!/usr/bin/env bash
# What an install hands a user.
# 1. This build installed into a temporary root (meson install --destdir): the README example
#    built against it with pkg-config (warning-free under -Wall -Wextra -Werror) runs and loads
#    no libmpi (ldd), attograd.pc names no MPI, a program of attograd-dist.pc (when built with
#    MPI) does load libmpi; the installed programs carry the library's directory as their run
#    path; attograd-torch --help runs; the corpus and the walkthrough's companion are there.
# 2. With --readme SOURCE_DIR: README.md's install block (the fenced block after the comment
#    naming this script) run as written by bash, from a scratch view of the source tree with HOME
#    a scratch directory: a fresh configure, build and install under $HOME/.local, then the
#    example compiled with pkg-config and the run path, and run. A change to the README's
#    commands or to the install that breaks them fails here.
# Exit 77 (skipped) only when no C compiler is there to build the example.
# usage: install_check.sh BUILD_DIR MESON [--readme SOURCE_DIR]
set -euo pipefail
build=$1 meson=$2
readme_src=""
[ "${3:-}" = --readme ] && readme_src=$4
cc=${CC:-cc}
command -v "$cc" >/dev/null || { echo "no C compiler ($cc): skipped"; exit 77; }
command -v pkg-config >/dev/null || { echo "pkg-config is missing"; exit 1; }
fail() { echo "$*"; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
"$meson" install -C "$build" --no-rebuild --quiet --destdir "$root" >/dev/null
# the prefix and directories the build was configured with
intro=$("$meson" introspect "$build" --buildoptions)
opt() { python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1]))' "$1" <<<"$intro"; }
prefix=$(opt prefix) sanitize=$(opt b_sanitize)
dir() { local d; d=$(opt "$1"); case $d in /*) echo "$d" ;; *) echo "$prefix/$d" ;; esac; }
libdir=$(dir libdir) datadir=$(dir datadir) bindir=$(dir bindir) libexecdir=$(dir libexecdir)
pc=$root$libdir/pkgconfig
test -f "$pc/attograd.pc" || fail "no attograd.pc under $pc"
! grep -qi mpi "$pc/attograd.pc" || fail "attograd.pc names MPI: $(grep -i mpi "$pc/attograd.pc")"
pkgconf() { PKG_CONFIG_PATH=$pc PKG_CONFIG_SYSROOT_DIR=$root pkg-config "$@"; }
flags=$(pkgconf --cflags --libs attograd)
case " $flags " in *" -fopenmp "*) ;; *) fail "pkg-config flags lack -fopenmp: $flags" ;; esac
# a library built with sanitizers needs their runtime in the program (first in its libraries)
san=""
[ "$sanitize" = none ] || san="-fsanitize=$sanitize"

example=$root$datadir/doc/attograd/examples/readme_example.c
test -f "$example" || fail "the README example is not installed ($example)"
# shellcheck disable=SC2086  # flags are words
"$cc" -std=c11 -Wall -Wextra -Werror -o "$root/readme_example" "$example" $san $flags
LD_LIBRARY_PATH=$root$libdir "$root/readme_example" >"$root/out.txt"
grep -q '^gradcheck: ok$' "$root/out.txt" || { echo "the example ran but said:"; cat "$root/out.txt"; exit 1; }
# a user's GRU seq2seq trained and decoded with nn/decode, built against the installed headers
# shellcheck disable=SC2086  # flags are words
"$cc" -std=c11 -Wall -Wextra -Werror -o "$root/user_seq2seq" "$(dirname "$0")/user_seq2seq.c" $san $flags
LD_LIBRARY_PATH=$root$libdir "$root/user_seq2seq" >"$root/seq2seq.txt" ||
  { echo "user_seq2seq against the installed headers failed:"; cat "$root/seq2seq.txt"; exit 1; }
# a program of attograd alone does not load MPI; one of attograd-dist does (the witness that
# ldd would show it)
loads_mpi() { local libs; libs=$(LD_LIBRARY_PATH=$root$libdir ldd "$1"); grep -q 'libmpi\.so' <<<"$libs"; }
! loads_mpi "$root/readme_example" || fail "the README example loads libmpi: $(LD_LIBRARY_PATH=$root$libdir ldd "$root/readme_example" | grep mpi)"
dist="no attograd-dist (built without MPI)"
if [ -f "$pc/attograd-dist.pc" ]; then
  printf '#include "attograd.h"\n#include "nn/dist/dist.h"\nint main(void) { return ag_dist_size() == 1 ? 0 : 1; }\n' >"$root/dist.c"
  # shellcheck disable=SC2046
  "$cc" -std=c11 -Wall -Wextra -Werror -o "$root/dist" "$root/dist.c" $san $(pkgconf --cflags --libs attograd-dist)
  loads_mpi "$root/dist" || fail "a program of attograd-dist.pc does not load libmpi"
  LD_LIBRARY_PATH=$root$libdir "$root/dist" || fail "the attograd-dist program failed"
  dist="a program of attograd-dist loads libmpi"
fi
# installed programs find the library where it is installed (their RUNPATH)
for p in "$bindir/attograd-translate" "$bindir/attograd-parity" "$libexecdir/attograd/mha_walkthrough"; do
  runpath=$(readelf -d "$root$p" | sed -n 's/.*R\(UN\)\?PATH.*\[\(.*\)\]/\2/p')
  case ":$runpath:" in *":$libdir:"*) ;; *) fail "$p's run path '$runpath' lacks $libdir" ;; esac
done
test -f "$root$datadir/attograd/num-en-fr/train.tsv" || fail "the corpus is not installed"
test -x "$root$libexecdir/attograd/mha_walkthrough_torch.py" || fail "mha_walkthrough_torch.py is not installed"
"$root$bindir/attograd-torch" --help >"$root/help.txt" || fail "attograd-torch --help failed"
grep -q 'to-torch' "$root/help.txt" || { echo "attograd-torch --help says:"; cat "$root/help.txt"; exit 1; }
echo "installed under $root$prefix: README example and user_seq2seq built with pkg-config and ran (gradcheck ok)," \
     "no libmpi in it or in attograd.pc; $dist; run paths $libdir; attograd-torch --help ok"

[ -n "$readme_src" ] || exit 0
block=$(awk '/<!-- tests\/install_check.sh runs this block/ { f = 1; next }
             f && /^```sh$/ { inb = 1; next }
             inb && /^```$/ { exit }
             inb { print }' "$readme_src/README.md")
[ -n "$block" ] || fail "README.md has no install block after '<!-- tests/install_check.sh runs this block'"
# the source tree without its build directories, a fresh HOME, nothing of this build in the
# environment (meson test sets LD_LIBRARY_PATH to it)
view=$root/clone home=$root/home
mkdir -p "$view" "$home"
for f in "$readme_src"/*; do
  case ${f##*/} in build*) ;; *) ln -s "$f" "$view/" ;; esac
done
(cd "$view" && env -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH HOME="$home" bash -euo pipefail -c "$block") \
  >"$root/readme.log" 2>&1 || { echo "README.md's install block failed:"; tail -30 "$root/readme.log"; exit 1; }
grep -q '^gradcheck: ok$' "$root/readme.log" || { echo "README.md's install block ran but said:"; tail -30 "$root/readme.log"; exit 1; }
test -f "$home/.local/include/attograd/attograd.h" || fail "the README's install put no attograd.h under \$HOME/.local"
echo "README.md's install block, run as written with HOME=$home: installed, built, ran (gradcheck ok)"
