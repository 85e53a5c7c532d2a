"""Issue 11 (item 5): an SDK installed or removed is seen by @lane_sdks, or the reason names the command.

Runs a nested Bazel (its own output base under the test's temp dir) against this workspace with a
fake ROCm SDK: a `hipcc` script printing a HIP version. Only @lane_sdks is fetched, nothing else.
Tagged manual (a nested Bazel server is slow on a 2-core machine); run it with
`bazel test //tests:sdk_redetect_test` or `python3 -m pytest tests/sdk_redetect_test.py`.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REDETECT = "(after installing it, run: bazel sync --only=lane_sdks)"
# The workspace: this file is a runfiles symlink to the source tree under `bazel test`.
WORKSPACE = pathlib.Path(os.path.realpath(__file__)).parent.parent


def _fake_hipcc(directory: pathlib.Path, version: str) -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    hipcc = directory / "hipcc"
    hipcc.write_text(f"#!/bin/sh\necho 'HIP version: {version}'\n")
    hipcc.chmod(0o755)
    return hipcc


class NestedBazel:
    def __init__(self, root: pathlib.Path) -> None:
        self.output_base = root / "output_base"
        self.on_path = root / "on_path"  # a directory already on PATH, like /usr/bin
        self.on_path.mkdir()
        self.env = {"HOME": str(root), "PATH": f"{self.on_path}:/usr/local/bin:/usr/bin:/bin"}

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        argv = ["bazel", f"--output_base={self.output_base}", "--max_idle_secs=60", *args]
        return subprocess.run(argv, cwd=WORKSPACE, env={**self.env, **env}, capture_output=True, text=True,
                              timeout=600, check=False)

    def rocm(self, **env: str) -> dict:
        # --symlink_prefix=/: leave the workspace's bazel-* links to the user's own output base.
        proc = self.run("build", "--symlink_prefix=/", "@lane_sdks//:sdks.json", **env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads((self.output_base / "external/lane_sdks/sdks.json").read_text())["sdks"]["rocm"]

    def shutdown(self) -> None:
        self.run("shutdown")


@pytest.fixture(scope="module")
def bazel(tmp_path_factory) -> NestedBazel:
    if not shutil.which("bazel"):
        pytest.skip("no bazel on PATH")
    nested = NestedBazel(tmp_path_factory.mktemp("redetect"))
    yield nested
    nested.shutdown()


def test_missing_sdk_reason_names_the_redetect_command(bazel: NestedBazel) -> None:
    rocm = bazel.rocm()
    assert rocm["status"] == "UNAVAILABLE"
    assert rocm["reason"].startswith("no hipcc in $ROCM_PATH/bin") and rocm["reason"].endswith(REDETECT)


def test_sdk_found_through_a_declared_variable_is_seen_by_the_next_build(bazel: NestedBazel, tmp_path: pathlib.Path) -> None:
    _fake_hipcc(tmp_path / "rocm/bin", "6.2.41133-dd7f95766")
    rocm = bazel.rocm(ROCM_PATH=str(tmp_path / "rocm"))
    assert (rocm["status"], rocm["version"], rocm["path"]) == ("AVAILABLE", "6.2.41133-dd7f95766", str(tmp_path / "rocm/bin/hipcc"))
    # And removing it (ROCM_PATH unset) is seen too.
    assert bazel.rocm()["status"] == "UNAVAILABLE"


def test_too_old_sdk_is_refused_with_the_redetect_command(bazel: NestedBazel, tmp_path: pathlib.Path) -> None:
    _fake_hipcc(tmp_path / "rocm/bin", "5.7.31921")
    rocm = bazel.rocm(ROCM_PATH=str(tmp_path / "rocm"))
    assert rocm["status"] == "UNAVAILABLE" and "llama.cpp needs HIP >= 6.1" in rocm["reason"]
    assert rocm["reason"].endswith("(after installing a newer HIP, run: bazel sync --only=lane_sdks)")


def test_sdk_installed_on_path_is_seen_after_the_named_command(bazel: NestedBazel) -> None:
    assert bazel.rocm()["status"] == "UNAVAILABLE"
    hipcc = _fake_hipcc(bazel.on_path, "6.2.41133-dd7f95766")
    try:
        # No declared variable changed, so Bazel 4.2.3 keeps the cached detection (it re-runs a
        # local repository rule only on a server restart): that is why the reason names the
        # command, and the command must then be enough.
        assert bazel.rocm()["status"] == "UNAVAILABLE"
        sync = bazel.run("sync", "--only=lane_sdks")
        assert sync.returncode == 0, sync.stderr[-3000:]
        assert bazel.rocm()["status"] == "AVAILABLE"
    finally:
        hipcc.unlink()
    sync = bazel.run("sync", "--only=lane_sdks")
    assert sync.returncode == 0, sync.stderr[-3000:]
    assert bazel.rocm()["status"] == "UNAVAILABLE"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
