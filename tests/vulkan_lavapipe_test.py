"""The Vulkan lane under Mesa's lavapipe (a software ICD, pinned like the SDK): refused, and never recordable.

A requested test (tags manual: it needs //lanes:vulkan, a requested build):
  bazel test //tests:vulkan_lavapipe_test --test_output=all
Without --allow_software_icd the preflight refuses the software device (UNAVAILABLE, exit 2, nothing
else runs); with it every check runs as a diagnostic, the report is not recordable and the runner
exits non-zero. The test prints what each check, graph_smoke included, reported on lavapipe.
"""

import os
import pathlib
import sys

import pytest

from proto import runner_report_pb2
from tools.evidence import lane_manifest
from tools.runner import report as report_lib
from tools.runner import runner
from tools.runner.config import RunnerConfig

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."))
ROOT = RUNFILES / "lanes"
LAVAPIPE = RUNFILES / "vulkan_lavapipe"
LOADER_DIR = RUNFILES / "vulkan_sdk" / "usr" / "lib" / "x86_64-linux-gnu"
CR = runner_report_pb2.CheckResult


@pytest.fixture(autouse=True)
def lavapipe_only(monkeypatch):
    # The pinned loader and the pinned lavapipe ICD, nothing from the host's Vulkan setup.
    lib_dirs = [str(LAVAPIPE / "usr" / "lib" / "x86_64-linux-gnu"), str(LOADER_DIR)]
    monkeypatch.setenv("LD_LIBRARY_PATH", ":".join(lib_dirs + [os.environ.get("LD_LIBRARY_PATH", "")]).rstrip(":"))
    monkeypatch.setenv("VK_DRIVER_FILES", str(LAVAPIPE / "lvp_icd.x86_64.json"))
    monkeypatch.setenv("VK_ICD_FILENAMES", str(LAVAPIPE / "lvp_icd.x86_64.json"))
    monkeypatch.delenv("GGML_VK_VISIBLE_DEVICES", raising=False)


def _config(out: pathlib.Path, **over) -> RunnerConfig:
    lane = lane_manifest.load(lane_manifest.runfiles_path("vulkan"), ROOT)
    cpu = lane_manifest.load(lane_manifest.runfiles_path("cpu"), ROOT)
    return RunnerConfig(lane="vulkan", lane_dir=lane.lane_dir, evidence=lane.evidence,
                        spec=ROOT / "lanes" / "spec.json", model=ROOT / "tools" / "model" / "tiny_llama_f32.gguf",
                        cpu_lane_dir=cpu.lane_dir, out_dir=out, report=out / "runner_report.pb", threads=2,
                        timeout_s=300, **over)


def test_software_icd_is_refused(tmp_path):
    report = runner.run(_config(tmp_path / "refused"))
    print(report_lib.summary_table(report))
    pre = report.checks[0]
    assert pre.name == "preflight" and pre.status == CR.UNAVAILABLE, pre.message
    assert "only software devices" in pre.message and "llvmpipe" in pre.message
    assert all(c.status == CR.SKIPPED for c in report.checks[1:])
    assert not report.pass_recordable and runner.exit_code(report) == runner.EXIT_UNAVAILABLE


def test_diagnostic_run_on_lavapipe_is_never_recordable(tmp_path):
    # fixture_parity (every op of the llama graph through test-backend-ops) and speed take many
    # minutes on a CPU-emulated device and prove nothing here; the rest runs.
    report = runner.run(_config(tmp_path / "diagnostic", allow_software_icd=True, skip=("fixture_parity", "speed")))
    print(report_lib.summary_table(report))
    for c in report.checks:
        print(f"{c.name}: {CR.Status.Name(c.status)}: {c.message}")
    pre = report.checks[0]
    assert pre.status == CR.PASS, pre.message
    assert report.device_class.compute_capability == "cpu" and "llvmpipe" in report.device_class.device_name
    assert not report.pass_recordable
    # Not recordable because of the software device itself (not only because of the skips).
    assert any("software Vulkan device" in r for r in report.non_recordable_reasons), report.non_recordable_reasons
    assert runner.exit_code(report) != runner.EXIT_OK


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
