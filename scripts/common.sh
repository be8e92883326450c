# Shared by run.sh, test.sh and .ci/run: install what is missing, configure, build.
# Sourced, not run.

AG_PACKAGES=(gcc meson ninja-build pkg-config libopenblas-dev libhdf5-dev libcmocka-dev g++ libsentencepiece-dev)

# Install the Debian packages that are not installed yet (apt-get only when something is missing).
ag_ensure_packages() {
    local missing=()
    for p in "${AG_PACKAGES[@]}" "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "attograd: installing ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# Configure dir $1 (default build) with the remaining arguments if needed, then build it.
ag_build() {
    local dir="${1:-build}"
    shift || true
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" "$@" >&2
    fi
    ninja -C "$dir" >&2
}

# Run the suite in dir $1 and print one closing line "N passed, N failed" counting every test
# case (cmocka's and the parity runner's), then return the suite's status.
ag_test() {
    local dir="${1:-build}" status=0
    meson test -C "$dir" --print-errorlogs --num-processes 2 || status=$?
    python3 scripts/summarize.py "$dir"
    return "$status"
}
