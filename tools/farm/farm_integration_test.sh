#!/usr/bin/env bash
# Farm integration test (issue 10), run by .ci/run after `bazel test //...`: a real remote-execution
# engine on loopback (tools/farm/farm.sh: BuildGrid + PostgreSQL + fixture workers) and Bazel 4.2.3.
#   1. `bazel build //lanes:cpu --config=farm-loopback` runs the CMake stages on the CPU-pool worker
#      (Bazel's summary counts them as `remote`);
#   2. a second, clean output base (a second "machine") is served from the remote cache: `remote cache
#      hit`, no worker runs anything, and the lane's artifacts are byte-identical;
#   3. the GPU-pool probe lands only on the GPU-pool worker, the CPU-pool probe only on the CPU one;
#   4. with the GPU-pool worker stopped, the GPU-pool probe fails with the engine's queue-timeout
#      message within a bound and runs nowhere else.
# Not a Bazel test: it drives Bazel itself (two output bases of its own; it never touches the default
# output base or the workspace's bazel-* links). Prints timings and one PASS/FAIL line.
set -uo pipefail
cd "$(dirname "$0")/../.."

WORK=${LANES_FARM_TEST_DIR:-/tmp/lanes-farm-test}
export LANES_FARM_DIR=$WORK/farm
OB1=$WORK/ob1
OB2=$WORK/ob2
REFUSAL_BOUND_S=${LANES_FARM_REFUSAL_BOUND_S:-90}
FLAGS=(--config=farm-loopback --symlink_prefix=/)
LOGS=$WORK/logs

