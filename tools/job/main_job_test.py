"""The job finds the lane it certifies by the lane's manifest in its runfiles; the flags win over it."""

import pathlib
import sys

import pytest

from tools.evidence import lane_manifest
from tools.job import main_job


@pytest.fixture
def runfiles(tmp_path, monkeypatch) -> pathlib.Path:
    """A runfiles root as `bazel run //tools:certify` has it: the CPU lane's manifest, and the cwd."""
    (tmp_path / "lanes").mkdir()
    (tmp_path / "lanes" / "cpu.lane.json").write_text(lane_manifest.encode(
        "cpu", "linux-x86_64-cpu", "lanes/cpu", "lanes/cpu.evidence.pb", "lanes/cpu.evidence.json"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_without_flags_the_manifest_names_the_files(runfiles):
    assert main_job.lane_file("", "cpu", "lane_dir") == (runfiles / "lanes" / "cpu").resolve()
    assert main_job.lane_file("", "cpu", "evidence") == (runfiles / "lanes" / "cpu.evidence.pb").resolve()


def test_a_flag_wins_over_the_manifest(runfiles, tmp_path_factory):
    other = tmp_path_factory.mktemp("built-elsewhere")
    assert main_job.lane_file(str(other / "cuda.pb"), "cuda", "evidence") == (other / "cuda.pb").resolve()
    (runfiles / "lanes" / "cpu.lane.json").write_text("not a manifest")
    assert main_job.lane_file(str(other), "cpu", "lane_dir") == other.resolve()  # the broken manifest is not read


def test_a_lane_not_in_the_runfiles_names_its_manifest_and_the_flags(runfiles):
    with pytest.raises(main_job.MainJobError, match=r"no //lanes:cuda.lane.json in this job's runfiles.*--lane_dir and --evidence"):
        main_job.lane_file("", "cuda", "lane_dir")


def test_a_broken_manifest_is_refused_with_its_reason(runfiles):
    (runfiles / "lanes" / "cpu.lane.json").write_text('{"schema_version": 2}')
    with pytest.raises(lane_manifest.LaneManifestError, match="schema_version 2"):
        main_job.lane_file("", "cpu", "evidence")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
