#!/usr/bin/env bash
# Set-up and main job: installs the Debian packages that are missing, builds (release) and trains
# the toy translation model (English number words -> French) with the default settings, ending
# with test-set accuracy, sample translations and the paths of the checkpoint and pictures.
# Extra arguments go to `attograd-translate train` (e.g. --model gru, --threads 2, --steps 2000).
set -euo pipefail
cd "$(dirname "$0")"
. scripts/common.sh
ag_ensure_packages
ag_build build -- examples/translate/attograd-translate # only what the run needs: ./test.sh builds the rest
data=examples/translate/data/num-en-fr
exec build/examples/translate/attograd-translate train --train "$data/train.tsv" --test "$data/test.tsv" \
    --out runs/num-en-fr "$@"
