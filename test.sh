#!/usr/bin/env bash
# The whole test suite: installs missing packages, builds (release) and runs every test.
set -euo pipefail
cd "$(dirname "$0")"
. scripts/common.sh
ag_ensure_packages
ag_build build
ag_test build
