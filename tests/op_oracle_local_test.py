"""The local per-op oracle (tools/runner/checks/op_oracle_local.py) on the CPU lane's own graphs.

A small seeded model per architecture (tools/model/arch_models.py, quantized matrices) runs through
the lane's llama-eval-callback with its node dump, as op_oracle runs it; every node of the kept
blocks must be recomputed and pass. The same evaluation must fail a node whose dumped output was
moved by a fraction of its scale (a matmul, a RoPE, a norm), and a block whose input was swapped.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import pathlib
import shlex
import subprocess
import sys

import gguf
import numpy as np
import pytest

from tools.model import arch_models
from tools.runner.checks import op_oracle, op_oracle_local
from tools.runner.checks.op_oracle_dump import read_dump, write_dump
from tools.runner.checks.op_oracle_log import parse_runs

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."))
LANE_BIN = RUNFILES / "lanes" / "lanes" / "cpu" / "bin"
PROMPT = "The quick brown fox jumps over the lazy dog while 12 ravens watch from the old oak tree."
CASES = arch_models.LANE_TEST_CASES



@dataclasses.dataclass
class Evaluated:
    model: pathlib.Path
    run: object
    dumped: list
    reader: gguf.GGUFReader
    arch: op_oracle_local.Architecture
    keep: set[int]


@pytest.fixture(scope="module", params=sorted(CASES))
def evaluated(request, tmp_path_factory) -> Evaluated:
    arch_name = request.param
    vocab, qtype = CASES[arch_name]
    tmp = tmp_path_factory.mktemp(arch_name)
    model = arch_models.write_model(arch_name, arch_models.vocab_dir(sys.argv) / vocab, tmp / f"tiny-{arch_name}.gguf", qtype)
    dump = tmp / "nodes"
    argv = op_oracle.eval_command(LANE_BIN / "llama-eval-callback", model, PROMPT, 2, 42, "off", dump,
                                  op_oracle.LOCAL_N_CTX)
    for _ in range(3):
        # llama.cpp's asynchronous logger can lose the last printed nodes at exit (op_oracle
        # re-runs the same way).
        res = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        text = f"$ {shlex.join(str(a) for a in argv)}\n" + res.stdout + res.stderr
        run = parse_runs(text)[-1]
        if len(run.nodes) == len(read_dump(dump)):
            break
    reader = gguf.GGUFReader(model, "r")
    keep = op_oracle_local.keep_layers_for(arch_models.Shape().n_layer)
    kept, _ = op_oracle_local.stored_nodes(run.nodes, keep)
    full = read_dump(dump)
    assert len(full) == len(run.nodes)
    write_dump(tmp / "nodes.gz", [full[i] for i in kept])
    return Evaluated(model, run, read_dump(tmp / "nodes.gz"), reader, op_oracle_local.architecture(model, reader), keep)


def _results(e: Evaluated, dumped=None):
    return op_oracle_local.evaluate_run(e.run, dumped or e.dumped, e.reader, e.arch, e.keep)


def test_every_node_of_the_kept_blocks_is_recomputed_and_passes(evaluated: Evaluated) -> None:
    results = _results(evaluated)
    status = collections.Counter(r.status for r in results)
    per_op = collections.Counter(r.node.op for r in results if r.status == "pass")
    worst = max(r.worst_ratio for r in results if r.status == "pass")
    print(evaluated.model.name, dict(status), dict(per_op), f"worst error/tolerance {worst:.3f}")
    bad = [(r.node.name, r.node.op, r.why) for r in results if r.status in ("fail", "unresolved")]
    assert not bad, bad[:5]
    assert per_op["MUL_MAT"] and per_op["ROPE"] and per_op["RMS_NORM"] and per_op["SOFT_MAX"]


@pytest.mark.parametrize("op", ["MUL_MAT", "ROPE", "RMS_NORM", "SOFT_MAX"])
def test_a_node_moved_by_a_fraction_of_its_scale_fails(evaluated: Evaluated, op: str) -> None:
    kept, _ = op_oracle_local.stored_nodes(evaluated.run.nodes, evaluated.keep)
    at = next(k for k, i in enumerate(kept) if evaluated.run.nodes[i].op == op)
    d = evaluated.dumped[at]
    values = d.values.astype(np.float64).copy()
    rms = float(np.sqrt(np.mean(values ** 2)))
    values[len(values) // 2] += 0.05 * rms
    dumped = list(evaluated.dumped)
    dumped[at] = dataclasses.replace(d, values=values.astype(np.float32))
    failed = [r for r in _results(evaluated, dumped) if r.status == "fail"]
    assert failed and failed[0].node is evaluated.run.nodes[kept[at]], [(r.node.name, r.why) for r in failed]


def test_a_matmul_computed_from_another_input_fails(evaluated: Evaluated) -> None:
    # The lane's Q projection replaced by its K-sized neighbour's input statistics: a wrong row block.
    kept, _ = op_oracle_local.stored_nodes(evaluated.run.nodes, evaluated.keep)
    at = next(k for k, i in enumerate(kept) if evaluated.run.nodes[i].op == "MUL_MAT"
              and evaluated.run.nodes[i].src0.endswith("attn_q.weight"))
    d = evaluated.dumped[at]
    rolled = np.roll(d.values.reshape(-1, d.ne[0]), 1, axis=1).reshape(-1)
    dumped = list(evaluated.dumped)
    dumped[at] = dataclasses.replace(d, values=rolled)
    assert any(r.status == "fail" and r.node is evaluated.run.nodes[kept[at]] for r in _results(evaluated, dumped))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-s", "-p", "no:cacheprovider"]))
