"""Integration: //lanes:cpu is built by Bazel, matches its evidence, and is relocatable."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from tools.evidence import build_evidence, lane_manifest

LANE = lane_manifest.load(lane_manifest.runfiles_path("cpu"), pathlib.Path(os.environ.get("TEST_SRCDIR", "."), "lanes"))
LANE_DIR = LANE.lane_dir
EVIDENCE = LANE.evidence


@pytest.fixture(scope="module")
def evidence():
    return build_evidence.read_evidence(EVIDENCE)


def test_evidence_describes_the_build(evidence):
    assert evidence.lane_id == "linux-x86_64-cpu"
    assert evidence.status == evidence.BUILT
    assert evidence.upstream.commit == "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
    assert re.fullmatch(r"[0-9a-f]{64}", evidence.upstream.archive_sha256)
    assert evidence.patches and all(re.fullmatch(r"[0-9a-f]{64}", p.sha256) for p in evidence.patches)
    assert evidence.patch_stack_digest.startswith("sha256:")
    assert any(c.language == "CXX" and c.id and c.version for c in evidence.compilers)
    entries = {k: v for s in evidence.stages for k, v in s.cache_entries.items()}
    assert entries["GGML_NATIVE"] == "OFF" and entries["LLAMA_USE_SYSTEM_GGML"] == "ON"
    assert {"llama-completion", "llama-server", "test-backend-ops"} <= set(evidence.targets)
    assert evidence.host.os == "linux" and evidence.host.kernel


def test_artifacts_rehash_to_the_evidence(evidence):
    assert len(evidence.artifacts) >= 10
    assert build_evidence.verify_artifacts(evidence, LANE_DIR) == []


def _runpaths(path: pathlib.Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", out)


def test_every_elf_is_relocatable(evidence):
    for artifact in evidence.artifacts:
        paths = _runpaths(LANE_DIR / artifact.path)
        assert paths, f"{artifact.path} has no RUNPATH"
        for entry in ":".join(paths).split(":"):
            assert entry.startswith("$ORIGIN"), f"{artifact.path}: RUNPATH entry {entry} is not $ORIGIN-relative"


def test_copied_binaries_run_and_report_their_stamp(evidence, tmp_path):
    copy = tmp_path / "elsewhere" / "cpu"
    shutil.copytree(LANE_DIR, copy, symlinks=False)
    env = {"PATH": "/usr/bin:/bin"}  # no LD_LIBRARY_PATH: RUNPATH must be enough
    out = subprocess.run([str(copy / "bin" / "llama-completion"), "--version"], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=60)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "commit 0c1e570" in text
    assert f"lanes: lane linux-x86_64-cpu, patch stack {evidence.patch_stack_digest}" in text
    for tool in ("llama-bench", "llama-server", "test-backend-ops", "llama-logits", "llama-simple"):
        res = subprocess.run([str(copy / "bin" / tool), "--help"], cwd="/", capture_output=True, text=True, env=env, timeout=60)
        assert "error while loading shared libraries" not in res.stderr, f"{tool}: {res.stderr}"


def _committed_cpu_runs() -> list[pathlib.Path]:
    runs = pathlib.Path(os.environ.get("TEST_SRCDIR", "."), "lanes", "evidence", "runs")
    return sorted(p for p in runs.glob("linux-x86_64-cpu.*/build_evidence.pb"))


def test_this_checkout_rebuilds_the_certified_bytes(evidence):
    """Every artifact of this build has the sha256 the committed certified CPU runs were made from,
    whatever the machine, checkout path or Bazel output base (issue 11: bit-reproducible lanes)."""
    runs = _committed_cpu_runs()
    assert runs, "no committed CPU run under evidence/runs/"
    built = {a.path: a.sha256 for a in evidence.artifacts}
    for run in runs:
        certified = {a.path: a.sha256 for a in build_evidence.read_evidence(run).artifacts}
        differ = sorted(p for p in set(built) | set(certified) if built.get(p) != certified.get(p))
        assert not differ, (f"{run.parent.name}: {len(differ)} of {len(certified)} artifacts differ from this build "
                            f"({', '.join(differ[:6])}); re-certify, or find what made the build non-reproducible")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
