"""End to end on a real CPU lane (bin/, lib/). Needs LANES_CPU_LANE_DIR; skipped only when it is unset.

Optional: LANES_CPU_LANE_EVIDENCE (the lane's <lane>.evidence.pb; without it, evidence is made here
from the artifacts, stamped with the patch-stack digest the binary reports) and LANES_TINY_MODEL
(a tiny llama GGUF; without it, one is made from LANES_VOCAB_GGUF / the default vocab).
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

from proto import runner_report_pb2 as rpb
from tools.runner import artifact_integrity, fake_lane

CR = rpb.CheckResult
LANE_DIR = os.environ.get("LANES_CPU_LANE_DIR")

pytestmark = pytest.mark.skipif(not LANE_DIR, reason="LANES_CPU_LANE_DIR is not set")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cpu_lane")
    lane_dir = pathlib.Path(LANE_DIR).resolve()
    evidence = os.environ.get("LANES_CPU_LANE_EVIDENCE")
    if evidence:
        evidence = pathlib.Path(evidence)
    else:
        version = subprocess.run([lane_dir / "bin" / "llama-completion", "--version"], capture_output=True, text=True,
                                 timeout=60)
        _, _, digest = artifact_integrity.parse_version(version.stdout + version.stderr)
        evidence = fake_lane.make_evidence(lane_dir, tmp / "linux-x86_64-cpu.evidence.pb", patch_stack_digest=digest)
    model = os.environ.get("LANES_TINY_MODEL")
    if model:
        model = pathlib.Path(model)
    else:
        from tools.model import make_tiny_model
        vocab = pathlib.Path(os.environ.get("LANES_VOCAB_GGUF", "/tmp/pt/b/models/ggml-vocab-llama-spm.gguf"))
        model = tmp / "tiny_f32.gguf"
        make_tiny_model.make_tiny_model(vocab, model, dtype="f32")
    return lane_dir, evidence, model


def test_full_run_is_recordable(tmp_path, inputs):
    lane_dir, evidence, model = inputs
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, model))
    failed = [(c.name, c.message) for c in report.checks if c.status != CR.PASS]
    assert failed == []
    assert code == 0 and report.pass_recordable
    assert report.model.sha256 and report.build_evidence_digest.startswith("sha256:")
    for c in report.checks:
        assert c.logs, c.name
        for log in c.logs:
            assert (tmp_path / "out" / log.path).is_file()
    assert (tmp_path / "out" / "runner_report.json").is_file()


def test_skip_makes_an_otherwise_passing_run_fail(tmp_path, inputs):
    lane_dir, evidence, model = inputs
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, model, skip=("speed",)))
    assert code != 0 and not report.pass_recordable
    assert [c.name for c in report.checks if c.status != CR.PASS] == ["speed"]
    assert any("--skip=speed" in r for r in report.non_recordable_reasons)


def test_tampered_artifact_fails_integrity(tmp_path, inputs):
    lane_dir, evidence, model = inputs
    copy = tmp_path / "lane"
    subprocess.run(["cp", "-a", str(lane_dir), str(copy)], check=True)
    with open(copy / "lib" / "libllama.so.0", "ab") as f:
        f.write(b"\0")
    skip = ("fixture_parity", "reference_parity", "graph_smoke", "concurrency", "cancellation", "speed")
    report, code = fake_lane.run(fake_lane.config(tmp_path, copy, evidence, model, skip=skip))
    integrity = next(c for c in report.checks if c.name == "artifact_integrity")
    assert integrity.status == CR.FAIL and "lib/libllama.so.0: sha256" in integrity.message
    assert code != 0


if __name__ == "__main__":
    import sys, pytest
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
