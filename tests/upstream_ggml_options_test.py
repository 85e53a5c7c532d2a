"""The ggml options llama.cpp's top-level CMakeLists.txt sets before add_subdirectory(ggml), against the
lane spec's decisions (lanes.bzl UPSTREAM_GGML_OPTIONS): a lane's ggml stage is configured on its own
and misses each of them unless the spec sets it. An upstream bump that adds, drops or changes one
fails here until the spec decides it again."""

import json
import os
import pathlib
import re
import sys

import pytest

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."))
SPEC = RUNFILES / "lanes" / "lanes" / "spec.json"
TOP_CMAKELISTS = RUNFILES / "llama_cpp" / "src" / "CMakeLists.txt"
GGML_CMAKELISTS = RUNFILES / "llama_cpp" / "src" / "ggml" / "CMakeLists.txt"

_SET = re.compile(r"^\s*set\(\s*(GGML_[A-Z0-9_]+)\s+([^)\s]+)\s*\)", re.MULTILINE)
_OPTION = re.compile(r"^\s*option\(\s*(GGML_[A-Z0-9_]+)\s+\"[^\"]*\"\s+([^)\s]+)\s*\)", re.MULTILINE)
_ADD_GGML = re.compile(r"^\s*add_subdirectory\(\s*ggml\s*\)", re.MULTILINE)


class OptionsError(Exception):
    pass


def upstream_ggml_sets(top_cmakelists: str) -> dict[str, str]:
    """GGML_* variables the top-level CMakeLists.txt sets before it adds ggml, name -> value as written."""
    added = _ADD_GGML.search(top_cmakelists)
    if added is None:
        raise OptionsError("the top-level CMakeLists.txt never calls add_subdirectory(ggml)")
    found: dict[str, str] = {}
    for name, value in _SET.findall(top_cmakelists[:added.start()]):
        if name in found and found[name] != value:
            raise OptionsError(f"{name} is set twice before add_subdirectory(ggml), to {found[name]} and {value}")
        found[name] = value
    return found


def ggml_option_defaults(ggml_cmakelists: str) -> dict[str, str]:
    return dict(_OPTION.findall(ggml_cmakelists))


def problems(spec: dict, top_cmakelists: str, ggml_cmakelists: str) -> list[str]:
    """Every disagreement between the spec's decisions, the pinned CMake files and the lanes."""
    decided = spec["upstream_ggml_options"]
    upstream = upstream_ggml_sets(top_cmakelists)
    options = ggml_option_defaults(ggml_cmakelists)
    out = [f"{name}: set by the top-level CMakeLists.txt ({value}) but not decided in lanes.bzl UPSTREAM_GGML_OPTIONS"
           for name, value in sorted(upstream.items()) if name not in decided]
    out += [f"{name}: decided in lanes.bzl but the pinned top-level CMakeLists.txt no longer sets it"
            for name in sorted(decided) if name not in upstream]
    for name, decision in sorted(decided.items()):
        if name in upstream and decision["upstream"] != upstream[name]:
            out.append(f"{name}: upstream sets {upstream[name]}, lanes.bzl says {decision['upstream']}")
        if not decision.get("why"):
            out.append(f"{name}: no reason given for the decision")
        entry = decision.get("cache_entry", "")
        if not entry:
            continue
        # The decided cache entry must be the ggml option whose default upstream's variable feeds.
        if name.endswith("_DEFAULT") and options.get(entry) != "${" + name + "}":
            out.append(f"{name}: ggml's CMakeLists.txt has no option {entry} defaulting to ${{{name}}}")
        for lane_id, lane in sorted(spec["lanes"].items()):
            if lane["backend"] not in decision["backends"]:
                continue
            got = lane["ggml_cache_entries"].get(entry)
            if got != decision["value"]:
                out.append(f"{lane_id}: ggml cache entry {entry}={got}, upstream's build has {decision['value']}")
    return out


@pytest.fixture(scope="module")
def spec():
    return json.loads(SPEC.read_text())


@pytest.fixture(scope="module")
def top():
    return TOP_CMAKELISTS.read_text()


@pytest.fixture(scope="module")
def ggml():
    return GGML_CMAKELISTS.read_text()


def test_the_pinned_tree_sets_what_the_spec_decides(spec, top, ggml):
    assert problems(spec, top, ggml) == []
    # What the decisions mean for the GPU lanes the issue names.
    cuda = spec["lanes"]["linux-x86_64-cuda"]["ggml_cache_entries"]
    assert cuda["GGML_CUDA_GRAPHS"] == "ON" and cuda["GGML_LLAMAFILE"] == "ON"
    assert spec["lanes"]["linux-x86_64-vulkan"]["ggml_cache_entries"]["GGML_LLAMAFILE"] == "ON"


def test_the_parser_finds_the_pinned_sets(top):
    sets = upstream_ggml_sets(top)
    assert sets["GGML_LLAMAFILE_DEFAULT"] == "ON"
    assert sets["GGML_CUDA_GRAPHS_DEFAULT"] == "ON"


def test_a_new_upstream_option_fails(spec, top, ggml):
    bumped = top.replace("add_subdirectory(ggml)", "set(GGML_NEW_THING ON)\n    add_subdirectory(ggml)", 1)
    assert any("GGML_NEW_THING" in p and "not decided" in p for p in problems(spec, bumped, ggml))


def test_a_changed_upstream_value_fails(spec, top, ggml):
    changed = re.sub(r"set\(GGML_CUDA_GRAPHS_DEFAULT ON\)", "set(GGML_CUDA_GRAPHS_DEFAULT OFF)", top)
    assert changed != top
    assert any(p.startswith("GGML_CUDA_GRAPHS_DEFAULT: upstream sets OFF") for p in problems(spec, changed, ggml))


def test_a_dropped_upstream_option_fails(spec, top, ggml):
    dropped = re.sub(r"set\(GGML_LLAMAFILE_DEFAULT ON\)", "", top)
    assert any(p.startswith("GGML_LLAMAFILE_DEFAULT: decided") for p in problems(spec, dropped, ggml))


def test_a_lane_without_the_entry_fails(spec, top, ggml):
    lanes = json.loads(json.dumps(spec))
    del lanes["lanes"]["linux-x86_64-cuda"]["ggml_cache_entries"]["GGML_CUDA_GRAPHS"]
    lanes["lanes"]["linux-x86_64-vulkan"]["ggml_cache_entries"]["GGML_LLAMAFILE"] = "OFF"
    found = problems(lanes, top, ggml)
    assert "linux-x86_64-cuda: ggml cache entry GGML_CUDA_GRAPHS=None, upstream's build has ON" in found
    assert "linux-x86_64-vulkan: ggml cache entry GGML_LLAMAFILE=OFF, upstream's build has ON" in found


def test_an_entry_that_is_not_the_option_fails(spec, top, ggml):
    renamed = ggml.replace("option(GGML_CUDA_GRAPHS ", "option(GGML_CUDA_GRAPHZ ")
    assert any("no option GGML_CUDA_GRAPHS defaulting" in p for p in problems(spec, top, renamed))


def test_disagreeing_duplicates_are_refused(top):
    doubled = top.replace("add_subdirectory(ggml)", "set(GGML_LLAMAFILE_DEFAULT OFF)\n    add_subdirectory(ggml)", 1)
    with pytest.raises(OptionsError, match="set twice"):
        upstream_ggml_sets(doubled)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
