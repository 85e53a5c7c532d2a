#!/usr/bin/env bash
# Placement probe (issue 10): a test that proves WHERE the farm schedules a pool-constrained test, not
# what the hardware can do. It carries the same exec_compatible_with as the certification test of its
# pool; the loopback farm test (tools/farm/farm_integration_test.sh) reads the fixture workers' logs
# to see which worker ran it. It writes its identity to its undeclared outputs.
set -euo pipefail
echo "pool probe ${TEST_TARGET:-?} on $(uname -n) ($(uname -m))"
if [ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]; then
  echo "${TEST_TARGET:-?} $(uname -n)" > "$TEST_UNDECLARED_OUTPUTS_DIR/placement.txt"
fi
