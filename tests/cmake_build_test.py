"""The cmake() shim's action: layout like rules_foreign_cc, metadata for evidence, loud failures."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."))
FIXTURE = RUNFILES / "lanes" / "tests" / "cmake_fixture"
SCRIPT = RUNFILES / "rules_foreign_cc" / "foreign_cc" / "private" / "cmake_build.py"


def _config(root: pathlib.Path, **over) -> pathlib.Path:
    config = {
        "name": "fixture", "source_dir": "src", "install_prefix": "out/fixture",
        "cache_entries": {"CMAKE_BUILD_TYPE": "Release", "CMAKE_INSTALL_LIBDIR": "lib", "CMAKE_INSTALL_RPATH": "$ORIGIN/../lib"},
        "generate_args": ["-GNinja"], "build_args": [], "targets": [], "install": True, "env": {},
        "deps_prefixes": [], "out_binaries": ["hello"], "out_shared_libs": ["libgreet.so.1"], "out_static_libs": [],
        "out_include_dir": "include", "out_data_dirs": [], "jobs": 2, "log": "out/build.log", "meta": "out/meta.json",
    }
    config.update(over)
    (root / "out").mkdir(exist_ok=True)
    path = root / "config.json"
    path.write_text(json.dumps(config))
    return path


def _run(root: pathlib.Path, config: pathlib.Path) -> subprocess.CompletedProcess:
    shutil.copytree(FIXTURE, root / "src", dirs_exist_ok=True)
    return subprocess.run([sys.executable, str(SCRIPT), str(config)], cwd=root, capture_output=True, text=True, timeout=300)


def test_builds_installs_and_lays_out_outputs(tmp_path):
    res = _run(tmp_path, _config(tmp_path))
    assert res.returncode == 0, res.stderr
    hello = tmp_path / "out/fixture/bin/hello"
    assert (tmp_path / "out/fixture/lib/libgreet.so.1").is_file()
    assert not (tmp_path / "out/fixture/lib/libgreet.so.1").is_symlink()
    assert (tmp_path / "out/fixture/include/greet.h").is_file()
    # Copied elsewhere, the binary still finds its library through $ORIGIN.
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "out/fixture", moved)
    assert subprocess.run([str(moved / "bin/hello")], capture_output=True, text=True).stdout.strip() == "hello from the fixture"
    meta = json.loads((tmp_path / "out/meta.json").read_text())
    assert meta["compilers"]["C"]["compiler_id"] == "GNU"
    assert [c["step"] for c in meta["commands"]] == ["configure", "build", "install"]
    assert meta["cache_entries"]["CMAKE_INSTALL_RPATH"] == "$ORIGIN/../lib"
    assert "-ffile-prefix-map" not in " ".join(meta["commands"][0]["argv"])  # env, not cache entries
    assert hello.is_file()


def test_failure_names_the_step_and_shows_the_log(tmp_path):
    config = _config(tmp_path, cache_entries={"FIXTURE_BREAK": "ON"})
    res = _run(tmp_path, config)
    assert res.returncode == 1
    assert "build failed" in res.stderr and "the fixture was asked to break" in res.stderr


def test_undeclared_output_is_an_error(tmp_path):
    res = _run(tmp_path, _config(tmp_path, out_binaries=["not-a-target"]))
    assert res.returncode == 1 and "declared output not-a-target was not produced" in res.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
