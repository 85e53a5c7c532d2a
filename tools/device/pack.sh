#!/usr/bin/env bash
# Packs what certify_remote_<lane>.sh needs into .devcarry/ (git-ignored): the Bazel-built lanes with
# their evidence, each lane's llama.cpp CTest bundle where it was built (the runner's upstream_ctest
# step), the lane spec, generated protobuf modules, the pinned vocab and the embedded model's
# digest, and wheels for the remote Python (3.12) that it lacks.
#   usage: tools/device/pack.sh [ALIAS ...]   (default: cuda cpu; after bazel build //lanes:<alias>
#          //lanes:<alias>.lane.json //lanes:<alias>_ctest //proto:all //tools/model:tiny_llama_f32)
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=.devcarry
aliases=("$@")
[ ${#aliases[@]} -gt 0 ] || aliases=(cuda cpu)
# Each lane's files are where its manifest says: check them all before packing any.
for alias in "${aliases[@]}"; do
  if [ ! -f "bazel-bin/lanes/$alias.lane.json" ]; then
    echo "pack: bazel-bin/lanes/$alias.lane.json is missing: build //lanes:$alias.lane.json first" \
         "(bazel build //lanes:$alias //lanes:$alias.lane.json)" >&2
    exit 2
  fi
done
rm -rf "$carry"; mkdir -p "$carry/py/proto" "$carry/wheels"
# xz's largest dictionary: the test executables of a CTest bundle share most of their bytes.
export XZ_OPT=-9
# shellcheck source=tools/device/lane_tar.sh
source tools/device/lane_tar.sh
for alias in "${aliases[@]}"; do
  lane_tar "$alias" "$carry/${alias}_lane.tar.xz"
  if [ -d "bazel-bin/lanes/${alias}_ctest" ]; then tar -cJf "$carry/${alias}_ctest.tar.xz" -C bazel-bin/lanes "${alias}_ctest"; fi
done
cp bazel-bin/lanes/spec.json "$carry/"
cp bazel-bin/proto/*_pb2.py "$carry/py/proto/"
cp "$(bazel info output_base 2>/dev/null)/external/llama_cpp/src/models/ggml-vocab-llama-spm.gguf" "$carry/"
sha256sum bazel-bin/tools/model/tiny_llama_f32.gguf | cut -d' ' -f1 > "$carry/tiny_llama_f32.sha256"
for req in protobuf==7.36.2 gguf==0.19.0 absl-py==2.5.1; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$carry/wheels" "$req"
done
du -sh "$carry"
