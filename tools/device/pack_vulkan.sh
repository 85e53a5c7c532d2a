#!/usr/bin/env bash
# Packs what certify_remote_vulkan.sh needs beyond pack.sh's carry into .devcarry-vulkan/
# (git-ignored): the Bazel-built Vulkan lane with its evidence, and the pinned Vulkan loader
# (libvulkan1, the .deb of the lane's own SDK lock, checked against it), since GPU hosts often have
# the driver's ICD but no loader.
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=.devcarry-vulkan
rm -rf "$carry"; mkdir -p "$carry/debs"
tar -cJf "$carry/vulkan_lane.tar.xz" -C bazel-bin/lanes vulkan vulkan.evidence.pb vulkan.evidence.json
deb=$(ls "$(bazel info output_base 2>/dev/null)"/external/vulkan_sdk/debs/libvulkan1_*.deb 2>/dev/null | head -1 || true)
if [ -n "$deb" ]; then cp "$deb" "$carry/debs/"; else (cd "$carry/debs" && apt-get download libvulkan1=1.3.239.0-1); fi
du -sh "$carry"
