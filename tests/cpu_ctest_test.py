"""The CPU lane's llama.cpp CTest suite (issue 14): the gate in `bazel test //...`.

//lanes:cpu_ctest_report ran upstream's own tests (tests/CMakeLists.txt of the pinned, patched
tree, built by the lane's own llama stage //lanes:cpu_llama) against the lane's own
libraries, and wrote bazel-bin/lanes/cpu_ctest.report.{pb,json} and the raw cpu_ctest.log beside
the lane's build evidence. This test re-derives every figure from the raw log and the bundle's
manifest, then requires that every test the lane spec does not exclude passed; a failure names
each failing test with its output.
"""

import pathlib
import sys

import pytest

from tools.ctest import bundle, ctest_run
from tools.evidence import lane_manifest

LANES = pathlib.Path("lanes")
REPORT, LOG, BUNDLE = LANES / "cpu_ctest.report.pb", LANES / "cpu_ctest.log", LANES / "cpu_ctest"


@pytest.fixture(scope="module")
def report():
    return ctest_run.read(REPORT)


def test_report_figures_are_what_the_raw_log_says(report):
    manifest = bundle.load_manifest(BUNDLE)
    mismatches = ctest_run.audit(report, LOG.read_text(errors="replace"), ctest_run.sha256_file(LOG), manifest,
                                 ctest_run.sha256_file(BUNDLE / "manifest.json"))
    assert mismatches == [], "\n".join(mismatches)


def test_report_is_bound_to_the_lane_build(report):
    assert report.lane_id == "linux-x86_64-cpu"
    assert len(report.build_evidence_sha256) == 64
    evidence = lane_manifest.load(lane_manifest.runfiles_path("cpu"), ".").evidence
    if evidence.exists():
        assert report.build_evidence_sha256 == ctest_run.sha256_file(evidence)
    # The "model" tests ran with the embedded tiny model, not skipped.
    assert report.model_sha256


def test_every_exclusion_has_its_reason(report):
    excluded = [t for t in report.tests if t.status == report.EXCLUDED]
    assert excluded and all(t.reason for t in excluded)


def test_upstream_suite_passes(report):
    print(ctest_run.summary_text(report))
    if not report.passed:
        pytest.fail(ctest_run.failure_text(report), pytrace=False)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
