"""op_oracle compares every element of every node (runner >= 0.4.0): on the committed CPU runs' raw
files, a change to one element that llama-eval-callback never printed fails its op, with the
node's sum left as it was; a run without its dumps fails; a truncated dump is refused."""

from __future__ import annotations

import os
import pathlib
import shutil
import struct
import sys

import numpy as np
import pytest

from tools.runner import log_blocks
from tools.runner.checks import op_oracle as oo
from tools.runner.checks.op_oracle_dump import NodeDumpError, read_dump

RUNS = pathlib.Path(os.environ.get("TEST_SRCDIR", ""), "lanes", "evidence", "runs")
MODEL = pathlib.Path(os.environ.get("TEST_SRCDIR", ""), "lanes", "tools", "model", "tiny_llama_f32.gguf")


def _runs_with_dumps() -> list[pathlib.Path]:
    return sorted(p.parent for p in RUNS.glob("linux-x86_64-cpu.*/logs/op_oracle.fa_off.nodes"))


@pytest.fixture(params=_runs_with_dumps() or [None], ids=lambda p: p.parent.name if p else "none")
def logs(request, tmp_path) -> pathlib.Path:
    assert request.param is not None, f"no committed CPU run under {RUNS} has op_oracle node dumps"
    copy = tmp_path / "logs"
    copy.mkdir()
    for f in request.param.glob("op_oracle.*"):
        shutil.copyfile(f, copy / f.name)
    return copy


@pytest.fixture(autouse=True)
def judged_as_its_runner():
    with log_blocks.judging_run_of("lanes-runner 0.4.0"):
        yield


def _values_offset(data: bytes, index: int) -> int:
    """Where node `index`'s values start, walking the layout op_oracle_dump documents."""
    at = 8  # the magic
    for i in range(index + 1):
        for _ in range(3):  # name, op, type: u32 length + bytes
            at += 4 + struct.unpack_from("<I", data, at)[0]
        at += 32  # ne[4]
        count = struct.unpack_from("<Q", data, at)[0]
        at += 8
        if i == index:
            return at
        at += 4 * count
    raise AssertionError("unreachable")


def test_the_committed_runs_pass(logs):
    assert oo.problems(logs, MODEL) == []


def test_an_unprinted_element_changed_fails_with_the_sum_unchanged(logs):
    dump = logs / oo.dump_name("off")
    nodes = read_dump(dump)
    # A MUL_MAT output wide enough that elements 3 and 4 of dim 0 are never printed (3 each side).
    index = next(i for i, n in enumerate(nodes) if n.op == "MUL_MAT" and n.ne[0] > 8 and n.values.size)
    node = nodes[index]
    data = bytearray(dump.read_bytes())
    at = _values_offset(bytes(data), index)
    assert np.array_equal(np.frombuffer(bytes(data[at:at + node.values.nbytes]), dtype="<f4"), node.values)
    values = node.values.copy()
    delta = np.float32(max(1.0, float(np.abs(values).max())))
    values[3] += delta
    values[4] -= delta  # the node's sum stays what debug.cpp printed
    data[at:at + values.nbytes] = values.astype("<f4").tobytes()
    dump.write_bytes(bytes(data))
    problems = oo.problems(logs, MODEL)
    assert any("MUL_MAT" in p for p in problems), problems


def test_a_run_without_its_dump_fails(logs):
    (logs / oo.dump_name("on")).unlink()
    with pytest.raises(FileNotFoundError):
        oo.problems(logs, MODEL)


def test_a_truncated_dump_is_refused(logs):
    dump = logs / oo.dump_name("off")
    dump.write_bytes(dump.read_bytes()[:-100])
    with pytest.raises(NodeDumpError, match="truncated|trailer"):
        read_dump(dump)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
