#!/usr/bin/env bash
# Packs the pinned, patched llama.cpp tree (as Bazel's @llama_cpp has it) into .devcarry-src/ for a
# GPU host without Bazel that builds the upstream-default reference there (bench_remote_cuda.sh):
# only what configuring and building llama-bench needs (no docs, models, tests, examples).
set -euo pipefail
cd "$(dirname "$0")/../.."
src="$(bazel info output_base 2>/dev/null)/external/llama_cpp/src"
rm -rf .devcarry-src; mkdir -p .devcarry-src
tar -cJf .devcarry-src/llama_src.tar.xz -C "$src" CMakeLists.txt cmake common ggml include licenses src tools vendor
cp bazel-bin/lanes/spec.json .devcarry-src/  # upstream_reference: the cache entries to configure with
du -sh .devcarry-src
