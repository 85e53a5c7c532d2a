"""node_json_cli describes this host's node as preflight and artifact_integrity see it, and refuses
a lane whose device this host lacks with preflight's reason."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tools.runner.checks import artifact_integrity

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", ".")) / "lanes"
LANES = RUNFILES / "lanes"
MODEL = RUNFILES / "tools" / "model" / "tiny_llama_f32.gguf"


def _run(tmp_path, lane: str, lane_dir: pathlib.Path, evidence: pathlib.Path) -> tuple[int, str]:
    out = tmp_path / "node.json"
    proc = subprocess.run([sys.executable, "-m", "tools.admission.node_json_cli", f"--lane={lane}",
                           f"--lane_dir={lane_dir}", f"--evidence={evidence}", f"--spec={LANES / 'spec.json'}",
                           "--node_id=node-7", f"--model={MODEL}", f"--out={out}"],
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stderr


def test_the_cpu_lane_on_this_host(tmp_path):
    code, err = _run(tmp_path, "cpu", LANES / "cpu", LANES / "cpu.evidence.pb")
    assert code == 0, err
    node = json.loads((tmp_path / "node.json").read_text())
    assert node["nodeId"] == "node-7" and node["laneId"] == "linux-x86_64-cpu"
    dc = node["deviceClass"]
    assert dc["backend"] == "cpu" and dc["arch"] == "x86_64" and dc["computeCapability"]  # the ggml variant loaded
    hashed = artifact_integrity.hash_artifacts(LANES / "cpu")
    assert [(a["path"], a["sha256"]) for a in node["artifacts"]] == [(a.path, a.sha256) for a in hashed]
    assert node["buildEvidenceDigest"].startswith("sha256:") and len(node["modelSha256"]) == 1


def test_a_lane_whose_device_this_host_lacks_is_refused_with_the_reason(tmp_path):
    if any(pathlib.Path(d).exists() for d in ("/dev/nvidia0", "/dev/nvidiactl")):
        pytest.skip("this host has an NVIDIA GPU")
    # The CPU lane's files stand in for a CUDA lane's: the host check comes first and refuses.
    code, err = _run(tmp_path, "cuda", LANES / "cpu", LANES / "cpu.evidence.pb")
    assert code == 1 and "this host cannot run lane cuda" in err, err
    assert not (tmp_path / "node.json").exists()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
