#!/usr/bin/env bash
# On a GPU host: makes the synthetic models the GPU certification and bench need (the embedded model,
# the 4 GB F16 roofline model, the 7B-shaped Q4_0 bench model) into /tmp/lanes-stash/models ahead of
# the runs that use them (each is kept while its digest holds), e.g. as a detached job while later
# device commands still carry the rest.
#   usage: make_models_remote.sh CARRY_DIR   (tools/device/pack.sh's folder: the vocab, the wheels)
set -euo pipefail
carry=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/lanes-models.XXXXXX)
# shellcheck source=tools/device/remote_setup.sh
source "$repo/tools/device/remote_setup.sh"
lanes_remote_python
lanes_remote_models
lanes_remote_bench_models
ls -la "$models"
