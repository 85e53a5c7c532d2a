#!/usr/bin/env bash
# A mixed route binds to each lane's certification run, and a run names its lane by the digest of
# the build evidence it ran with. To measure a route beside a committed run of the other lane, that
# lane travels with the committed run's build evidence, not with this checkout's rebuild of it
# (same artifacts, another build time and host). This repacks a lane tarball (lane_tar.sh) with a
# committed run's build_evidence.{pb,json} after checking that the tarball's files are exactly the
# artifacts that evidence lists, byte for byte; any other file, a missing one or a digest that
# differs refuses, and nothing is written.
#   usage: tools/device/rebind_lane_tar.sh LANE_TAR COMMITTED_RUN_DIR OUT_TAR
set -euo pipefail
lane_tar=$1 run_dir=$2 out=$3
for f in "$lane_tar" "$run_dir/build_evidence.pb" "$run_dir/build_evidence.json"; do
  [ -f "$f" ] || { echo "rebind_lane_tar: no file $f" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xJf "$lane_tar" -C "$work"
alias=$(cd "$work" && ls ./*.evidence.pb | sed 's#^\./##; s#\.evidence\.pb$##')
[ "$(echo "$alias" | wc -l)" = 1 ] || { echo "rebind_lane_tar: $lane_tar holds not one lane" >&2; exit 2; }
# The JSON twin, not the .pb: this host's python3 has no protobuf (as lane_tar.sh reads the manifest).
PYTHONPATH="$(cd "$(dirname "$0")/../.." && pwd)" python3 - "$work" "$alias" "$run_dir/build_evidence.json" <<'PY'
import json
import os
import pathlib
import sys

from tools.core.digest import sha256_file

root, alias, evidence_path = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
listed = {a["path"]: (a["sha256"], int(a["size"])) for a in json.load(open(evidence_path))["artifacts"]}
lane_dir = root / alias
found = {str(p.relative_to(lane_dir)): p for p in lane_dir.rglob("*") if p.is_file() or p.is_symlink()}
problems = [f"{path}: in the tarball, not in {evidence_path}" for path in sorted(set(found) - set(listed))]
problems += [f"{path}: listed in {evidence_path}, not in the tarball" for path in sorted(set(listed) - set(found))]
for path in sorted(set(found) & set(listed)):
    if (sha256_file(found[path]), os.path.getsize(found[path])) != listed[path]:
        problems.append(f"{path}: not the bytes {evidence_path} lists")
if problems:
    sys.exit("rebind_lane_tar: refused:\n  " + "\n  ".join(problems))
print(f"rebind_lane_tar: {len(listed)} of {len(listed)} artifacts are the committed run's bytes")
PY
cp "$run_dir/build_evidence.pb" "$work/$alias.evidence.pb"
cp "$run_dir/build_evidence.json" "$work/$alias.evidence.json"
tar -cJf "$out.tmp" -C "$work" "$alias.evidence.pb" "$alias.evidence.json" "$alias"
mv "$out.tmp" "$out"
echo "rebind_lane_tar: $out carries $(sha256sum "$run_dir/build_evidence.pb" | cut -c1-16)… as $alias.evidence.pb"
