#!/usr/bin/env bash
# Sourced by the pack scripts. lane_tar ALIAS OUT: a tarball of the lane that the lane's manifest
# (bazel-bin/lanes/ALIAS.lane.json, tools/evidence/lane_manifest.py) names, holding exactly the
# artifacts its build evidence lists, and the evidence; paths inside are relative to the directory
# that holds the lane directory (ALIAS/..., ALIAS.evidence.pb), as the remote scripts unpack them.
# bazel-bin keeps files an earlier build of the lane declared (e.g. a library the lane no longer
# ships); they must not travel as the lane.
lane_tar() {
  local alias=$1 out=$2 list base
  list=$(mktemp)
  if ! base=$(python3 - "$alias" "$list" <<'PY'
import json
import sys

sys.path.insert(0, ".")
from tools.evidence import lane_manifest

alias, list_path = sys.argv[1], sys.argv[2]
try:
    lane = lane_manifest.load_built(alias)
except lane_manifest.LaneManifestError as err:
    sys.exit(f"lane_tar: {err}")
base = lane.lane_dir.parent
if lane.evidence.parent != base or lane.evidence_json.parent != base:
    sys.exit(f"lane_tar: {lane.path} puts the evidence outside {base}, beside which the lane travels")
members = [lane.evidence.name, lane.evidence_json.name]
try:
    evidence = json.loads(lane.evidence_json.read_text())
except (OSError, ValueError) as err:
    sys.exit(f"lane_tar: {lane.evidence_json}: no readable build evidence ({err}); build //lanes:{alias} first")
members += [f"{lane.lane_dir.name}/{artifact['path']}" for artifact in evidence["artifacts"]]
with open(list_path, "w") as f:
    f.write("".join(m + "\n" for m in members))
print(base)
PY
  ); then
    rm -f "$list"
    return 2
  fi
  tar -cJf "$out" -C "$base" -T "$list"
  rm -f "$list"
}
