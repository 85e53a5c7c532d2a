#!/usr/bin/env bash
# The committed evidence (raw logits of every run: hundreds of MB) is larger than what one device
# call may send with the working tree (64 MiB, carried parts included), and nothing on a GPU host
# reads it. Parking moves it outside the checkout for the calls; restoring puts it back.
#   usage: tools/device/park_evidence.sh park|restore   (PARK_DIR, default /tmp/lanes-parked-evidence)
set -euo pipefail
cd "$(dirname "$0")/../.."
park=${PARK_DIR:-/tmp/lanes-parked-evidence}
folders=(runs bench amx compat)
case "${1:-}" in
park)
  [ ! -e "$park" ] || { echo "park_evidence: $park exists (an earlier park not restored?): restore it first" >&2; exit 2; }
  mkdir -p "$park"
  for f in "${folders[@]}"; do [ ! -d "evidence/$f" ] || mv "evidence/$f" "$park/$f"; done
  echo "parked evidence/{${folders[*]}} in $park; restore with: tools/device/park_evidence.sh restore"
  ;;
restore)
  [ -d "$park" ] || { echo "park_evidence: nothing parked in $park" >&2; exit 2; }
  for f in "${folders[@]}"; do
    if [ -d "$park/$f" ]; then
      [ ! -e "evidence/$f" ] || { echo "park_evidence: evidence/$f exists beside the parked one: resolve by hand" >&2; exit 2; }
      mv "$park/$f" "evidence/$f"
    fi
  done
  rmdir "$park"
  git status --short evidence | head -n 5
  ;;
*) echo "usage: tools/device/park_evidence.sh park|restore" >&2; exit 2 ;;
esac
