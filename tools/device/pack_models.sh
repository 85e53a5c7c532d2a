#!/usr/bin/env bash
# Packs locked models from the model store into .devcarry-models/ for certification on a GPU host
# (certify_remote_cuda.sh MODEL ...). Each file is checked against the model lock before it travels:
# the remote run names it by its sha256, and a wrong file would only fail there.
#   usage: tools/device/pack_models.sh MODEL_NAME ...   (names from third_party/models/models.lock.json;
#          the store: $LANES_MODEL_STORE, default /srv/models)
set -euo pipefail
cd "$(dirname "$0")/../.."
store=${LANES_MODEL_STORE:-/srv/models}
rm -rf .devcarry-models; mkdir -p .devcarry-models
for name in "$@"; do
  bazel run //tools/model:install_model -- --model="$name" --model_store="$store" --verify_only
  cp "$store/$name.gguf" .devcarry-models/
done
du -sh .devcarry-models
