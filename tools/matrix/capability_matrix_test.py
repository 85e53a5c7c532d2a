"""The matrix shows BUILT only for evidence whose artifacts re-hash to their digests."""

import pathlib
import sys

import pytest

from tools.evidence import build_evidence, lane_manifest
from tools.matrix import capability_matrix as cm

SPEC = {"lanes": {
    "linux-x86_64-cpu": {"alias": "cpu", "backend": "cpu"},
    "linux-x86_64-rocm": {"alias": "rocm", "backend": "rocm"},
    "linux-aarch64-cuda": {"alias": "", "backend": "cuda"},
}}
AVAIL = {"host": {"os": "linux", "arch": "x86_64"}, "lanes": {
    "linux-x86_64-cpu": {"status": "AVAILABLE", "reason": ""},
    "linux-x86_64-rocm": {"status": "UNAVAILABLE", "reason": "no hipcc"},
    "linux-aarch64-cuda": {"status": "UNAVAILABLE", "reason": "needs a linux-aarch64 host"},
}}


def _build_lane(bazel_bin: pathlib.Path) -> pathlib.Path:
    lane_dir = bazel_bin / "lanes" / "cpu"
    (lane_dir / "bin").mkdir(parents=True)
    (lane_dir / "bin" / "llama-completion").write_bytes(b"\x7fELF fake binary")
    meta = {"name": "cpu_llama", "cache_entries": {"GGML_NATIVE": "OFF"}, "started": 1.0, "finished": 2.0,
            "compilers": {"CXX": {"compiler_id": "GNU", "compiler_version": "12.2.0"}}}
    pin = {"source_uri": "pypi-sdist:x", "archive_sha256": "ab" * 32, "commit": "0c1e57098bba43ac29e6e3b677cdceebdd22334f",
           "patches": [{"name": "0001.patch", "sha256": "cd" * 32}], "patch_stack_digest": "sha256:" + "ef" * 32}
    ev = build_evidence.make_evidence(lane_id="linux-x86_64-cpu", lane_dir=lane_dir, pin=pin, sdk={"name": "host-cc"},
                                      stage_metas=[meta], targets=["llama-completion"], bazel_version="4.2.3")
    build_evidence.write_evidence(ev, bazel_bin / "lanes" / "cpu.evidence.pb", bazel_bin / "lanes" / "cpu.evidence.json")
    _write_manifest(bazel_bin)
    return lane_dir


def _write_manifest(bazel_bin: pathlib.Path, evidence: str = "lanes/cpu.evidence.pb") -> None:
    (bazel_bin / "lanes").mkdir(parents=True, exist_ok=True)
    (bazel_bin / "lanes" / "cpu.lane.json").write_text(lane_manifest.encode(
        "cpu", "linux-x86_64-cpu", "lanes/cpu", evidence, evidence.removesuffix(".pb") + ".json"))


def _rows(bazel_bin):
    return {r.lane_id: r for r in cm.matrix(SPEC, AVAIL, bazel_bin)}


def test_not_built_and_unavailable_are_named(tmp_path):
    rows = _rows(tmp_path)
    assert rows["linux-x86_64-cpu"].build_status == cm.NOT_BUILT
    assert rows["linux-x86_64-rocm"].build_status == cm.UNAVAILABLE
    assert rows["linux-x86_64-rocm"].build_detail == "no hipcc"
    assert rows["linux-aarch64-cuda"].build_detail.startswith("needs a linux-aarch64 host")
    assert all(r.certification == cm.DARK and not r.routable_under_policy for r in rows.values())


def test_built_only_when_artifacts_match(tmp_path):
    lane_dir = _build_lane(tmp_path)
    assert _rows(tmp_path)["linux-x86_64-cpu"].build_status == cm.BUILT
    (lane_dir / "bin" / "llama-completion").write_bytes(b"tampered")
    row = _rows(tmp_path)["linux-x86_64-cpu"]
    assert row.build_status == cm.FAILED
    assert "bin/llama-completion: sha256" in row.build_detail


def test_missing_artifact_and_garbage_evidence_fail(tmp_path):
    lane_dir = _build_lane(tmp_path)
    (lane_dir / "bin" / "llama-completion").unlink()
    assert "missing" in _rows(tmp_path)["linux-x86_64-cpu"].build_detail
    (tmp_path / "lanes" / "cpu.evidence.pb").write_bytes(b"\xff\xff not a proto")
    assert _rows(tmp_path)["linux-x86_64-cpu"].build_status == cm.FAILED


def test_the_lane_is_found_by_its_manifest_only(tmp_path):
    _build_lane(tmp_path)
    (tmp_path / "lanes" / "cpu.lane.json").unlink()
    row = _rows(tmp_path)["linux-x86_64-cpu"]
    assert row.build_status == cm.NOT_BUILT
    assert row.build_detail == ("no lane manifest at bazel-bin/lanes/cpu.lane.json; "
                                "run bazel build //lanes:cpu //lanes:cpu.lane.json")
    # The manifest names the evidence: one it names that is not there is not built, whatever lies beside.
    _write_manifest(tmp_path, evidence="lanes/cpu/cpu.evidence.pb")
    row = _rows(tmp_path)["linux-x86_64-cpu"]
    assert (row.build_status, row.build_detail) == (
        cm.NOT_BUILT, "no evidence at bazel-bin/lanes/cpu/cpu.evidence.pb; run bazel build //lanes:cpu //lanes:cpu.lane.json")


def test_a_broken_manifest_fails_the_lane(tmp_path):
    _build_lane(tmp_path)
    (tmp_path / "lanes" / "cpu.lane.json").write_text('{"schema_version": 9}')
    row = _rows(tmp_path)["linux-x86_64-cpu"]
    assert row.build_status == cm.FAILED and "schema_version 9" in row.build_detail


def test_renderings_carry_every_lane(tmp_path):
    _build_lane(tmp_path)
    rows = cm.matrix(SPEC, AVAIL, tmp_path)
    text = cm.render_text(rows)
    assert "linux-x86_64-cpu" in text and "BUILT" in text and "dark" in text
    assert '"build_status": "UNAVAILABLE"' in cm.render_json(rows, AVAIL["host"])
    page = cm.render_html(rows, AVAIL["host"])
    lanes_table, pairs_table = page.split("<h2>Mixed-backend routes</h2>")
    assert lanes_table.count("<tr class=lane ") == len(SPEC["lanes"]) and "no hipcc" in page
    assert "none" in pairs_table  # no compatibility record given: the section says so


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
