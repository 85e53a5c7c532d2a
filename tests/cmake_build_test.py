"""The offline cmake() stand-in's action: the real rule's layout and shell semantics, loud failures."""

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."))
FIXTURE = RUNFILES / "lanes" / "tests" / "cmake_fixture"
SCRIPT = RUNFILES / "rules_foreign_cc" / "foreign_cc" / "private" / "cmake_build.py"

_spec = importlib.util.spec_from_file_location("cmake_build", SCRIPT)
cmake_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cmake_build)


def _config(root: pathlib.Path, **over) -> pathlib.Path:
    user_cache = {"CMAKE_BUILD_TYPE": "Release", "CMAKE_INSTALL_LIBDIR": "lib", "CMAKE_INSTALL_RPATH": "\\$ORIGIN/../lib"}
    config = {
        "name": "fixture", "source_dir": "src", "install_dir": "out/fixture",
        "toolchain_file": {"CMAKE_C_COMPILER": shutil.which("cc") or "/usr/bin/cc"},
        "cache_entries": dict(user_cache, CMAKE_TOOLCHAIN_FILE="$$BUILD_TMPDIR$$/crosstool_bazel.cmake",
                              CMAKE_INSTALL_PREFIX="$$INSTALLDIR$$", CMAKE_PREFIX_PATH="$$EXT_BUILD_DEPS$$"),
        "user_cache_entries": user_cache, "generator": "Ninja", "options": [], "build_args": [], "targets": [],
        "install": True, "env": {}, "toolchain_env": {}, "user_env": {}, "postfix_script": "", "deps": [],
        "outputs": ["out/fixture/bin/hello", "out/fixture/lib/libgreet.so.1"], "output_dirs": ["out/fixture/include"],
        "jobs": 2, "log": "out/CMake.log", "meta": "out/meta.json",
    }
    config.update(over)
    (root / "out").mkdir(exist_ok=True)
    path = root / "config.json"
    path.write_text(json.dumps(config))
    return path


def _run(root: pathlib.Path, config: pathlib.Path) -> subprocess.CompletedProcess:
    shutil.copytree(FIXTURE, root / "src", dirs_exist_ok=True)
    return subprocess.run([sys.executable, str(SCRIPT), str(config)], cwd=root, capture_output=True, text=True, timeout=300)


def test_builds_and_installs_into_the_install_dir(tmp_path):
    res = _run(tmp_path, _config(tmp_path))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out/fixture/lib/libgreet.so.1").is_file()
    assert not (tmp_path / "out/fixture/lib/libgreet.so.1").is_symlink()
    assert (tmp_path / "out/fixture/include/greet.h").is_file()
    # The build ran in <name>.build_tmpdir, which is gone afterwards, as with the real rule.
    assert not (tmp_path / "out/fixture.build_tmpdir").exists()
    # Copied elsewhere, the binary still finds its library through $ORIGIN.
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "out/fixture", moved)
    assert subprocess.run([str(moved / "bin/hello")], capture_output=True, text=True).stdout.strip() == "hello from the fixture"
    meta = json.loads((tmp_path / "out/meta.json").read_text())
    assert meta["compilers"]["C"]["compiler_id"] == "GNU"
    assert [c["step"] for c in meta["commands"]] == ["configure", "build", "install"]
    assert meta["cache_entries"]["CMAKE_INSTALL_RPATH"] == "\\$ORIGIN/../lib"
    configure = meta["commands"][0]["argv"]
    assert "-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib" in configure
    assert configure[-3:-1] == ["-G", "Ninja"]


def test_an_unescaped_origin_fails_as_under_the_real_rules_set_u(tmp_path):
    cache = {"CMAKE_BUILD_TYPE": "Release", "CMAKE_INSTALL_RPATH": "$ORIGIN/../lib"}
    res = _run(tmp_path, _config(tmp_path, cache_entries=cache))
    assert res.returncode == 1
    assert "ORIGIN: unbound variable" in res.stderr and "\\$ORIGIN" in res.stderr


