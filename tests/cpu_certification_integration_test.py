"""Integration: the Bazel-built CPU lane is certified on this machine, end to end.

Runs every runner check with the embedded model, signs the report with a throwaway key under a
throwaway policy, verifies the record, and checks what the matrix and admission make of it. Also
shows the gate failing closed on a tampered artifact and on a skip switch.
"""

import os
import pathlib
import shutil
import sys

import pytest

from proto import admission_pb2, runner_report_pb2
from tools.admission import admission, policy_edit
from tools.certify import certify, schema_versions
from tools.evidence import lane_manifest
from tools.matrix import certification_status
from tools.policy import keys
from tools.policy import policy as policy_lib
from tools.runner import runner
from tools.runner.config import CHECKS, RunnerConfig

ROOT = pathlib.Path(os.environ.get("TEST_SRCDIR", "."), "lanes")
LANE = lane_manifest.load(lane_manifest.runfiles_path("cpu"), ROOT)
LANE_DIR = LANE.lane_dir
EVIDENCE = LANE.evidence
MODEL = ROOT / "tools" / "model" / "tiny_llama_f32.gguf"
SPEC = ROOT / "lanes" / "spec.json"
# llama.cpp's own CTest suite over the lane (//lanes:cpu_ctest): the upstream_ctest step runs it too.
CTEST_BUNDLE = ROOT / "lanes" / "cpu_ctest"
CR = runner_report_pb2.CheckResult


def _config(out: pathlib.Path, lane_dir: pathlib.Path = LANE_DIR, **over) -> RunnerConfig:
    return RunnerConfig(lane="cpu", lane_dir=lane_dir, evidence=EVIDENCE, spec=SPEC, model=MODEL,
                        out_dir=out, report=out / "runner_report.pb", threads=2, **over)


@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("certify")
    key = keys.generate("itest", tmp / "keys")
    policy = tmp / "policy.json"
    policy_edit.update_policy_file(policy, policy_id="itest", public_key=key.public_raw.read_bytes(), valid_days=30,
                                   required_checks=list(CHECKS), max_record_age_days=30,
                                   supported_record_schema_versions=sorted(schema_versions.CERTIFICATION.known()),
                                   speed_floors=[("linux-x86_64-cpu", "speed.tg_tokens_per_s", 1.0)])
    # The run is bound to the policy it is signed under (a run without one is not recordable).
    report = runner.run(_config(tmp / "run", ctest_bundle=CTEST_BUNDLE, policy=policy))
    shutil.copyfile(EVIDENCE, tmp / "run" / "build_evidence.pb")  # certify audits the run dir, evidence included
    record = certify.certify_report(tmp / "run" / "runner_report.pb", key.private_key, policy, tmp / "records", 30)
    return report, record, policy, tmp


def test_every_check_passes_with_real_figures(certified):
    report, *_ = certified
    bad = [(c.name, c.message) for c in report.checks if c.status != CR.PASS]
    assert bad == [] and report.pass_recordable and report.status == report.PASS
    checks = {c.name: c for c in report.checks}
    assert [c.name for c in report.checks] == list(CHECKS)
    ctest = checks["upstream_ctest"].counts
    assert ctest["tests_passed"] > 0 and ctest["tests_failed"] == ctest["tests_skipped"] == ctest["tests_not_run"] == 0
    assert ctest["tests_registered"] == ctest["tests_passed"] + ctest["tests_excluded"]
    fixture = checks["fixture_parity"].counts
    assert fixture["tests_evaluated"] > 0 and fixture["tests_failed"] == 0 and fixture["ops_uncovered"] == 0
    oracle = checks["op_oracle"]
    required = [k[3:-9] for k, v in oracle.counts.items() if k.startswith("op.") and k.endswith(".required") and v]
    assert required and all(oracle.counts[f"op.{op}.evaluated"] > 0 or oracle.counts[f"op.{op}.absent_from_graph"]
                            for op in required)
    assert checks["reference_parity"].metrics["max_abs_delta_logit"] < 1e-3
    assert min(v for k, v in checks["graph_smoke"].counts.items() if k.startswith("tokens_decoded_")) > 0
    assert checks["concurrency"].counts["server_max_busy_slots"] >= 2
    assert checks["cancellation"].metrics["recovery_seconds"] > 0
    assert checks["speed"].metrics["tg_tokens_per_s"] > 0
    assert all(c.logs for c in report.checks)


def test_record_verifies_and_admits_only_its_scope(certified):
    report, record_path, policy, tmp = certified
    record = certify.verify(record_path, policy)
    assert record.scope.lane_id == "linux-x86_64-cpu"
    assert record.scope.device_class == report.device_class
    status, classes, routable, _ = certification_status.policy_certifier(policy, record_path.parent)("linux-x86_64-cpu", "")
    assert (status, routable) == ("certified", True) and len(classes) == 1
    assert certification_status.policy_certifier(policy, record_path.parent)("linux-x86_64-cuda", "")[0] == "dark"
    env = admission.load_signed(record_path)
    node = admission_pb2.NodeDescription(node_id="n1", lane_id=record.scope.lane_id,
                                         build_evidence_digest=record.build_evidence_digest)
    node.device_class.CopyFrom(record.scope.device_class)
    node.artifacts.extend(record.artifacts)
    pol = policy_lib.load_policy(policy)
    def route(model_sha256):
        return admission.route_from_nodes([node], model_sha256, recipe=record.recipe,
                                          model_shard_sha256=[s.sha256 for s in record.model.shards])

    ok = admission.decide(pol, [env], [], route(record.model.sha256))
    assert ok.routable, ok.reasons
    other_model = admission.decide(pol, [env], [], route("f" * 64))
    assert not other_model.routable and any(r.startswith("scope-model-mismatch") for r in other_model.reasons)
    node.device_class.backend = "cuda"
    node.lane_id = "linux-x86_64-cuda"
    refused = admission.decide(pol, [env], [], route(record.model.sha256))
    assert not refused.routable and refused.reasons


def test_tampered_artifact_fails_closed(tmp_path):
    lane = tmp_path / "cpu"
    shutil.copytree(LANE_DIR, lane)
    with open(lane / "lib" / "libllama.so.0", "ab") as f:
        f.write(b"\0")
    report = runner.run(_config(tmp_path / "out", lane_dir=lane))
    assert not report.pass_recordable and runner.exit_code(report) != 0
    integrity = next(c for c in report.checks if c.name == "artifact_integrity")
    assert integrity.status == CR.FAIL and "libllama.so.0" in integrity.message


def test_skip_switch_is_never_recordable(tmp_path):
    report = runner.run(_config(tmp_path / "out", skip=("speed",)))
    assert not report.pass_recordable and runner.exit_code(report) != 0
    assert any("skip" in r for r in report.non_recordable_reasons)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
