#!/usr/bin/env bash
# Packs what certify_remote_vulkan.sh and bench_remote.sh need beyond pack.sh's carry into
# .devcarry-vulkan/ (git-ignored): the Bazel-built Vulkan lane with its evidence, and the lane's own
# Vulkan SDK lock's .debs, each checked against it: the loader (GPU hosts often have the driver's ICD
# but no loader) and the headers, glslc and SPIRV-Headers the upstream-default reference builds with.
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=.devcarry-vulkan
rm -rf "$carry"; mkdir -p "$carry/debs"
export XZ_OPT=-9
# shellcheck source=tools/device/lane_tar.sh
source tools/device/lane_tar.sh
lane_tar vulkan "$carry/vulkan_lane.tar.xz"
# The Vulkan lane's llama.cpp CTest bundle, for the runner's upstream_ctest step.
tar -cJf "$carry/vulkan_ctest.tar.xz" -C bazel-bin/lanes vulkan_ctest
# Each .deb exactly as the SDK lock pins it (version and sha256), through the host's apt.
grep -v '^#' toolchains/vulkan/vulkan_sdk_lock.txt | while read -r pkg version arch sha; do
  (cd "$carry/debs" && apt-get download -q "$pkg=$version" >/dev/null)
  echo "$sha  $(ls "$carry"/debs/"${pkg}"_*_"$arch".deb)" | sha256sum -c --quiet -
done
# NVIDIA's Vulkan ICD needs glvnd on the GPU host: those packages too, as tools/device pins them.
mkdir -p "$carry/gl"
grep -v '^#' tools/device/gl_dispatch_lock.txt | while read -r pkg version arch sha; do
  (cd "$carry/gl" && apt-get download -q "$pkg=$version" >/dev/null)
  echo "$sha  $carry/gl/${pkg}_${version}_${arch}.deb" | sha256sum -c --quiet -
done
du -sh "$carry"
