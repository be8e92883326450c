#!/usr/bin/env bash
# Set-up and main job: installs the Debian packages that are missing, builds (release) and runs
# the multi-head attention walkthrough on "cat catches mouse".
set -euo pipefail
cd "$(dirname "$0")"
. scripts/common.sh
ag_ensure_packages
ag_build build
exec build/examples/mha_walkthrough "$@"
