"""Build evidence round-trips and catches any artifact that drifted from its digest."""

import json
import pathlib
import sys

import pytest

from tools.evidence import build_evidence

PIN = {"source_uri": "pypi-sdist:llama-cpp-python==0.3.36", "archive_sha256": "12" * 32,
       "commit": "0c1e57098bba43ac29e6e3b677cdceebdd22334f", "strip_prefix": "x/vendor/llama.cpp",
       "patches": [{"name": "0001-a.patch", "sha256": "34" * 32}, {"name": "0002-b.patch", "sha256": "56" * 32}],
       "patch_stack_digest": "sha256:" + "78" * 32}
META = [{"name": "cpu_ggml", "cache_entries": {"GGML_NATIVE": "OFF"}, "started": 10.0, "finished": 20.0, "jobs": 2,
         "compilers": {"CXX": {"compiler_id": "GNU", "compiler_version": "12.2.0", "compiler": "/usr/bin/c++"},
                       "C": {"compiler_id": "GNU", "compiler_version": "12.2.0", "compiler": "/usr/bin/cc"}},
         "commands": [{"step": "configure", "argv": ["cmake", "-S", "."], "seconds": 1.5, "exit_code": 0}]},
        {"name": "cpu_llama", "cache_entries": {"LLAMA_USE_SYSTEM_GGML": "ON"}, "started": 21.0, "finished": 40.0,
         "compilers": {"CXX": {"compiler_id": "GNU", "compiler_version": "12.2.0", "compiler": "/usr/bin/c++"}}}]


def _lane(tmp_path: pathlib.Path) -> pathlib.Path:
    lane = tmp_path / "cpu"
    (lane / "bin").mkdir(parents=True)
    (lane / "lib").mkdir()
    (lane / "bin" / "tool").write_bytes(b"binary")
    (lane / "lib" / "libx.so.0").write_bytes(b"library" * 100)
    return lane


def _evidence(lane):
    return build_evidence.make_evidence(lane_id="linux-x86_64-cpu", lane_dir=lane, pin=PIN,
                                        sdk={"name": "host-cc", "version": "12.2.0", "path": "/usr/bin/c++", "cmake": "3.25",
                                             "archives": [{"name": "nvidia-cublas", "version": "13.1.0.3", "sha256": "ee" * 32}]},
                                        stage_metas=META, targets=["tool"], bazel_version="4.2.3")


def test_evidence_has_every_field(tmp_path):
    ev = _evidence(_lane(tmp_path))
    assert ev.schema_version == build_evidence.SCHEMA_VERSION
    assert [p.name for p in ev.patches] == ["0001-a.patch", "0002-b.patch"]
    assert ev.upstream.commit == PIN["commit"] and ev.upstream.archive_sha256 == PIN["archive_sha256"]
    assert {(c.language, c.id, c.version) for c in ev.compilers} == {("C", "GNU", "12.2.0"), ("CXX", "GNU", "12.2.0")}
    assert [s.name for s in ev.stages] == ["cpu_ggml", "cpu_llama"]
    assert ev.stages[0].commands[0].argv == ["cmake", "-S", "."]
    assert ev.sdk.details["cmake"] == "3.25"
    assert [(a.path, a.sha256) for a in ev.sdk.archives] == [("nvidia-cublas==13.1.0.3", "ee" * 32)]
    assert (ev.started_unix, ev.finished_unix) == (10.0, 40.0)
    assert {a.path: a.size for a in ev.artifacts} == {"bin/tool": 6, "lib/libx.so.0": 700}


def test_sandbox_paths_become_exec_root_relative():
    sandboxed = "/root/.cache/bazel/_bazel_root/x/sandbox/linux-sandbox/60/execroot/lanes/external/cuda_toolkit/toolkit/bin/nvcc"
    assert build_evidence.exec_root_relative(sandboxed) == "$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/bin/nvcc"
    assert build_evidence.exec_root_relative("/usr/bin/c++") == "/usr/bin/c++"
    assert (build_evidence.exec_root_relative("-DCMAKE_PREFIX_PATH=/a/execroot/lanes/x;/b/execroot/lanes/y")
            == "-DCMAKE_PREFIX_PATH=$EXT_BUILD_ROOT/x;$EXT_BUILD_ROOT/y")


def test_write_read_and_json_twin(tmp_path):
    lane = _lane(tmp_path)
    ev = _evidence(lane)
    build_evidence.write_evidence(ev, tmp_path / "e.pb", tmp_path / "e.json")
    assert build_evidence.read_evidence(tmp_path / "e.pb") == ev
    as_json = json.loads((tmp_path / "e.json").read_text())
    assert as_json["laneId"] == "linux-x86_64-cpu" and as_json["status"] == "BUILT"
    assert build_evidence.verify_artifacts(ev, lane) == []


def test_tampering_missing_and_unknown_schema(tmp_path):
    lane = _lane(tmp_path)
    ev = _evidence(lane)
    (lane / "bin" / "tool").write_bytes(b"other")
    (lane / "lib" / "libx.so.0").unlink()
    problems = build_evidence.verify_artifacts(ev, lane)
    assert any(p.startswith("bin/tool: sha256") for p in problems)
    assert "lib/libx.so.0: missing" in problems
    ev.schema_version = 99
    (tmp_path / "e.pb").write_bytes(ev.SerializeToString())
    with pytest.raises(build_evidence.EvidenceError, match="schema_version 99"):
        build_evidence.read_evidence(tmp_path / "e.pb")
    with pytest.raises(build_evidence.EvidenceError, match="build the lane first"):
        build_evidence.read_evidence(tmp_path / "absent.pb")


def test_stage_metas_from_the_stand_in_and_from_real_rules_foreign_cc_logs(tmp_path):
    stand_in = tmp_path / "cpu_ggml_foreign_cc"
    stand_in.mkdir()
    (stand_in / "meta.json").write_text('{"name": "cpu_ggml", "cache_entries": {"A": "1"}, "started": 1.0, "finished": 2.0}')
    (stand_in / "build.log").write_text("log")
    real = tmp_path / "cpu_llama_foreign_cc"  # the real rule: plain logs only
    real.mkdir()
    (real / "CMake.log").write_text("log")
    metas = build_evidence.stage_metas([str(stand_in / "build.log"), str(stand_in / "meta.json"), str(real / "CMake.log")])
    assert [m["name"] for m in metas] == ["cpu_ggml", "cpu_llama"]
    assert metas[0]["cache_entries"] == {"A": "1"} and metas[1]["commands"] == [] and metas[1]["compilers"] == {}
    with pytest.raises(ValueError, match="no cmake"):
        build_evidence.stage_metas([])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