def test_failure_names_the_step_and_shows_the_log(tmp_path):
    config = _config(tmp_path, cache_entries={"FIXTURE_BREAK": "ON", "CMAKE_INSTALL_PREFIX": "$$INSTALLDIR$$"})
    res = _run(tmp_path, config)
    assert res.returncode == 1
    assert "build failed" in res.stderr and "the fixture was asked to break" in res.stderr


def test_outputs_come_from_the_install_dir_only(tmp_path):
    # Built but not installed: the real rule finds nothing in $INSTALLDIR, and neither does this.
    res = _run(tmp_path, _config(tmp_path, install=False, output_dirs=[]))
    assert res.returncode == 1 and "declared output hello is not in the install directory" in res.stderr


def test_postfix_script_installs_what_cmake_does_not(tmp_path):
    script = 'mkdir -p "$INSTALLDIR/bin" "$INSTALLDIR/lib" && cp -L hello "$INSTALLDIR/bin/" && cp -L libgreet.so.1 "$INSTALLDIR/lib/"'
    res = _run(tmp_path, _config(tmp_path, install=False, output_dirs=[], postfix_script=script))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out/fixture/bin/hello").is_file()


def test_undeclared_output_is_an_error(tmp_path):
    res = _run(tmp_path, _config(tmp_path, outputs=["out/fixture/bin/not-a-target"]))
    assert res.returncode == 1 and "declared output not-a-target is not in the install directory" in res.stderr


def test_dependencies_are_copied_under_ext_build_deps(tmp_path):
    dep = tmp_path / "out" / "dep"
    (dep / "lib").mkdir(parents=True)
    (dep / "lib" / "marker.txt").write_text("x")
    script = 'test -f "$EXT_BUILD_DEPS/dep/lib/marker.txt"'
    res = _run(tmp_path, _config(tmp_path, deps=[{"lib_name": "dep", "install_dir": "out/dep"}], postfix_script=script))
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("value, expected", [
    ("\\$ORIGIN/../lib;\\$ORIGIN", "$ORIGIN/../lib;$ORIGIN"),
    ("$$EXT_BUILD_ROOT$$/x", "/root/x"),
    ("${EXT_BUILD_ROOT}/x", "/root/x"),
    ("-ffile-prefix-map=$EXT_BUILD_ROOT=.", "-ffile-prefix-map=/root=."),
    ("cost $ 5", "cost $ 5"),
    ("a\\b", "a\\b"),
])
def test_expansion_matches_bash_double_quotes(value, expected):
    assert cmake_build.expand(value, {"EXT_BUILD_ROOT": "/root"}, "t") == expected
    assert _bash(value, {"EXT_BUILD_ROOT": "/root"}) == (0, expected)


@pytest.mark.parametrize("value", ["$(id)", "`id`", "${EXT_BUILD_ROOT:-x}", "$UNSET_THING", "$$", "$-", "$1"])
def test_what_the_stand_in_does_not_evaluate_is_refused(value):
    with pytest.raises(cmake_build.BuildError):
        cmake_build.expand(value, {"EXT_BUILD_ROOT": "/root"}, "t")


def _bash(value: str, variables: dict[str, str]) -> tuple[int, str]:
    assert '"' not in value
    escaped = cmake_build._PLACEHOLDER.sub(lambda m: "$" + m[1], value)  # the real rule's framework does this first
    proc = subprocess.run(["bash", "-c", f'set -u; printf %s "{escaped}"'], env=dict(variables, PATH=os.environ.get("PATH", "/usr/bin:/bin")),
                          capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab$\\{}_/ORIGN.=;-", max_size=24))
def test_expansion_agrees_with_bash_or_refuses(value):
    variables = {"EXT_BUILD_ROOT": "/root", "ORIGIN_SET": "o"}
    try:
        ours = cmake_build.expand(value, variables, "t")
    except cmake_build.BuildError:
        return  # refused: the stand-in never builds with a value it could not expand as bash would
    rc, theirs = _bash(value, variables)
    assert rc == 0 and theirs == ours, (value, ours, theirs)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
