"""corpus_parity (tools/runner/checks/corpus_parity.py) on the CPU lane, and every way it must fail.

The check runs the lane's llama-perplexity over the committed corpus and compares each scored
position with the float64 reference. On the embedded F32 model it must pass; it must fail a lane
whose logits file was altered after the fact (one chunk's rows swapped, one row shifted), a corpus
whose digest differs, a logits file whose header or size lies, a perplexity above the model lock's
ceiling, and a step configuration looser than the bounds.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import struct
import sys

import numpy as np
import pytest

from tools.runner.checks import corpus_parity as cp
from tools.runner.config import RunnerConfig
from tools.runner.context import RunContext
from tools.runner.lane_spec import load_lane
from tools.runner.steps import Step

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", ".")) / "lanes"
LANE_DIR = RUNFILES / "lanes" / "cpu"


def _arg(name: str) -> pathlib.Path:
    for a in sys.argv:
        if a.startswith(f"--{name}="):
            return pathlib.Path(a.split("=", 1)[1]).resolve()
    raise AssertionError(f"run through Bazel (--{name}=)")


def _context(tmp: pathlib.Path, model: pathlib.Path, lane_dir: pathlib.Path = LANE_DIR) -> tuple[RunContext, Step]:
    (tmp / "logs").mkdir(parents=True)
    (tmp / "scratch").mkdir()
    cfg = RunnerConfig(lane="linux-x86_64-cpu", lane_dir=lane_dir, evidence=None, spec=_arg("spec"), model=model,
                       out_dir=tmp, report=tmp / "r.pb", threads=2)
    ctx = RunContext(config=cfg, lane=load_lane(cfg.spec, "linux-x86_64-cpu"), logs_dir=tmp / "logs",
                     scratch_dir=tmp / "scratch")
    return ctx, Step(cp.STEP, ctx.logs_dir, ctx.tracker)


def _run(tmp: pathlib.Path, model: pathlib.Path, lane_dir: pathlib.Path = LANE_DIR):
    ctx, step = _context(tmp, model, lane_dir)
    status, message = cp.run_corpus_parity(ctx, step, None)
    return status, message, ctx


# ---- the lane, honest and altered -----------------------------------------------------------------

@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("honest")
    status, message, ctx = _run(tmp, _arg("model"))
    return status, message, ctx


def test_the_cpu_lane_passes_on_the_embedded_model(honest):
    status, message, ctx = honest
    assert status == cp.CR.PASS, message
    counts, metrics = cp.recompute(ctx.logs_dir)
    assert counts["n_scored"] == cp.LANE_CHUNKS * cp.ROWS_PER_CHUNK >= cp.MIN_SCORED
    assert counts["n_compared"] == cp.REFERENCE_CHUNKS * cp.ROWS_PER_CHUNK
    assert metrics["mean_kl"] < 1e-7 and abs(metrics["ppl_ratio"] - 1) < 1e-4, metrics
    assert cp.problems(ctx.logs_dir) == []
    print(f"embedded model: {message}")


def _altering_lane(tmp: pathlib.Path, alteration: str) -> pathlib.Path:
    """The real lane, whose llama-perplexity alters its logits file after the real tool wrote it."""
    lane = tmp / "lane"
    shutil.copytree(LANE_DIR, lane, symlinks=True)
    real = lane / "bin" / "llama-perplexity.real"
    (lane / "bin" / "llama-perplexity").rename(real)
    alter = tmp / "alter.py"
    # Stdlib only: the runner gives lane processes no PYTHONPATH.
    alter.write_text(f"""import array, struct, sys
