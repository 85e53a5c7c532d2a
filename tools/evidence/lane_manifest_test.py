"""A lane manifest reads back with absolute paths, and anything not exactly a known manifest is refused."""

import json
import pathlib
import sys

import pytest

from tools.core.errors import LanesError
from tools.evidence import lane_manifest

GOOD = {"alias": "cpu", "lane_id": "linux-x86_64-cpu", "lane_dir": "lanes/cpu", "evidence": "lanes/cpu.evidence.pb",
        "evidence_json": "lanes/cpu.evidence.json", "schema_version": 1}


def _write(root: pathlib.Path, data, name: str = "cpu.lane.json") -> pathlib.Path:
    path = root / "lanes" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return path


def _refused(root: pathlib.Path, match: str) -> lane_manifest.LaneManifestError:
    with pytest.raises(lane_manifest.LaneManifestError, match=match) as err:
        lane_manifest.load("lanes/cpu.lane.json", root)
    return err.value


def test_paths_resolve_against_the_root(tmp_path):
    path = _write(tmp_path, GOOD)
    m = lane_manifest.load("lanes/cpu.lane.json", tmp_path)
    assert (m.alias, m.lane_id, m.path) == ("cpu", "linux-x86_64-cpu", path)
    assert m.lane_dir == tmp_path / "lanes" / "cpu" and m.lane_dir.is_absolute()
    assert (m.evidence, m.evidence_json) == (tmp_path / "lanes" / "cpu.evidence.pb", tmp_path / "lanes" / "cpu.evidence.json")
    with pytest.raises(AttributeError):
        m.alias = "other"  # frozen


def test_a_relative_root_and_an_absolute_path(tmp_path, monkeypatch):
    path = _write(tmp_path / "bazel-bin", GOOD)
    monkeypatch.chdir(tmp_path)
    m = lane_manifest.load_built("cpu")
    assert m.lane_dir == tmp_path / "bazel-bin" / "lanes" / "cpu"
    assert lane_manifest.load(path, "elsewhere").path == path
    assert lane_manifest.runfiles_path("cpu") == "lanes/cpu.lane.json" and lane_manifest.label("cpu") == "//lanes:cpu.lane.json"


def test_encode_is_what_load_reads(tmp_path):
    _write(tmp_path, lane_manifest.encode("cpu", "linux-x86_64-cpu", "lanes/cpu", "lanes/cpu.evidence.pb",
                                          "lanes/cpu.evidence.json").encode())
    assert json.loads((tmp_path / "lanes" / "cpu.lane.json").read_text()) == GOOD
    assert lane_manifest.load("lanes/cpu.lane.json", tmp_path).evidence.name == "cpu.evidence.pb"


def test_a_missing_manifest_says_what_to_build(tmp_path):
    err = _refused(tmp_path, "build //lanes:cpu.lane.json first")
    assert isinstance(err, LanesError) and err.code == "lane-manifest"
    assert str(tmp_path / "lanes" / "cpu.lane.json") in str(err)


@pytest.mark.parametrize("key", sorted(GOOD.keys() - {"schema_version"}))
def test_a_missing_key_is_refused(tmp_path, key):
    _write(tmp_path, {k: v for k, v in GOOD.items() if k != key})
    _refused(tmp_path, f"missing {key}")


def test_an_extra_key_is_refused(tmp_path):
    _write(tmp_path, {**GOOD, "lane_dir_exec": "bazel-out/k8-fastbuild/bin/lanes/cpu"})
    _refused(tmp_path, "unexpected lane_dir_exec")


@pytest.mark.parametrize("version", [2, 0, "1", True, None, 1.0])
def test_an_unknown_schema_version_is_refused(tmp_path, version):
    _write(tmp_path, {**GOOD, "schema_version": version})
    _refused(tmp_path, "schema_version .* is not one this reader knows")


def test_no_schema_version_is_refused(tmp_path):
    _write(tmp_path, {k: v for k, v in GOOD.items() if k != "schema_version"})
    _refused(tmp_path, "schema_version None")


@pytest.mark.parametrize("data", [b"{not json", b"\xff\xfe", b"", b"[1, 2]", b'"lanes/cpu"'])
def test_not_a_json_object_is_refused(tmp_path, data):
    _write(tmp_path, data)
    _refused(tmp_path, "not JSON|not a JSON object")


def test_an_oversized_file_is_refused_unparsed(tmp_path):
    _write(tmp_path, {**GOOD, "lane_id": "x" * lane_manifest.MAX_BYTES})
    _refused(tmp_path, f"over {lane_manifest.MAX_BYTES} bytes")


@pytest.mark.parametrize("value", ["/abs/cpu", "../outside/cpu", "lanes/../../cpu", "", 7, None])
def test_a_path_outside_the_root_or_not_a_string_is_refused(tmp_path, value):
    _write(tmp_path, {**GOOD, "lane_dir": value})
    _refused(tmp_path, "lane_dir")


def test_a_directory_is_not_a_manifest(tmp_path):
    (tmp_path / "lanes" / "cpu.lane.json").mkdir(parents=True)
    _refused(tmp_path, "no lane manifest there")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
