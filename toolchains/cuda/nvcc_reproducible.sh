#!/usr/bin/env bash
# CMAKE_CUDA_COMPILER_LAUNCHER of the CUDA lanes: runs nvcc as CMake asks, so that one source gives
# the same object wherever and whenever it is built. Without it nvcc leaks the build into the bytes
# three ways: its intermediate files are named after its process id (the host object keeps that
# name), __FILE__ holds the action's sandbox path, and the ids of internal-linkage entities (CCCL's
# and any anonymous namespace's, in host and device code alike) hash the source's absolute path.
# Must be called as <exec root>/toolchains/cuda/nvcc_reproducible.sh NVCC ARGS...; a compile whose
# source it cannot place under that root is refused, since its object would depend on where it was
# built.
set -euo pipefail
self=toolchains/cuda/nvcc_reproducible.sh
root=${0%/"$self"}
fail() { echo "nvcc_reproducible.sh: $*" >&2; exit 2; }
if [ "$root" = "$0" ] || [ -z "$root" ]; then
  fail "called as $0; CMAKE_CUDA_COMPILER_LAUNCHER must name it as <exec root>/$self"
fi
# nvcc splits -Xcompiler and -Xcudafe values at commas.
case "$root" in *,*) fail "the exec root $root holds a comma, which nvcc would split" ;; esac
[ $# -ge 1 ] || fail "usage: nvcc_reproducible.sh NVCC ARGS..."
args=("$@")
source="" compiles=0
for ((i = 1; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -c | -dc | --compile | --device-c) ((i + 1 < ${#args[@]})) && source=${args[i + 1]} ;;
    -x | --x) ((i + 1 < ${#args[@]})) && [ "${args[i + 1]}" = cu ] && compiles=1 ;;
  esac
done
if [ -z "$source" ]; then
  # Only a CUDA compile makes an object; anything else (a version query, a link) passes through.
  [ "$compiles" = 0 ] || fail "a CUDA compile (-x cu) without -c/-dc SOURCE: cannot make its object reproducible"
  exec "${args[@]}"
fi
case "$source" in /*) ;; *) source=$PWD/$source ;; esac
case "$source" in
  *,*) fail "$source: a comma in a CUDA source's path cannot reach cudafe++ intact" ;;
  "$root"/*) ;;
  *) fail "$source is not under the build's exec root $root: its object would depend on where it was built" ;;
esac
# -objtemp: intermediate files named after the object; the prefix map reaches the host compiler's
# passes for host and device code; cudafe++ hashes the path it is given instead of the absolute one.
exec "${args[@]}" -objtemp "-Xcompiler=-ffile-prefix-map=$root=." -Xcudafe "--orig_src_path_name=${source#"$root"/}"
