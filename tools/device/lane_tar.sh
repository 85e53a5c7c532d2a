#!/usr/bin/env bash
# Sourced by the pack scripts. lane_tar ALIAS OUT: a tarball of bazel-bin/lanes/ALIAS holding exactly
# the artifacts its build evidence lists, and the evidence. bazel-bin keeps files an earlier build
# of the lane declared (e.g. a library the lane no longer ships); they must not travel as the lane.
lane_tar() {
  local alias=$1 out=$2 list
  list=$(mktemp)
  python3 - "$alias" > "$list" <<'PY'
import json, sys
alias = sys.argv[1]
evidence = json.load(open(f"bazel-bin/lanes/{alias}.evidence.json"))
print(f"{alias}.evidence.pb")
print(f"{alias}.evidence.json")
for artifact in evidence["artifacts"]:
    print(f"{alias}/{artifact['path']}")
PY
  tar -cJf "$out" -C bazel-bin/lanes -T "$list"
  rm -f "$list"
}
