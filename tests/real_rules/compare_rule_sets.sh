#!/usr/bin/env bash
# Builds targets twice, with the offline stand-ins (this workspace) and with the real
# rules_foreign_cc 0.10.1 + rules_python 0.18.1 (a copy of this workspace whose WORKSPACE points at
# their tagged sources, unpacked outside the repository), and compares the outputs byte for byte.
#
#   tests/real_rules/compare_rule_sets.sh                 the two-stage fixture, and the refusal of
#                                                         an unescaped $ORIGIN by both rule sets
#   tests/real_rules/compare_rule_sets.sh //lanes:cpu     a lane (minutes: two cold builds)
#
# LANES_REAL_RULES: the archive (default ../shared/real-rules/real-rules.tar.xz beside the repo).
# LANES_REAL_RULES_WORK: the copy and its Bazel output base (default ~/.cache/lanes-real-rules).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
archive=${LANES_REAL_RULES:-$root/../shared/real-rules/real-rules.tar.xz}
work=${LANES_REAL_RULES_WORK:-$HOME/.cache/lanes-real-rules}
fixture=//lanes/private/testing/two_stage
if [ $# -gt 0 ]; then targets=("$@"); else targets=("$fixture:greet_stage" "$fixture:user_stage"); fi
if [ ! -f "$archive" ]; then
  echo "compare_rule_sets: $archive not found; set LANES_REAL_RULES to the real-rules.tar.xz archive" >&2
  exit 77  # "not run", as automake's test drivers read it; never a pass
fi

# The real rules, unpacked once per archive.
digest=$(sha256sum "$archive" | cut -c1-16)
if [ ! -f "$work/rules/.unpacked-$digest" ]; then
  rm -rf "$work/rules" && mkdir -p "$work/rules"
  tar -xJf "$archive" -C "$work/rules"
  touch "$work/rules/.unpacked-$digest"
fi

# A copy of this workspace (tracked and untracked-but-not-ignored files) using them.
rm -rf "$work/ws" && mkdir -p "$work/ws"
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$work/ws"
python3 tests/real_rules/use_real_rules.py "$work/ws" "$work/rules"

echo "compare_rule_sets: stand-in build of ${targets[*]}"
bazel build "${targets[@]}"
echo "compare_rule_sets: real-rules build of ${targets[*]} (workspace $work/ws)"
(cd "$work/ws" && bazel build "${targets[@]}")

dirs=()
for target in "${targets[@]}"; do
  pkg=${target#//}; pkg=${pkg%%:*}; name=${target##*:}
  dirs+=("bazel-bin/$pkg/$name" "$work/ws/bazel-bin/$pkg/$name")
done
status=0
python3 tests/real_rules/compare_outputs.py "${dirs[@]}" || status=1

if [ $# -eq 0 ]; then
  # The refusal both rule sets must share: an unescaped $ORIGIN under the build script's set -u.
  for side in stand-in real-rules; do
    dir=$root; [ "$side" = real-rules ] && dir=$work/ws
    log=$(mktemp)
    if (cd "$dir" && bazel build "$fixture:unescaped_origin") >"$log" 2>&1; then
      echo "compare_rule_sets: $side built $fixture:unescaped_origin; it must refuse an unbound \$ORIGIN" >&2
      status=1
    elif grep -q "ORIGIN: unbound variable" "$log"; then
      echo "compare_rule_sets: $side refuses $fixture:unescaped_origin: ORIGIN: unbound variable"
    else
      echo "compare_rule_sets: $side failed $fixture:unescaped_origin for another reason:" >&2
      tail -20 "$log" >&2
      status=1
    fi
    rm -f "$log"
  done
fi
exit "$status"
