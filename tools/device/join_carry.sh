#!/usr/bin/env bash
# On the GPU host: stashes one part of a split carry (split_carry.sh) in /tmp/lanes-stash/parts-NAME;
# once every part is there, checks the whole stream's sha256 and unpacks it into
# /tmp/lanes-stash/NAME (default: carry). Exit 0 when unpacked, 10 while parts are missing, 1 on a
# bad stream. Carries of different NAMEs (the lanes, the models) are stashed side by side.
#   usage: tools/device/join_carry.sh PART_DIR [NAME]
set -euo pipefail
part=$1 name=${2:-carry}
stash=/tmp/lanes-stash/parts-$name dest=/tmp/lanes-stash/$name
mkdir -p "$stash"
read -r n sha < <(sed 's/parts=\([0-9]*\) sha256=\([0-9a-f]*\)/\1 \2/' "$part/PARTS")
if [ -f "$stash/PARTS" ] && ! cmp -s "$stash/PARTS" "$part/PARTS"; then
  echo "join_carry: $part belongs to another carry than the parts stashed here; starting over" >&2
  rm -rf "$stash"; mkdir -p "$stash"
fi
cp "$part/PARTS" "$part"/piece.* "$stash/"
have=$(ls "$stash"/piece.* | wc -l)
if [ "$have" -lt "$n" ]; then echo "join_carry: $have of $n parts stashed"; exit 10; fi
got=$(cat "$stash"/piece.* | sha256sum | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then echo "join_carry: joined stream sha256 $got, expected $sha" >&2; exit 1; fi
rm -rf "$dest"; mkdir -p "$dest"
cat "$stash"/piece.* | tar -xf - -C "$dest"
echo "join_carry: $n parts joined (sha256 $sha) into $dest"
