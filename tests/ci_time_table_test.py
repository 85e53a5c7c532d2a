""".ci/time_table.py: one row per test target and per cmake() stage, from what Bazel leaves behind."""

import json
import os
import pathlib
import runpy
import sys

import pytest

SCRIPT = pathlib.Path(os.environ.get("TEST_SRCDIR", "."), "lanes", ".ci", "time_table.py")
if not SCRIPT.is_file():  # run from the checkout, outside Bazel
    SCRIPT = pathlib.Path(__file__).resolve().parent.parent / ".ci" / "time_table.py"
time_table = runpy.run_path(str(SCRIPT))


def _test_xml(path: pathlib.Path, seconds: float) -> None:
    path.mkdir(parents=True)
    (path / "test.xml").write_text(
        '<testsuites><testsuite name="x"><testcase name="x" status="run" duration="{0}" time="{0}">'
        "</testcase></testsuite></testsuites>".format(seconds))


@pytest.fixture
def outputs(tmp_path):
    logs = tmp_path / "testlogs"
    _test_xml(logs / "tests" / "cpu_certification_integration_test", 85)
    _test_xml(logs / "tools" / "evidence" / "run_readme_test", 1)  # a name that starts like run_N_of_M
    _test_xml(logs / "tests" / "fault_injection_test" / "shard_1_of_2", 20)
    _test_xml(logs / "tests" / "fault_injection_test" / "shard_2_of_2", 23)
    stage = tmp_path / "bin" / "lanes" / "cpu_ggml_foreign_cc"
    stage.mkdir(parents=True)
    (stage / "meta.json").write_text(json.dumps({"name": "cpu_ggml", "jobs": 2, "commands": [
        {"step": "configure", "seconds": 1.3}, {"step": "build", "seconds": 279.2}]}))
    return logs, tmp_path / "bin"


def test_rows_per_target_with_shards_summed(outputs, capsys):
    logs, bin_dir = outputs
    assert time_table["main"](["--testlogs", str(logs), "--bin", str(bin_dir), "--phase", "bazel test //...=1819",
                               "--users", "//lanes:cpu_ggml=//tests:cpu_lane_integration_test"]) == 0
    table = capsys.readouterr().out.splitlines()
    rows = [line for line in table if line.startswith("| build ") or line.startswith("| test ")]
    assert rows == [
        "| build | //lanes:cpu_ggml | 280 | cmake() stage, 2 jobs: configure 1 s, build 279 s;"
        " needed by //tests:cpu_lane_integration_test |",
        "| test | //tests:cpu_certification_integration_test | 85 |  |",
        "| test | //tests:fault_injection_test | 43 | 2 shards or runs, summed |",
        "| test | //tools/evidence:run_readme_test | 1 |  |",
    ]
    assert "| bazel test //... | 1819 |" in table
    assert table[-1] == "cmake() stages 280 s, test actions 129 s (summed: Bazel runs them two at a time)"


@pytest.mark.parametrize("flag, value", [("--phase", "no-equals-sign"), ("--users", "=//tests:x")])
def test_malformed_pairs_are_refused(outputs, flag, value):
    logs, bin_dir = outputs
    with pytest.raises(SystemExit, match="expected NAME=VALUE"):
        time_table["main"](["--testlogs", str(logs), "--bin", str(bin_dir), flag, value])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