path = sys.argv[sys.argv.index("--kl-divergence-base") + 1]
data = bytearray(open(path, "rb").read())
n_ctx, n_vocab, n_chunk = struct.unpack_from("<iii", data, 8)
nv = 2 * ((n_vocab + 1) // 2) + 4
rows = 20 + 4 * n_chunk * n_ctx
row_bytes = 2 * nv
per_chunk = (n_ctx - 1 - n_ctx // 2) * row_bytes
# Every chunk is altered: the runner draws the chunks it checks after the file is written.
if {alteration!r} == "shift_chunks":  # each chunk's rows are the next chunk's: all well-formed
    body = data[rows:]
    data[rows:] = body[per_chunk:] + body[:per_chunk]
else:  # one position per chunk moved by up to a tenth of the range: a wrong kernel on one token
    for c in range(n_chunk):
        at = rows + c * per_chunk + 5 * row_bytes
        q = array.array("H", bytes(data[at + 8:at + row_bytes]))
        for i in range(len(q)):
            q[i] = min(65535, q[i] + (i % 7) * 900)
        data[at + 8:at + row_bytes] = q.tobytes()
open(path, "wb").write(bytes(data))
""")
    wrapper = lane / "bin" / "llama-perplexity"
    wrapper.write_text(f'#!/bin/sh\n"{real}" "$@" || exit $?\nexec "{sys.executable}" "{alter}" "$@"\n')
    wrapper.chmod(0o755)
    return lane


@pytest.mark.parametrize("alteration", ["shift_chunks", "one_row_per_chunk"])
def test_an_altered_logits_file_fails(tmp_path, alteration):
    lane = _altering_lane(tmp_path, alteration)
    status, message, ctx = _run(tmp_path / "run", _arg("model"), lane)
    assert status == cp.CR.FAIL, message
    assert "mean_kl" in message or "p99_kl" in message or "top-1" in message, message
    assert cp.problems(ctx.logs_dir), "the audit must re-derive the failure from the positions file"
    print(f"{alteration}: {message}")


def test_a_lane_that_crashes_fails_naming_it(tmp_path):
    lane = tmp_path / "lane"
    shutil.copytree(LANE_DIR, lane, symlinks=True)
    tool = lane / "bin" / "llama-perplexity"
    tool.unlink()
    tool.write_text("#!/bin/sh\nkill -SEGV $$\n")
    tool.chmod(0o755)
    status, message, _ = _run(tmp_path / "run", _arg("model"), lane)
    assert status == cp.CR.FAIL and "SIGSEGV" in message, message


# ---- the corpus and the logits file --------------------------------------------------------------

def test_a_corpus_with_other_bytes_is_refused(tmp_path):
    text, sha = cp.read_corpus()
    assert sha == cp.CORPUS_SHA256 and len(text) > 50_000
    other = tmp_path / "corpus.txt"
    other.write_text(text.replace("freedom", "fre3dom", 1))
    with pytest.raises(cp.CorpusError, match=r"corpus.txt: sha256 .* differs from the committed corpus"):
        cp.read_corpus(other)


def _kld(path: pathlib.Path, n_vocab: int, n_chunk: int, rows: np.ndarray | None = None) -> pathlib.Path:
    n_ctx = cp.CONTEXT
    nv = 2 * ((n_vocab + 1) // 2) + 4
    per = n_chunk * (n_ctx - 1 - n_ctx // 2)
    body = np.zeros((per, nv), "<u2")
    if rows is not None:
        body[:] = rows
    with open(path, "wb") as f:
        f.write(b"_logits_" + struct.pack("<iii", n_ctx, n_vocab, n_chunk))
        f.write(np.zeros(n_chunk * n_ctx, "<i4").tobytes())
        f.write(body.tobytes())
    return path


def test_a_logits_file_whose_header_or_size_lies_is_refused(tmp_path):
    good = _kld(tmp_path / "good.kld", 11, 2)
    cp.KldFile(good, 11, 2)
    with pytest.raises(cp.CorpusError, match="n_vocab=11"):
        cp.KldFile(good, 12, 2)
    with pytest.raises(cp.CorpusError, match="n_chunk=2"):
        cp.KldFile(good, 11, 1)
    linked = tmp_path / "linked.kld"
    os.link(good, linked)  # a second name for the file: another process could write it
    with pytest.raises(cp.CorpusError, match="single link"):
        cp.KldFile(good, 11, 2)
    linked.unlink()
    (tmp_path / "symlink.kld").symlink_to(good)
    with pytest.raises(cp.CorpusError, match="cannot be opened as a plain file"):
        cp.KldFile(tmp_path / "symlink.kld", 11, 2)
    short = tmp_path / "short.kld"
    short.write_bytes(good.read_bytes()[:-2])
    with pytest.raises(cp.CorpusError, match="bytes, but its header implies"):
        cp.KldFile(short, 11, 2)
    bad = tmp_path / "bad.kld"
    bad.write_bytes(b"_logitz_" + good.read_bytes()[8:])
    with pytest.raises(cp.CorpusError, match="not a llama-perplexity"):
        cp.KldFile(bad, 11, 2)
    rows = np.zeros((2 * cp.ROWS_PER_CHUNK, 2 * 6 + 4), "<u2")
    rows[:, :2] = np.frombuffer(np.array([np.inf], "<f4").tobytes(), "<u2")  # scale = +inf
    nan_scale = _kld(tmp_path / "inf.kld", 11, 2, rows)
    with pytest.raises(cp.CorpusError, match="not upstream's log-probability quantization"):
        list(cp.KldFile(nan_scale, 11, 2).rows())


def test_as_stored_matches_the_lanes_own_encoding(honest):
    # The float64 reference passes the channel the lane's rows pass: its KL to the lane is tiny.
    _, _, ctx = honest
    with np.load(ctx.logs_dir / cp.POSITIONS_FILE) as z:
        kl = z["kl"][z["compared"]]
    assert kl.max() < 1e-7
    logits = np.array([0.0, -1.0, -30.0, 5.0])
    stored = cp.as_stored(logits)
    assert np.isclose(np.exp(stored).sum(), 1.0)
    assert stored[2] == pytest.approx(stored.min())  # clamped 16 nats below the top, as upstream stores it


# ---- the judge ---------------------------------------------------------------------------------

def _config(ctx: RunContext) -> dict[str, str]:
    return cp.log_blocks.step_config(ctx.logs_dir, cp.STEP)


def test_the_judge_fails_loosened_bounds_a_ceiling_and_few_positions(honest):
    _, _, ctx = honest
    counts, metrics = cp.recompute(ctx.logs_dir)
    config = dict(_config(ctx))
    assert cp.judge(counts, metrics, config) == []
    assert any("looser" in p for p in cp.judge(counts, metrics, config | {"tol_mean_kl": "0.5"}))
    assert any("looser" in p for p in cp.judge(counts, metrics, config | {"tol_top1_agreement_decisive": "0.5"}))
    assert any("bounds 'quantized' for a model" in p for p in cp.judge(counts, metrics, config | {"bounds": "quantized"}))
    assert any("recipe is 32" in p for p in cp.judge(counts, metrics, config | {"lane_chunks": "4"}))
    assert any("quality ceiling" in p for p in cp.judge(counts, metrics, config | {"max_perplexity": "20.0"}))
    assert any("need 4000" in p for p in cp.judge(counts | {"n_scored": 100}, metrics, config))
    assert any("positions compared" in p for p in cp.judge(counts | {"n_compared": 10}, metrics, config))
    assert any("ratio" in p for p in cp.judge(counts, metrics | {"ppl_ratio": 1.01}, config))
    assert any("tokens differ" in p for p in cp.judge(counts | {"tokens_match_vocabulary": 0}, metrics, config))


@pytest.mark.parametrize("edit", ["other_chunk", "negative_kl", "expected_tokens", "short"])
def test_an_edited_positions_file_fails_the_audit(honest, tmp_path, edit):
    _, _, ctx = honest
    logs = tmp_path / "logs"
    shutil.copytree(ctx.logs_dir, logs)
    with np.load(logs / cp.POSITIONS_FILE) as z:
        arrays = {k: z[k].copy() for k in z.files}
    compared = arrays["compared"]
    if edit == "other_chunk":  # the comparison moved to chunks the runner did not draw
        arrays["compared"] = np.roll(compared, cp.ROWS_PER_CHUNK)
    elif edit == "negative_kl":
        arrays["kl"][np.nonzero(compared)[0][0]] = -1.0
    elif edit == "expected_tokens":
        arrays["expected_tokens"][5] += 1
        arrays["tokens"][5] += 1
    else:
        arrays = {k: (v[:-1] if v.shape == compared.shape else v) for k, v in arrays.items()}
    with open(logs / cp.POSITIONS_FILE, "wb") as f:
        np.savez_compressed(f, **arrays)
    found = cp.problems(logs)
    assert found, edit
    print(f"{edit}: {found[0]}")


def test_the_quality_ceiling_comes_from_the_lock(tmp_path):
    model = _arg("model")
    sha = cp.sha256_file(model)
    lock = json.loads(cp.LOCK.read_text())
    entry = {k: v for k, v in lock["models"][0].items() if k != "max_corpus_perplexity"}
    entry["files"] = [dict(entry["files"][0], sha256=sha)]
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(dict(lock, models=[dict(entry, max_corpus_perplexity=12.5)])))
    assert cp.quality_ceiling(model, path) == 12.5
    path.write_text(json.dumps(dict(lock, models=[entry])))
    assert cp.quality_ceiling(model, path) is None
    twin = dict(entry, name="twin", files=[dict(entry["files"][0], name="twin.gguf")], max_corpus_perplexity=13.0)
    path.write_text(json.dumps(dict(lock, models=[dict(entry, max_corpus_perplexity=12.5), twin])))
    with pytest.raises(cp.model_lock.ModelLockError, match="is also locked by model"):
        cp.quality_ceiling(model, path)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
