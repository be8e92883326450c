#!/bin/sh
# Makes git use scripts/hooks/ for this clone: commit-msg refuses subjects over 72 characters.
set -eu
cd "$(dirname "$0")/.."
git config core.hooksPath scripts/hooks
echo "git hooks: scripts/hooks (commit-msg)"
