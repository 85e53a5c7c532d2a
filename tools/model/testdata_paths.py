"""Locates test inputs for the tools/model tests, under Bazel or from a plain checkout.

The vocab GGUF comes from (first match wins; neither is an error):
  1. a `--vocab=PATH` argument (Bazel passes `$(location ...)` through py_test `args`),
  2. the LANES_VOCAB_GGUF environment variable.
"""

from __future__ import annotations

import os
import pathlib

VOCAB_ENV = "LANES_VOCAB_GGUF"


def take_vocab_arg(argv: list[str]) -> list[str]:
    """Moves `--vocab=PATH` from argv into the environment; returns the remaining args for pytest."""
    rest = []
    for arg in argv:
        if arg.startswith("--vocab="):
            os.environ[VOCAB_ENV] = arg[len("--vocab="):]
        else:
            rest.append(arg)
    return rest


def _resolve(path: str) -> pathlib.Path:
    p = pathlib.Path(path)
    if p.exists():
        return p.resolve()
    # $(location @repo//:f) is "external/repo/f"; without legacy external runfiles it lives at
    # $TEST_SRCDIR/repo/f instead.
    srcdir = os.environ.get("TEST_SRCDIR")
    if srcdir and p.parts[:1] == ("external",):
        alt = pathlib.Path(srcdir, *p.parts[1:])
        if alt.exists():
            return alt.resolve()
    return p


def vocab_gguf() -> pathlib.Path:
    value = os.environ.get(VOCAB_ENV)
    if not value:
        raise RuntimeError(f"no vocab GGUF: pass --vocab=PATH or set {VOCAB_ENV} (bazel test passes the pinned one)")
    return _resolve(value)