fail() { echo "farm_integration_test: FAIL: $*"; exit 1; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }
executed() { cat "$LANES_FARM_DIR"/*-worker.log 2>/dev/null | grep -c ' executed ' || true; }

cleanup() {
  # LANES_FARM_TEST_KEEP_FARM=1 (.ci/run): the engine and its action cache stay up for the caller,
  # which stops them; the two output bases go either way.
  [ "${LANES_FARM_TEST_KEEP_FARM:-0}" = 1 ] || bash tools/farm/farm.sh stop --purge >/dev/null 2>&1 || true
  for ob in "$OB1" "$OB2"; do
    [ -d "$ob" ] && bazel --output_base="$ob" shutdown >/dev/null 2>&1 || true
  done
  rm -rf "$OB1" "$OB2"
}
# LANES_FARM_TEST_KEEP=1 leaves the farm and output bases up for a look (stop: LANES_FARM_DIR=<dir>/farm tools/farm/farm.sh stop --purge).
[ "${LANES_FARM_TEST_KEEP:-0}" = 1 ] || trap cleanup EXIT

rm -rf "$WORK"; mkdir -p "$LOGS"
t=$(now)
bash tools/farm/setup_farm.sh || fail "setup_farm.sh failed"
setup_s=$(since "$t")
t=$(now)
bash tools/farm/farm.sh start || fail "farm did not start"
start_s=$(since "$t")

# Builds //lanes:cpu with output base $1 (a machine of its own), log $LOGS/$2.log, failing with $3;
# sets build_s and summary (Bazel's `INFO: N processes: ...` line).
build_lane() {
  local t; t=$(now)
  bazel --output_base="$1" build "${FLAGS[@]}" //lanes:cpu >"$LOGS/$2.log" 2>&1 \
    || { tail -40 "$LOGS/$2.log"; fail "$3"; }
  build_s=$(since "$t")
  summary=$(grep -E '^INFO: [0-9]+ processes' "$LOGS/$2.log")
}

# 1. Remote execution of the CMake stages in the CPU pool.
build_lane "$OB1" build1 "remote build of //lanes:cpu failed"
build1_s=$build_s summary1=$summary
echo "farm_integration_test: machine 1: $summary1"
echo "$summary1" | grep -qE '[0-9]+ remote[,.]' || fail "no action ran remotely"
grep ' executed .*cmake_build' "$LANES_FARM_DIR/cpu-worker.log" | sed 's/^/  /'
[ "$(grep -c ' executed .*exit=0 .*cmake_build' "$LANES_FARM_DIR/cpu-worker.log")" -ge 2 ] \
  || fail "the two CMake stages did not run on cpu-worker"
grep -q 'cmake_build' "$LANES_FARM_DIR/gpu-worker.log" && fail "a CMake stage ran on the GPU-pool worker"

# 2. A second machine: clean output base, served from the remote cache, byte-identical artifacts.
before=$(executed)
build_lane "$OB2" build2 "second build of //lanes:cpu failed"
build2_s=$build_s summary2=$summary
echo "farm_integration_test: machine 2: $summary2"
echo "$summary2" | grep -q 'remote cache hit' || fail "second machine got no remote cache hit"
echo "$summary2" | grep -qE '[0-9]+ remote[,.]' && fail "second machine executed actions remotely"
[ "$(executed)" = "$before" ] || fail "a worker ran actions for the second machine"
digests() {  # sha256 of every file of the lane bundle and its CMake stages, relative paths
  local bin; bin=$(bazel --output_base="$1" info "${FLAGS[@]}" bazel-bin 2>/dev/null)
  (cd "$bin/lanes" && find cpu cpu.evidence.pb cpu.evidence.json cpu_ggml cpu_llama cpu_ggml_foreign_cc cpu_llama_foreign_cc -type f -print0 | sort -z | xargs -0 sha256sum)
}
digests "$OB1" > "$LOGS/artifacts1.sha256"; digests "$OB2" > "$LOGS/artifacts2.sha256"
nfiles=$(wc -l < "$LOGS/artifacts1.sha256")
[ "$nfiles" -gt 5 ] || fail "found only $nfiles lane artifacts"
cmp -s "$LOGS/artifacts1.sha256" "$LOGS/artifacts2.sha256" \
  || { diff "$LOGS/artifacts1.sha256" "$LOGS/artifacts2.sha256" | head; fail "artifacts differ between the two machines"; }
echo "farm_integration_test: $nfiles lane artifacts byte-identical on both machines"

# 3. Pool placement.
bazel --output_base="$OB1" test "${FLAGS[@]}" //tests/certify:pool_probe_gpu_h200 //tests/certify:pool_probe_cpu_x86_64_v3 \
  >"$LOGS/probes.log" 2>&1 || { tail -30 "$LOGS/probes.log"; fail "pool probes failed"; }
grep ' executed .*pool_probe' "$LANES_FARM_DIR"/*-worker.log | sed "s|$LANES_FARM_DIR/||; s/^/  /"
grep -q 'what=//tests/certify:pool_probe_gpu_h200' "$LANES_FARM_DIR/gpu-worker.log" || fail "GPU-pool probe not on gpu-worker"
grep -q 'what=//tests/certify:pool_probe_cpu_x86_64_v3' "$LANES_FARM_DIR/cpu-worker.log" || fail "CPU-pool probe not on cpu-worker"
grep -q 'what=//tests/certify:pool_probe_gpu_h200' "$LANES_FARM_DIR/cpu-worker.log" && fail "GPU-pool probe ran on cpu-worker"
grep -q 'what=//tests/certify:pool_probe_cpu_x86_64_v3' "$LANES_FARM_DIR/gpu-worker.log" && fail "CPU-pool probe ran on gpu-worker"

# 3b. CPU certification as a Bazel test in its pool; report and raw logs come back as test outputs.
if [ "${LANES_FARM_TEST_CERTIFY:-1}" = 1 ]; then
  t=$(now)
  bazel --output_base="$OB1" test "${FLAGS[@]}" //tests/certify:cpu_x86_64_v3 >"$LOGS/certify.log" 2>&1 \
    || { tail -40 "$LOGS/certify.log"; fail "//tests/certify:cpu_x86_64_v3 failed on the farm"; }
  certify_s=$(since "$t")
  grep ' executed .*what=//tests/certify:cpu_x86_64_v3' "$LANES_FARM_DIR/cpu-worker.log" | sed 's/^/  /'
  grep -q 'what=//tests/certify:cpu_x86_64_v3' "$LANES_FARM_DIR/cpu-worker.log" || fail "certification test not on cpu-worker"
  zip=$(bazel --output_base="$OB1" info "${FLAGS[@]}" bazel-testlogs 2>/dev/null)/tests/certify/cpu_x86_64_v3/test.outputs/outputs.zip
  unzip -p "$zip" cpu/runner_report.json > "$LOGS/runner_report.json" 2>/dev/null || fail "no runner report in $zip"
  echo "farm_integration_test: //tests/certify:cpu_x86_64_v3 PASSED remotely in ${certify_s}s; outputs.zip holds" \
    "$(unzip -l "$zip" | tail -1 | awk '{print $2}') files; report: $(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r.get("laneId"), r.get("status"), "recordable" if r.get("passRecordable") else "not recordable", len(r.get("checks", [])), "checks")' "$LOGS/runner_report.json")"
fi

# 4. No GPU-pool worker: the engine's queue timeout refuses the GPU-pool test; nothing else runs it.
bash tools/farm/farm.sh stop-worker gpu-worker >/dev/null
before=$(executed)
t=$(now)
bazel --output_base="$OB1" test "${FLAGS[@]}" --nocache_test_results --noremote_accept_cached --remote_retries=0 \
  //tests/certify:pool_probe_gpu_h200 >"$LOGS/refusal.log" 2>&1 && fail "GPU-pool test passed with no GPU-pool worker"
refusal_s=$(since "$t")
msg=$(grep -m1 'Operation has been queued for too long' "$LOGS/refusal.log") \
  || { tail -20 "$LOGS/refusal.log"; fail "no queue-timeout message from the engine"; }
grep -m1 'Remote Execution Failure' "$LOGS/refusal.log" | sed 's/^/  /'
echo "  $msg"
[ "$(executed)" = "$before" ] || fail "the GPU-pool test ran on another worker"
python3 -c "import sys; sys.exit(float(sys.argv[1]) >= float(sys.argv[2]))" "$refusal_s" "$REFUSAL_BOUND_S" || fail "refusal took ${refusal_s}s (bound ${REFUSAL_BOUND_S}s)"
echo "farm_integration_test: GPU-pool test refused after ${refusal_s}s (bound ${REFUSAL_BOUND_S}s), ran nowhere"

echo "farm_integration_test: timings: setup ${setup_s}s, farm start ${start_s}s, //lanes:cpu remote cold ${build1_s}s, second machine from remote cache ${build2_s}s, certification test ${certify_s:-skipped}s"
echo "farm_integration_test: PASS"
