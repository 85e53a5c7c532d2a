"""host_cpu's tables are the pinned tree's: the variants and features of ggml/src/CMakeLists.txt and
the score bits of ggml-cpu/arch/x86/cpu-feats.cpp, read from the pinned source, so an upstream bump
that changes either fails here instead of silently choosing another variant."""

from __future__ import annotations

import pathlib
import re
import sys

import pytest

from tools.runner import host_cpu

_VARIANT = re.compile(r"^\s*ggml_add_cpu_backend_variant\((\w+)((?:\s+\w+)*)\s*\)", re.MULTILINE)
_BLOCK = re.compile(r"#ifdef GGML_(\w+)\n(.*?)#endif", re.DOTALL)
_SCORE = re.compile(r"score \+= 1(?:<<(\d+))?;")


def _source(relative: str) -> str:
    for arg in sys.argv:
        if arg.startswith("--ggml_cmakelists="):
            root = pathlib.Path(arg.split("=", 1)[1]).parents[1]  # .../ggml/src/CMakeLists.txt -> .../ggml
            return (root / relative).read_text()
    pytest.skip("run through Bazel (--ggml_cmakelists=)")


def test_variant_features_are_the_pinned_cmakelists():
    text = _source("src/CMakeLists.txt")
    x86 = text[text.index('if (GGML_SYSTEM_ARCH STREQUAL "x86")'):]
    x86 = x86[:x86.index("elseif(GGML_SYSTEM_ARCH")]
    pinned = {name: tuple(features.split()) for name, features in _VARIANT.findall(x86)}
    assert pinned == host_cpu.VARIANT_FEATURES


def test_score_bits_are_the_pinned_scorer():
    text = _source("src/ggml-cpu/arch/x86/cpu-feats.cpp")
    body = text[text.index("static int ggml_backend_cpu_x86_score()"):]
    body = body[:body.index("return score;")]
    scored = {}
    for feature, block in _BLOCK.findall(body):
        m = _SCORE.search(block)
        if m:
            scored[feature] = int(m.group(1) or 0)
    assert scored == {k: v for k, v in host_cpu.FEATURE_SCORE_BIT.items() if v is not None}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))  # --ggml_cmakelists= stays in sys.argv
