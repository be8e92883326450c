#!/usr/bin/env bash
# meson install into a temporary root, then the README example built against the installed
# tree with pkg-config (warning-free under -Wall -Wextra -Werror) and run; the installed
# programs carry the library's install path as their run path. Exit 77 (skipped) only when no
# C compiler is there to build the example.
# usage: install_check.sh BUILD_DIR MESON
set -euo pipefail
build=$1 meson=$2
cc=${CC:-cc}
command -v "$cc" >/dev/null || { echo "no C compiler ($cc): skipped"; exit 77; }
command -v pkg-config >/dev/null || { echo "pkg-config is missing"; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
"$meson" install -C "$build" --no-rebuild --quiet --destdir "$root" >/dev/null
# the prefix and libdir the build was configured with
intro=$("$meson" introspect "$build" --buildoptions)
opt() { python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1]))' "$1" <<<"$intro"; }
prefix=$(opt prefix) libdir=$(opt libdir) datadir=$(opt datadir) bindir=$(opt bindir) sanitize=$(opt b_sanitize)
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
case $datadir in /*) ;; *) datadir=$prefix/$datadir ;; esac
case $bindir in /*) ;; *) bindir=$prefix/$bindir ;; esac
pc=$root$libdir/pkgconfig
test -f "$pc/attograd.pc" || { echo "no attograd.pc under $pc"; exit 1; }
flags=$(PKG_CONFIG_PATH=$pc PKG_CONFIG_SYSROOT_DIR=$root pkg-config --cflags --libs attograd)
case " $flags " in *" -fopenmp "*) ;; *) echo "pkg-config flags lack -fopenmp: $flags"; exit 1 ;; esac
example=$root$datadir/doc/attograd/examples/readme_example.c
test -f "$example" || { echo "the README example is not installed ($example)"; exit 1; }
# a library built with sanitizers needs their runtime in the program (first in its libraries)
[ "$sanitize" = none ] || flags="-fsanitize=$sanitize $flags"
# shellcheck disable=SC2086  # flags are words
"$cc" -std=c11 -Wall -Wextra -Werror -o "$root/readme_example" "$example" $flags
LD_LIBRARY_PATH=$root$libdir "$root/readme_example" >"$root/out.txt"
grep -q '^gradcheck: ok$' "$root/out.txt" || { echo "the example ran but said:"; cat "$root/out.txt"; exit 1; }
# installed programs find the library where it is installed (their RUNPATH)
runpath=$(readelf -d "$root$bindir/attograd-translate" | sed -n 's/.*R\(UN\)\?PATH.*\[\(.*\)\]/\2/p')
case ":$runpath:" in *":$libdir:"*) ;; *) echo "attograd-translate's run path '$runpath' lacks $libdir"; exit 1 ;; esac
test -f "$root$datadir/attograd/num-en-fr/train.tsv" || { echo "the corpus is not installed"; exit 1; }
echo "installed under $root$prefix: README example built with pkg-config and ran (gradcheck ok);" \
     "attograd-translate's run path $runpath"
