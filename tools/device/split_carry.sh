#!/usr/bin/env bash
# A carry larger than one device call may take (the working tree and carried paths: 64 MiB a call,
# the tree itself ~31 MB) travels in parts, one per call: PARTS_DIR/p0, p1, ... each holding one
# piece of a tar of the given folders and PARTS (the count and the whole stream's sha256).
# On the GPU host, join_carry.sh stashes each part and unpacks once all are there.
#   usage: tools/device/split_carry.sh PARTS_DIR MEGABYTES DIR...
set -euo pipefail
cd "$(dirname "$0")/../.."
parts=$1 mb=$2; shift 2
rm -rf "$parts"; mkdir -p "$parts"
stream=$(mktemp)
tar -cf "$stream" "$@"
sha=$(sha256sum "$stream" | cut -d' ' -f1)
split -b "${mb}000000" -d -a 2 "$stream" "$parts/piece."
rm -f "$stream"
n=$(ls "$parts"/piece.* | wc -l)
i=0
for piece in "$parts"/piece.*; do
  mkdir -p "$parts/p$i"
  mv "$piece" "$parts/p$i/"
  echo "parts=$n sha256=$sha" > "$parts/p$i/PARTS"
  i=$((i + 1))
done
du -sh "$parts"/p*
