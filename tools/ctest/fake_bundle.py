"""A fake lane's CTest bundle (shell scripts for test executables) and a fake lane to run it against.

Shared by the bundle's own tests and the runner's upstream_ctest step tests.
"""

from __future__ import annotations

import json
import pathlib

from tools.ctest import bundle

LANE_ID = "linux-x86_64-fake"
SRC, BUILD = "/fake/exec/external/llama_cpp/src", "/tmp/cmake-x/build"
# What CMake writes for tests/CMakeLists.txt, with the build action's absolute paths.
CTEST_FILE = f"""# CMake generated Testfile for
# Source directory: {SRC}/tests
# Build directory: {BUILD}/tests
#
add_test([=[test-tok-llama]=] "{BUILD}/bin/test-tok" "{SRC}/models/vocab-llama.gguf")
set_tests_properties([=[test-tok-llama]=] PROPERTIES  LABELS "main" WORKING_DIRECTORY "." _BACKTRACE_TRIPLES "x;1;y")
add_test([=[test-chat]=] "{BUILD}/bin/test-chat")
set_tests_properties([=[test-chat]=] PROPERTIES  LABELS "main" WORKING_DIRECTORY "{SRC}")
add_test([=[test-gen]=] "{BUILD}/bin/test-gen" "-o" "{BUILD}/tests/test-models/")
set_tests_properties([=[test-gen]=] PROPERTIES  LABELS "main" WORKING_DIRECTORY ".")
add_test([=[test-autorelease]=] "{BUILD}/bin/test-autorelease")
set_tests_properties([=[test-autorelease]=] PROPERTIES  LABELS "model" WORKING_DIRECTORY ".")
add_test([=[test-download]=] "/bin/sh" "-DDEST={BUILD}/tinyllamas/x.gguf" "-P" "{SRC}/cmake/download.cmake")
"""
SCRIPTS = {
    # Relocation: the vocabulary and its companion file are found in the bundle.
    "test-tok": 'test -f "$1" && test -f "$1.inp" && echo "tokenized $1"',
    # Runs in the source root and reads a template by relative path.
    "test-chat": 'test -f models/templates/a.jinja && echo chat ok',
    # Writes into the build tree (a directory configure made).
    "test-gen": 'test -d "$2" && touch "$2/m.gguf"',
    # Upstream's model tests: a warning and exit 0 without a model.
    "test-autorelease": 'if [ -z "$LLAMACPP_TEST_MODELFILE" ]; then echo "WARNING: No model file provided. Skipping this test."; exit 0; fi; test -f "$LLAMACPP_TEST_MODELFILE"',
}
SPEC = {
    # The test executables (lanes.bzl CTEST_TARGETS): the spec says these must run.
    "targets": ["test-tok", "test-chat", "test-gen", "test-autorelease"],
    "test_dirs": ["tests"],
    "excluded": {"test-download": "network: downloads a model"},
    "labels": ["main", "model"],
    "source_data": ["models/templates"],
    "covered_elsewhere": {"test-backend-ops": "fixture_parity runs it"},
}


# A bundle that lies (issue 23 class 10): one `echo ok` test beside the spec's exclusion.
ECHO_CTEST_FILE = f"""# CMake generated Testfile for
# Source directory: {SRC}/tests
# Build directory: {BUILD}/tests
#
add_test([=[test-ok]=] "/bin/echo" "ok")
set_tests_properties([=[test-ok]=] PROPERTIES  LABELS "main" WORKING_DIRECTORY ".")
add_test([=[test-download]=] "/bin/sh" "-DDEST={BUILD}/tinyllamas/x.gguf" "-P" "{SRC}/cmake/download.cmake")
"""


def make_bundle(tmp: pathlib.Path, scripts: dict[str, str] = SCRIPTS, spec: dict = SPEC,
                lane_id: str = LANE_ID, ctest_file: str = CTEST_FILE) -> pathlib.Path:
    tree = tmp / "stage"
    (tree / "tests").mkdir(parents=True)
    (tree / "tests" / "CTestTestfile.cmake").write_text(ctest_file)
    binaries = []
    for name, body in scripts.items():
        path = tmp / "built" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)
        binaries.append(path)
    src = tmp / "src"
    (src / "models" / "templates").mkdir(parents=True)
    for rel in ["models/vocab-llama.gguf", "models/vocab-llama.gguf.inp", "models/templates/a.jinja", "models/unused.gguf"]:
        (src / rel).write_text(rel)
    out = tmp / "bundle"
    bundle.make(lane_id, spec, tree, binaries, src, out)
    return out


def lane_dir(tmp: pathlib.Path) -> pathlib.Path:
    lane = tmp / "lane"
    (lane / "lib").mkdir(parents=True)
    (lane / "lib" / "libllama.so.0").write_text("")
    return lane


def write_spec(path: pathlib.Path, lane_id: str = LANE_ID, spec: dict = SPEC) -> pathlib.Path:
    """A lane spec (spec.json) whose lane has this CTest entry."""
    path.write_text(json.dumps({"schema_version": 1, "lanes": {lane_id: {"ctest": spec}}}))
    return path
