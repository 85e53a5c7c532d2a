#!/usr/bin/env bash
# Packs a lane's llama.cpp CTest bundle for a host without Bazel (e.g. the lent H200), into the
# git-ignored .lanes/ctest-carry/<lane>/: the Bazel-built lane with its build evidence, the CTest
# bundle (//lanes:<lane>_ctest: test binaries, CTest files, the source data they read (among them
# the pinned vocab the embedded model is made from), manifest), the generated protobuf module, the
# embedded model's digest, and wheels the remote
# Python (3.12) may lack, ctest itself among them (CMake's PyPI wheel, sha256-pinned: static enough
# to run on any manylinux host).
#
#   usage: tools/ctest/pack_bundle.sh LANE      (after bazel build //lanes:LANE //lanes:LANE.lane.json
#                                                //lanes:LANE_ctest)
set -euo pipefail
cd "$(dirname "$0")/../.."
lane=${1:?usage: pack_bundle.sh LANE (cpu, cuda, vulkan)}
CMAKE_WHEEL=cmake-3.31.6-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
CMAKE_WHEEL_SHA256=1c8b05df0602365da91ee6a3336fe57525b137706c4ab5675498f662ae1dbcec
# The lane's files are where its manifest says (lane_tar reads it, and fails naming what to build).
if [ ! -f "bazel-bin/lanes/$lane.lane.json" ]; then
  echo "pack_bundle: bazel-bin/lanes/$lane.lane.json is missing: build //lanes:$lane.lane.json first" \
       "(bazel build //lanes:$lane //lanes:$lane.lane.json //lanes:${lane}_ctest //proto:ctest_report_py_pb2 //tools/model:tiny_llama_f32)" >&2
  exit 2
fi
for f in "bazel-bin/lanes/${lane}_ctest/manifest.json" bazel-bin/proto/ctest_report_pb2.py bazel-bin/tools/model/tiny_llama_f32.gguf; do
  if [ ! -e "$f" ]; then
    echo "pack_bundle: $f is missing; first run: bazel build //lanes:$lane //lanes:$lane.lane.json //lanes:${lane}_ctest //proto:ctest_report_py_pb2 //tools/model:tiny_llama_f32" >&2
    exit 2
  fi
done
carry=.lanes/ctest-carry/$lane
rm -rf "$carry"; mkdir -p "$carry/py/proto" "$carry/wheels"
# shellcheck source=tools/device/lane_tar.sh
source tools/device/lane_tar.sh
lane_tar "$lane" "$carry/lane.tar.xz"
tar -cJf "$carry/ctest_bundle.tar.xz" -C bazel-bin/lanes "${lane}_ctest"
cp bazel-bin/proto/ctest_report_pb2.py "$carry/py/proto/"
sha256sum bazel-bin/tools/model/tiny_llama_f32.gguf | cut -d' ' -f1 > "$carry/tiny_llama_f32.sha256"
echo "$lane" > "$carry/lane"
# NO_CTEST_WHEEL=1 leaves ctest out (28 MB) for a host whose own ctest (CMake >= 3.20) is used instead.
reqs=(protobuf==7.36.2 absl-py==2.5.1 gguf==0.19.0)
if [ "${NO_CTEST_WHEEL:-0}" != 1 ]; then reqs+=(cmake==3.31.6); fi
for req in "${reqs[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$carry/wheels" "$req"
done
if [ "${NO_CTEST_WHEEL:-0}" != 1 ]; then
  got=$(sha256sum "$carry/wheels/$CMAKE_WHEEL" | cut -d' ' -f1)
  if [ "$got" != "$CMAKE_WHEEL_SHA256" ]; then
    echo "pack_bundle: $CMAKE_WHEEL has sha256 $got, the pin says $CMAKE_WHEEL_SHA256" >&2; exit 1
  fi
fi
du -sh "$carry"
