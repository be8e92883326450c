# Shared by run.sh, test.sh and .ci/run: install what is missing, configure, build.
# Sourced, not run.

AG_PACKAGES=(gcc meson ninja-build pkg-config libopenblas-dev libhdf5-dev libcmocka-dev g++ libsentencepiece-dev)

# Install the Debian packages that are not installed yet (apt-get only when something is missing).
ag_ensure_packages() {
    local missing=() installed
    # one dpkg-query for all of them: "name status" per line, a package it does not know absent
    installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${AG_PACKAGES[@]}" "$@" 2>/dev/null || true)
    for p in "${AG_PACKAGES[@]}" "$@"; do
        grep -qx "$p install ok installed" <<<"$installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "attograd: installing ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# Configure dir $1 (default build) with the remaining arguments if needed, then build it: all of
# it, or the ninja targets given after a `--` (ag_build build -- examples/translate/attograd-translate).
ag_build() {
    local dir="${1:-build}" setup=() targets=()
    shift || true
    while [ $# -gt 0 ] && [ "$1" != -- ]; do setup+=("$1"); shift; done
    [ $# -gt 0 ] && shift && targets=("$@")
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" "${setup[@]}" >&2
    fi
    ninja -C "$dir" "${targets[@]}" >&2
}

# Run the suite in dir $1 and print one closing line "N passed, N failed" counting every test
# case (cmocka's and the parity runner's), then return the suite's status.
ag_test() {
    local dir="${1:-build}" status=0
    meson test -C "$dir" --print-errorlogs --num-processes 2 || status=$?
    python3 scripts/summarize.py "$dir"
    return "$status"
}
