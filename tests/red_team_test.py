"""The red team's corpus (issue 23, classes 1-13): every lie is refused, naming the check and the
reason, and a clean control run of the Bazel-built CPU lane stays recordable. Prints the table."""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

from tests.red_team import corpus
from tools.admission import policy_edit
from tools.certify import schema_versions
from tools.evidence import lane_manifest
from tools.policy import keys
from tools.runner import runner
from tools.runner.config import CHECKS, RunnerConfig

ROOT = pathlib.Path(os.environ.get("TEST_SRCDIR", "."), "lanes")
LANE = lane_manifest.load(lane_manifest.runfiles_path("cpu"), ROOT)
os.environ.setdefault("LANES_TINY_MODEL", str(ROOT / "tools" / "model" / "tiny_llama_f32.gguf"))

ROWS: list[tuple[int, str, str, str]] = []


def test_clean_control_run_stays_recordable(tmp_path):
    """Without a lie, the same runner records the real CPU lane: the cases fail for their lie alone."""
    key = keys.generate("control", tmp_path / "keys")
    policy = tmp_path / "policy.json"
    policy_edit.update_policy_file(policy, policy_id="control", public_key=key.public_raw.read_bytes(), valid_days=30,
                                   required_checks=list(CHECKS), max_record_age_days=30,
                                   supported_record_schema_versions=sorted(schema_versions.CERTIFICATION.known()),
                                   speed_floors=[("linux-x86_64-cpu", "speed.tg_tokens_per_s", 1.0)])
    out = tmp_path / "run"
    report = runner.run(RunnerConfig(lane="cpu", lane_dir=LANE.lane_dir, evidence=LANE.evidence,
                                     spec=ROOT / "lanes" / "spec.json", model=pathlib.Path(os.environ["LANES_TINY_MODEL"]),
                                     out_dir=out, report=out / "runner_report.pb", threads=2, policy=policy))
    failed = [(c.name, c.message) for c in report.checks if c.required and c.status != c.PASS]
    assert failed == [] and report.pass_recordable, (failed, list(report.non_recordable_reasons))
    ROWS.append((0, "control: the Bazel-built CPU lane, no lie", "-", "recordable"))


@pytest.mark.parametrize("case", corpus.all_cases(), ids=lambda c: f"class{c.klass}-{c.name}")
def test_every_lie_is_refused(case, tmp_path):
    refusal = case.run(tmp_path)
    assert refusal.check and refusal.reason
    ROWS.append((case.klass, case.name, refusal.check, refusal.reason))


def test_every_class_has_a_case():
    assert {c.klass for c in corpus.all_cases()} >= set(range(1, 14)) - MISSING_CLASSES


# Classes whose cases have not landed yet (kept explicit: the table says so).
MISSING_CLASSES: set[int] = set()


def test_print_table():
    print("\nclass | case | refused by | reason")
    for klass, name, check, reason in sorted(ROWS):
        print(f"{klass} | {name} | {check} | {reason[:220]}")
    recordable = sum(1 for r in ROWS if r[0] and r[3] == "recordable")
    print(f"lies: {sum(1 for r in ROWS if r[0])}, recordable: {recordable}")
    assert recordable == 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
