"""Corpus-level parity: the lane's next-token distributions over a fixed English corpus against a
reference, and the model's perplexity there against the model lock's quality ceiling.

The lane runs its own llama-perplexity (upstream's tool for exactly this) over the committed corpus
(third_party/corpus, refused when its sha256 differs from CORPUS_SHA256) in chunks of CONTEXT
tokens, writing upstream's --kl-divergence-base file: per scored position (the second half of each
chunk) the log-probabilities of the whole vocabulary, 16-bit quantized over the top 16 nats. The
runner reads that file itself, bounded and size-checked (nothing the tool prints is a figure), and
compares each position with the reference:

- CPU lane: the float64 NumPy reference of the model's architecture (tools/model/references.py) over
  REFERENCE_CHUNKS chunks drawn with the OS's CSPRNG after the lane has written its file (the
  reference costs ~1 min per 256 tokens of a 300M model on 2 cores, so it sees fewer tokens than
  the lane's perplexity; a lane cannot know which of its chunks will be checked).
- Accelerator lanes: the CPU lane's llama-perplexity over the same chunks, with the same recipe.

Per position the runner keeps the figures that make every reported number (next token, the lane's
and the reference's negative log-likelihood, KL(reference || lane), both top-1s and the reference's
top-1 margin) in corpus_parity.positions.npz, digested with the log; the logits files themselves are
hundreds of megabytes (a 262k vocabulary), so their sha256 is recorded in the step's configuration
and they are not kept. The audit re-derives every figure and the verdict from the positions file.
"""

from __future__ import annotations

import hashlib
import math
import os
import pathlib
import secrets
import stat
import struct
import tempfile
from collections.abc import Iterator

import numpy as np

from proto import runner_report_pb2 as rpb
from tools.core.digest import sha256_file
from tools.model import model_lock, prompt_tokenizer, references
from tools.runner import exits, log_blocks
from tools.runner.checks import reference_parity
from tools.runner.checks.base import Check
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult

STEP = "corpus_parity"
POSITIONS_FILE = f"{STEP}.positions.npz"
CORPUS = pathlib.Path(__file__).resolve().parents[3] / "third_party" / "corpus" / "gnu-gpl-3-and-2.txt"
# The GNU GPL v3 then v2 texts verbatim (their own terms allow verbatim copies): 53,241 bytes of
# English, ~11-13k tokens in the locked models' vocabularies.
CORPUS_SHA256 = "66238ec94d15c6b607603ebcde62cfb5c89bc83d3a2c175990e386c80081dc19"
MAX_CORPUS_BYTES = 1 << 20
# 258 tokens a chunk: upstream scores positions n_ctx/2 .. n_ctx-2, so the last verified output is
# at position 256: sequences of 257 tokens, past the 256 cells per slot of the serving recipe.
CONTEXT = 258
# 32 chunks: 8,256 tokens evaluated, 4,096 scored.
LANE_CHUNKS = 32
REFERENCE_CHUNKS = 2
MIN_SCORED = 4000
ROWS_PER_CHUNK = CONTEXT - 1 - CONTEXT // 2
KLD_MAGIC = b"_logits_"
# Upstream's quantization of a row: log-probabilities within 16 nats of the top, 65535 steps.
KLD_RANGE_NATS = 16.0
_MAX_SCALE = KLD_RANGE_NATS / 65535.0 * (1 + 1e-5)
# A KL or NLL an exact computation cannot produce (float rounding aside).
_NEGATIVE_SLACK = -1e-9

# Bounds per kind of comparison. "exact": an F32 model on the CPU lane (F32 KV, no flash attention)
# vs float64; "f16": an F32 model on an accelerator vs the CPU lane (F16 KV cache, flash attention
# as the recipe says); "quantized": any model with quantized tensors (ggml quantizes activations to
# 8 bits in every quantized matmul). Measured on the CPU lane (zen4) vs float64 over 254 positions:
# SmolLM2-135M Q4_1 mean KL 0.0029, p99 0.014, ppl ratio 0.992; Qwen2.5-Coder-0.5B Q4_K_M 0.0019 /
# 0.0135 / 1.006; Gemma 3 270M Q4_K_M 0.0046 / 0.022 / 1.005; top-1 on decisive positions 1.0 for
# all three; the embedded F32 model 1.1e-9 / 3.2e-9 / 1.000003 (docs/models.md). Both sides are compared as upstream
# stores them (as_stored), so a figure includes the 16-bit rounding of each (~1e-8 nats of KL).
BOUNDS = {
    "exact": {"tol_mean_kl": 1e-7, "tol_p99_kl": 1e-6, "tol_top1_agreement_decisive": 1.0,
              "tol_abs_log_ppl_ratio": 1e-4, "tie_margin": 0.1, "tol_min_decisive_fraction": 0.25},
    "f16": {"tol_mean_kl": 1e-3, "tol_p99_kl": 1e-2, "tol_top1_agreement_decisive": 0.99,
            "tol_abs_log_ppl_ratio": 1e-2, "tie_margin": 0.1, "tol_min_decisive_fraction": 0.25},
    "quantized": {"tol_mean_kl": 0.03, "tol_p99_kl": 0.1, "tol_top1_agreement_decisive": 0.95,
                  "tol_abs_log_ppl_ratio": 0.03, "tie_margin": 0.5, "tol_min_decisive_fraction": 0.25},
}
_LOWER_IS_LOOSER = ("tol_top1_agreement_decisive", "tol_min_decisive_fraction")
_INT_CONFIG = {"context": CONTEXT, "lane_chunks": LANE_CHUNKS, "min_scored": MIN_SCORED}


class CorpusError(ValueError):
    """The corpus, or a logits file written over it, is not what the run needs."""


def read_corpus(path: pathlib.Path = CORPUS) -> tuple[str, str]:
    """(text, sha256) of the committed corpus; any other bytes are refused."""
    with open(path, "rb") as f:
        data = f.read(MAX_CORPUS_BYTES + 1)
    if len(data) > MAX_CORPUS_BYTES:
        raise CorpusError(f"{path}: larger than {MAX_CORPUS_BYTES} bytes; use the committed corpus")
    sha = hashlib.sha256(data).hexdigest()
    if sha != CORPUS_SHA256:
        raise CorpusError(f"{path}: sha256 {sha} differs from the committed corpus's {CORPUS_SHA256}; "
                          "restore third_party/corpus from git (a corpus is part of the recipe: it is never swapped)")
    return data.decode("utf-8"), sha


def bounds_kind(quantized: tuple[str, ...], accelerator: bool) -> str:
    return "quantized" if quantized else "f16" if accelerator else "exact"


def perplexity_command(ctx: RunContext, bin_path: pathlib.Path, out: pathlib.Path, offload: bool,
                       exact: bool) -> list[str]:
    argv = [str(bin_path), "-m", str(ctx.config.model), "-f", str(CORPUS), "-c", str(CONTEXT), "-b", str(CONTEXT),
            "--chunks", str(LANE_CHUNKS), "--kl-divergence-base", str(out), "-t", str(ctx.config.threads)]
    # Against float64: flash attention off and an F32 KV cache, as in reference_parity.
    argv += ["-fa", "off", "-ctk", "f32", "-ctv", "f32"] if exact else ["-fa", "auto"]
    if offload:
        argv += ["-ngl", "99", *ctx.split_args()]
    return argv


# ---- upstream's --kl-divergence-base file ---------------------------------------------------------

class KldFile:
    """A --kl-divergence-base file, read with every size checked against the file's length:
    b"_logits_", i32 n_ctx, i32 n_vocab, i32 n_chunk, i32 tokens[n_chunk*n_ctx], then per chunk
    n_ctx-1-n_ctx/2 rows of nv = 2*((n_vocab+1)/2)+4 uint16 (f32 scale, f32 min log-prob, values).

    The file is opened once, without following a symlink, and must be a regular file with one
    link: every later read (header, digest, rows) is from that descriptor, so a lane that leaves a
    link to it where another process will write cannot change what is read."""

    def __init__(self, path: pathlib.Path, n_vocab: int, n_chunk: int) -> None:
        self.path = pathlib.Path(path)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as err:
            raise CorpusError(f"{path}: cannot be opened as a plain file ({err.strerror})") from None
        self.file = os.fdopen(fd, "rb")
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            self.file.close()
            raise CorpusError(f"{path}: not a regular file with a single link (links: {st.st_nlink})")
        head = self._read_at(0, 20)
        if head[:8] != KLD_MAGIC:
            self.file.close()
            raise CorpusError(f"{path}: not a llama-perplexity --kl-divergence-base file")
        self.n_ctx, self.n_vocab, self.n_chunk = struct.unpack_from("<iii", head, 8)
        if self.n_ctx != CONTEXT or self.n_vocab != n_vocab or self.n_chunk != n_chunk:
            self.file.close()
            raise CorpusError(f"{path}: n_ctx={self.n_ctx} n_vocab={self.n_vocab} n_chunk={self.n_chunk}; "
                              f"the run asked for n_ctx={CONTEXT}, the model's {n_vocab} tokens, {n_chunk} chunks")
        self.first = self.n_ctx // 2
        self.rows_per_chunk = self.n_ctx - 1 - self.first
        self.nv = 2 * ((self.n_vocab + 1) // 2) + 4
        self.rows_offset = 20 + 4 * self.n_chunk * self.n_ctx
        expected = self.rows_offset + 2 * self.nv * self.rows_per_chunk * self.n_chunk
        if st.st_size != expected:
            self.file.close()
            raise CorpusError(f"{path}: {st.st_size} bytes, but its header implies {expected}")

    def _read_at(self, offset: int, size: int) -> bytes:
        self.file.seek(offset)
        data = self.file.read(size)
        if len(data) != size:
            raise CorpusError(f"{self.path}: {len(data)} of {size} bytes at offset {offset}: the file changed")
        return data

    def close(self) -> None:
        self.file.close()

    def tokens(self) -> np.ndarray:
        data = self._read_at(20, 4 * self.n_chunk * self.n_ctx)
        return np.frombuffer(data, dtype="<i4").astype(np.int64)

    def rows(self) -> Iterator[np.ndarray]:
        """Each scored position's normalized log-probabilities (float64 [n_vocab]), in file order."""
        size = 2 * self.nv
        for i in range(self.n_chunk * self.rows_per_chunk):
            raw = np.frombuffer(self._read_at(self.rows_offset + i * size, size), dtype="<u2")
            scale, min_log_prob = (float(x) for x in raw[:4].view("<f4"))
            # Upstream writes scale = (top - low) / 65535 with low >= top - 16, and a log-probability <= 0.
            if not (0 <= scale <= _MAX_SCALE and -1e30 < min_log_prob <= 0):
                raise CorpusError(f"{self.path}: row {i}: scale {scale!r} / minimum {min_log_prob!r} is not upstream's "
                                  "log-probability quantization")
            yield _normalized(min_log_prob + scale * raw[4:4 + self.n_vocab].astype(np.float64))

    def sha256(self) -> str:
        h = hashlib.sha256()
        self.file.seek(0)
        for block in iter(lambda: self.file.read(1 << 20), b""):
            h.update(block)
        return h.hexdigest()


def _normalized(log_probs: np.ndarray) -> np.ndarray:
    top = log_probs.max()
    return log_probs - (top + math.log(np.exp(log_probs - top).sum()))


def as_stored(logits: np.ndarray) -> np.ndarray:
    """A reference row through upstream's storage (clamped 16 nats below the top, 65535 steps), then
    normalized: both sides of a comparison pass the same lossy channel, so a next token 20 nats
    below the top (an untrained model's) counts alike on both."""
    x = np.asarray(logits, np.float64)
    top = float(x.max())
    low = max(float(x.min()), top - KLD_RANGE_NATS)
    scale = (top - low) / 65535.0
    if scale == 0:
        return _normalized(np.zeros_like(x))
    q = np.where(x > low, np.rint((x - low) / scale), 0.0)
    return _normalized(q * scale)


# ---- per-position figures ------------------------------------------------------------------------

POSITION_ARRAYS = ("next_token", "lane_nll", "lane_top1", "compared", "reference_nll", "reference_top1",
                   "reference_margin", "kl")


def position_figures(lane_rows: Iterator[np.ndarray], reference_rows: Iterator[np.ndarray | None],
                     next_tokens: np.ndarray) -> dict[str, np.ndarray]:
    """Per scored position: the lane's NLL of the next token and top-1, and where the reference has
    a row, its NLL, top-1, top-1 margin and KL(reference || lane)."""
    n = len(next_tokens)
    out = {"next_token": np.asarray(next_tokens, np.int64), "lane_nll": np.full(n, np.nan),
           "lane_top1": np.full(n, -1, np.int64), "compared": np.zeros(n, bool), "reference_nll": np.full(n, np.nan),
           "reference_top1": np.full(n, -1, np.int64), "reference_margin": np.full(n, np.nan), "kl": np.full(n, np.nan)}
    for i, (lane, ref) in enumerate(zip(lane_rows, reference_rows, strict=True)):
        tok = int(next_tokens[i])
        out["lane_nll"][i] = -lane[tok]
        out["lane_top1"][i] = int(lane.argmax())
        if ref is None:
            continue
        top2 = np.partition(ref, -2)[-2:]
        out["compared"][i] = True
        out["reference_nll"][i] = -ref[tok]
        out["reference_top1"][i] = int(ref.argmax())
        out["reference_margin"][i] = float(top2.max() - top2.min())
        out["kl"][i] = float((np.exp(ref) * (ref - lane)).sum())
    return out


def reference_rows(chunks: list[int]) -> np.ndarray:
    """The scored positions (row indices) of the given chunks."""
    return np.array([c * ROWS_PER_CHUNK + r for c in sorted(chunks) for r in range(ROWS_PER_CHUNK)], np.int64)


def shape_problems(z: dict[str, np.ndarray], chunks: list[int] | None) -> list[str]:
    """What no honest run writes: arrays of different lengths, positions not the corpus's, a
    comparison outside the drawn chunks, a KL or NLL below zero, a top-1 outside the vocabulary."""
    n = z["lane_nll"].size
    out = []
    if any(np.asarray(z[k]).shape != (n,) for k in POSITION_ARRAYS):
        return [f"{POSITIONS_FILE}: per-position arrays of different shapes"]
    if z["tokens"].size and n != z["tokens"].size // CONTEXT * ROWS_PER_CHUNK:
        out.append(f"{POSITIONS_FILE}: {n} positions for {z['tokens'].size} tokens in chunks of {CONTEXT}")
    if chunks is not None:
        want = reference_rows(chunks)
        got = np.nonzero(np.asarray(z["compared"], bool))[0]
        if not np.array_equal(got, want[want < n]) or (n and want.max(initial=0) >= n):
            out.append(f"the compared positions are not those of the drawn chunks {sorted(chunks)}")
    compared = np.asarray(z["compared"], bool)
    for key, values in (("lane_nll", z["lane_nll"]), ("reference_nll", z["reference_nll"][compared]),
                        ("kl", z["kl"][compared]), ("reference_margin", z["reference_margin"][compared])):
        values = np.asarray(values, np.float64)
        if (values[np.isfinite(values)] < _NEGATIVE_SLACK).any():
            out.append(f"{POSITIONS_FILE}: negative {key}")
    return out


def figures(z: dict[str, np.ndarray], tie_margin: float) -> tuple[dict[str, int], dict[str, float]]:
    lane_nll = np.asarray(z["lane_nll"], np.float64)
    compared = np.asarray(z["compared"], bool)
    counts = {"n_scored": int(lane_nll.size), "n_compared": int(compared.sum()),
              "nonfinite": int((~np.isfinite(lane_nll)).sum() + (~np.isfinite(np.asarray(z["kl"])[compared])).sum())}
    metrics: dict[str, float] = {}
    if counts["nonfinite"] or not lane_nll.size:
        counts["n_decisive"] = 0
        return counts, metrics
    metrics["perplexity"] = float(math.exp(lane_nll.mean()))
    if not compared.any():
        counts["n_decisive"] = 0
        return counts, metrics
    kl = np.asarray(z["kl"], np.float64)[compared]
    ref_nll = np.asarray(z["reference_nll"], np.float64)[compared]
    agree = np.asarray(z["lane_top1"])[compared] == np.asarray(z["reference_top1"])[compared]
    decisive = np.asarray(z["reference_margin"], np.float64)[compared] > tie_margin
    counts["n_decisive"] = int(decisive.sum())
    ppl_lane, ppl_ref = math.exp(lane_nll[compared].mean()), math.exp(ref_nll.mean())
    metrics |= {"mean_kl": float(kl.mean()), "p99_kl": float(np.percentile(kl, 99)), "max_kl": float(kl.max()),
                "top1_agreement": float(agree.mean()), "compared_perplexity": ppl_lane,
                "reference_perplexity": ppl_ref, "ppl_ratio": ppl_lane / ppl_ref}
    if decisive.any():
        metrics["top1_agreement_decisive"] = float(agree[decisive].mean())
    return counts, metrics


# ---- the audit's view ----------------------------------------------------------------------------

def _tolerances(config: dict[str, str]) -> dict[str, float]:
    return reference_parity.read_tolerances(config)


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    logs_dir = pathlib.Path(logs_dir)
    config = log_blocks.step_config(logs_dir, STEP)
    tol = _tolerances(config)
    with np.load(logs_dir / POSITIONS_FILE, allow_pickle=False) as npz:
        z = {k: npz[k] for k in npz.files}
    missing = [k for k in (*POSITION_ARRAYS, "tokens", "expected_tokens") if k not in z]
    if missing:
        raise ValueError(f"{POSITIONS_FILE} lacks {', '.join(missing)}")
    counts, metrics = figures(z, tol.get("tie_margin", math.nan))
    lane, want = z["tokens"], z["expected_tokens"]
    # The corpus's tokens in the model's vocabulary, as the runner computed them (digest in the config).
    counts["expected_tokens_recorded"] = int(config.get("expected_tokens_sha256") == _token_digest(want))
    counts["tokens_match_vocabulary"] = int(lane.size > 0 and lane.size <= want.size
                                            and bool(np.array_equal(lane, want[:lane.size])))
    counts["next_tokens_match"] = int(bool(np.array_equal(z["next_token"], scored_next_tokens(lane))))
    chunks = _drawn_chunks(config)
    counts["well_formed"] = int(not shape_problems(z, chunks))
    counts["quality_ceiling"] = int("max_perplexity" in config)
    metrics |= tol
    if "max_perplexity" in config:
        metrics["max_perplexity"] = float(config["max_perplexity"])
    return counts, metrics


def _token_digest(tokens: np.ndarray) -> str:
    return hashlib.sha256(np.asarray(tokens, "<i4").tobytes()).hexdigest()


def _drawn_chunks(config: dict[str, str]) -> list[int] | None:
    """The chunks the runner drew for the float64 comparison (None: every chunk, an accelerator's)."""
    if config.get("reference") == "cpu_lane":
        return None
    try:
        return [int(c) for c in config.get("reference_chunks", "").split(",") if c]
    except ValueError:
        return []


def scored_next_tokens(tokens: np.ndarray) -> np.ndarray:
    """The token each scored position predicts: positions first..n_ctx-2 of every chunk."""
    first = CONTEXT // 2
    chunks = np.asarray(tokens).reshape(-1, CONTEXT) if len(tokens) % CONTEXT == 0 else np.zeros((0, CONTEXT))
    return chunks[:, first + 1:].reshape(-1).astype(np.int64)


def loosened(config: dict[str, str]) -> list[str]:
    """A configuration looser than its kind's bounds, or smaller than the recipe's sizes."""
    kind = config.get("bounds")
    if kind not in BOUNDS:
        return [f"bounds {kind!r} is not one of {', '.join(BOUNDS)}"]
    out = []
    for key, bound in BOUNDS[kind].items():
        try:
            value = float(config[key])
        except (KeyError, ValueError):
            out.append(f"{key} not recorded")
            continue
        looser = (value < bound if key in _LOWER_IS_LOOSER else value != bound if key == "tie_margin"
                  else value > bound)
        if looser or math.isnan(value):
            out.append(f"{key}={value:g} is looser than the {kind} bound {bound:g}")
    for key, want in _INT_CONFIG.items():
        if config.get(key) != str(want):
            out.append(f"{key}={config.get(key)!r}; the recipe is {want}")
    if config.get("corpus_sha256") != CORPUS_SHA256:
        out.append(f"corpus sha256 {config.get('corpus_sha256')!r} is not the committed corpus's")
    expected_kind = bounds_kind(tuple(t for t in config.get("quantized_types", "").split(",") if t),
                                config.get("reference", "") == "cpu_lane")
    if kind != expected_kind:
        out.append(f"bounds {kind!r} for a model and reference that need {expected_kind!r}")
    return out


def judge(counts: dict[str, int], metrics: dict[str, float], config: dict[str, str]) -> list[str]:
    out = loosened(config)
    tol = _tolerances(config)
    if not counts.get("expected_tokens_recorded"):
        out.append("the kept vocabulary tokens of the corpus are not those the runner recorded (expected_tokens_sha256)")
    if not counts.get("tokens_match_vocabulary"):
        out.append("the lane's corpus tokens differ from the model vocabulary's (tokenized independently of the lane)")
    if not counts.get("next_tokens_match"):
        out.append("the positions' next tokens are not the corpus tokens")
    if not counts.get("well_formed"):
        out.append(f"{POSITIONS_FILE} is not what a run writes (shapes, compared positions or signs)")
    chunks = _drawn_chunks(config)
    if chunks is not None and (len(set(chunks)) != REFERENCE_CHUNKS or not all(0 <= c < LANE_CHUNKS for c in chunks)):
        out.append(f"reference_chunks {config.get('reference_chunks')!r}: need {REFERENCE_CHUNKS} distinct chunks "
                   f"of 0..{LANE_CHUNKS - 1}")
    if counts.get("nonfinite"):
        out.append(f"{counts['nonfinite']} non-finite figure(s)")
        return out
    if counts.get("n_scored", 0) < MIN_SCORED:
        out.append(f"only {counts.get('n_scored', 0)} corpus positions scored; need {MIN_SCORED}")
    min_compared = REFERENCE_CHUNKS * ROWS_PER_CHUNK
    if config.get("reference") == "cpu_lane":
        min_compared = counts.get("n_scored", 0)
    if counts.get("n_compared", 0) < max(1, min_compared):
        out.append(f"only {counts.get('n_compared', 0)} positions compared with the reference; need {min_compared}")
    if "max_perplexity" in config and not metrics.get("perplexity", math.inf) <= float(config["max_perplexity"]):
        out.append(f"perplexity {metrics.get('perplexity', math.nan):.4g} over the corpus is above the model's "
                   f"quality ceiling {float(config['max_perplexity']):g} (model lock)")
    if not counts.get("n_compared"):
        return out
    n, n_decisive = counts["n_compared"], counts.get("n_decisive", 0)
    need = max(1, math.ceil(tol.get("tol_min_decisive_fraction", 1.0) * n))
    if n_decisive < need:
        out.append(f"only {n_decisive} of {n} compared positions have a decisive reference top-1; need {need}")

    def within(key: str, limit: float, upper: bool = True) -> bool:
        x = metrics.get(key, math.nan)
        return x <= limit if upper else x >= limit

    for key, tol_key in (("mean_kl", "tol_mean_kl"), ("p99_kl", "tol_p99_kl")):
        if not within(key, tol.get(tol_key, math.nan)):
            out.append(f"{key} {metrics.get(key, math.nan):.3g} > {tol.get(tol_key, math.nan):g}")
    if n_decisive and not within("top1_agreement_decisive", tol.get("tol_top1_agreement_decisive", math.nan), False):
        out.append(f"top-1 agreement on decisive positions {metrics.get('top1_agreement_decisive', math.nan):.4f} < "
                   f"{tol.get('tol_top1_agreement_decisive', math.nan):g}")
    log_ratio = abs(math.log(metrics["ppl_ratio"])) if metrics.get("ppl_ratio", 0) > 0 else math.inf
    if not log_ratio <= tol.get("tol_abs_log_ppl_ratio", math.nan):
        out.append(f"perplexity ratio lane/reference {metrics.get('ppl_ratio', math.nan):.5g} is outside "
                   f"exp(+-{tol.get('tol_abs_log_ppl_ratio', math.nan):g})")
    return out


def problems(logs_dir: pathlib.Path) -> list[str]:
    logs_dir = pathlib.Path(logs_dir)
    counts, metrics = recompute(logs_dir)
    return judge(counts, metrics, log_blocks.step_config(logs_dir, STEP))


# ---- the run -------------------------------------------------------------------------------------

def _model_vocab_size(model: pathlib.Path) -> int:
    import gguf
    reader = gguf.GGUFReader(model, "r")
    field = reader.fields.get("tokenizer.ggml.tokens")
    if field is None:
        raise CorpusError(f"{model}: no tokenizer.ggml.tokens")
    return len(field.data)


LOCK = pathlib.Path(__file__).resolve().parents[3] / model_lock.LOCK_PATH


def quality_ceiling(model: pathlib.Path, lock_path: pathlib.Path = LOCK) -> float | None:
    """The model lock's perplexity ceiling over the corpus for this exact file (None: not locked, or
    locked without one). An unreadable lock is an error, never "no ceiling"; the lock refuses one
    file locked twice."""
    lock = model_lock.load(lock_path)
    sha = sha256_file(model)
    ceilings = [m.max_corpus_perplexity for m in lock.models if any(f.sha256 == sha for f in m.files)]
    return float(ceilings[0]) if ceilings and ceilings[0] > 0 else None


def _run_kld(step: Step, ctx: RunContext, argv: list[str], out: pathlib.Path, n_vocab: int) -> KldFile:
    res = step.run(argv, ctx.config.timeout_s)
    step.result.exit_code = res.exit_code
    if res.exit_code != 0 or not out.is_file():
        raise RuntimeError(f"{pathlib.Path(argv[0]).name} exited {exits.describe(res.exit_code)} without its logits file")
    return KldFile(out, n_vocab, LANE_CHUNKS)


def _fresh_dir(ctx: RunContext, name: str) -> pathlib.Path:
    """A directory made now, under the run's scratch: nothing a process that ran before can have
    prepared there (a link where the next tool writes)."""
    return pathlib.Path(tempfile.mkdtemp(prefix=f"{name}-", dir=ctx.scratch_dir))


def _float64_rows(model: pathlib.Path, tokens: np.ndarray, bos: int | None, chunks: list[int], n_chunk: int
                  ) -> Iterator[np.ndarray | None]:
    module, loaded = references.load(model)
    first = CONTEXT // 2
    for c in range(n_chunk):
        if c not in chunks:
            yield from (None for _ in range(ROWS_PER_CHUNK))
            continue
        chunk = np.array(tokens[c * CONTEXT:(c + 1) * CONTEXT])
        if bos is not None:
            chunk[0] = bos  # as llama-perplexity: each chunk starts with BOS where the vocabulary adds one
        logits = module.forward(loaded, chunk)[first:CONTEXT - 1]
        for row in logits:
            yield as_stored(row)
        del logits


def run_corpus_parity(ctx: RunContext, step: Step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    cfg = ctx.config
    accel = ctx.lane.is_accelerator
    try:
        text, sha = read_corpus()
        quantized = reference_parity.quantized_types(cfg.model)
        reference_parity.model_bounds(cfg.model)  # a quantized type nobody measured is refused by name
        n_vocab = _model_vocab_size(cfg.model)
        tokenizer = prompt_tokenizer.from_gguf(cfg.model)
        expected = np.asarray(tokenizer.encode(text), np.int64)
        ceiling = quality_ceiling(cfg.model)
    except (model_lock.ModelLockError, CorpusError, reference_parity.UnmeasuredQuantizationError, prompt_tokenizer.TokenizerError,
            OSError, ValueError) as err:
        return CR.FAIL, f"{type(err).__name__}: {err}"
    kind = bounds_kind(quantized, accel)
    step.config("corpus", CORPUS.name)
    step.config("corpus_sha256", sha)
    step.config("expected_tokens_sha256", _token_digest(expected))
    step.config("quantized_types", ",".join(quantized))
    step.config("reference", "cpu_lane" if accel else "float64")
    step.config("bounds", kind)
    for key, value in BOUNDS[kind].items():
        step.config(key, f"{value!r}")
    for key, value in _INT_CONFIG.items():
        step.config(key, str(value))
    if ceiling is not None:
        step.config("max_perplexity", f"{ceiling!r}")
    step.log(f"corpus {CORPUS.name} sha256 {sha}: {len(expected)} tokens in the model's vocabulary; quality ceiling "
             + (f"{ceiling:g} (model lock)" if ceiling is not None else "none (the model is not in the model lock)"))
    if accel and cfg.cpu_lane_dir is None:
        return CR.FAIL, "an accelerator's corpus parity is against the certified CPU lane: pass --cpu_lane_dir"
    lane_out = _fresh_dir(ctx, "lane") / "lane.kld"
    opened: list[KldFile] = []
    try:
        lane = _run_kld(step, ctx, perplexity_command(ctx, ctx.bin("llama-perplexity"), lane_out, accel, not accel),
                        lane_out, n_vocab)
        opened.append(lane)
        step.config("lane_logits_sha256", lane.sha256())
        tokens = lane.tokens()
        if not (len(expected) >= len(tokens) and np.array_equal(tokens, expected[:len(tokens)])):
            return _finish(ctx, step, tokens, expected, None)
        next_tokens = scored_next_tokens(tokens)
        if accel:
            ref_out = _fresh_dir(ctx, "cpu-lane") / "cpu_lane.kld"
            ref = _run_kld(step, ctx, perplexity_command(ctx, ctx.bin("llama-perplexity", cfg.cpu_lane_dir), ref_out,
                                                         False, False), ref_out, n_vocab)
            opened.append(ref)
            step.config("reference_logits_sha256", ref.sha256())
            if not np.array_equal(ref.tokens(), tokens):
                return CR.FAIL, "the lane and the CPU lane tokenized the corpus differently"
            ref_rows: Iterator[np.ndarray | None] = ref.rows()
        else:
            bos = tokenizer.bos_id if tokenizer.add_bos else None
            # Drawn now, after the lane has written its file: it cannot know which chunks are checked.
            chunks = sorted(secrets.SystemRandom().sample(range(lane.n_chunk), REFERENCE_CHUNKS))
            step.config("reference_chunks", ",".join(str(c) for c in chunks))
            step.log(f"reference: NumPy float64 forward over chunks {chunks} (drawn with the OS's CSPRNG) of {CONTEXT} tokens")
            ref_rows = _float64_rows(cfg.model, tokens, bos, chunks, lane.n_chunk)
        positions = position_figures(lane.rows(), ref_rows, next_tokens)
    except (RuntimeError, CorpusError, ValueError, KeyError) as err:
        return CR.FAIL, f"{type(err).__name__}: {err}"
    finally:
        for f in opened:
            f.close()
    return _finish(ctx, step, tokens, expected, positions)


def _finish(ctx: RunContext, step: Step, tokens: np.ndarray, expected: np.ndarray,
            positions: dict[str, np.ndarray] | None) -> tuple[int, str]:
    if positions is None:  # tokens differ: nothing to compare position by position
        positions = position_figures(iter(()), iter(()), np.zeros(0, np.int64))
    path = ctx.logs_dir / POSITIONS_FILE
    with open(path, "wb") as f:
        np.savez_compressed(f, tokens=np.asarray(tokens, np.int32), expected_tokens=np.asarray(expected, np.int32),
                            **positions)
    step.extra_logs.append(path)
    counts, metrics = recompute(ctx.logs_dir)
    step.result.counts.update(counts)
    step.result.metrics.update(metrics)
    step.log(f"figures: {counts} {metrics}")
    found = judge(counts, metrics, log_blocks.step_config(ctx.logs_dir, STEP))
    if found:
        return CR.FAIL, "; ".join(found)
    return CR.PASS, (f"{counts['n_scored']} corpus positions, perplexity {metrics['perplexity']:.4g}"
                     + (f" (ceiling {metrics['max_perplexity']:g})" if "max_perplexity" in metrics
                        else " (no quality ceiling: the model is not in the model lock)")
                     + f"; vs the reference on {counts['n_compared']}: mean KL {metrics['mean_kl']:.3g}, "
                     f"p99 KL {metrics['p99_kl']:.3g}, top-1 {metrics['top1_agreement']:.4f} "
                     f"(decisive {metrics.get('top1_agreement_decisive', math.nan):.4f}), "
                     f"ppl {metrics['compared_perplexity']:.4g} vs {metrics['reference_perplexity']:.4g} "
                     f"(ratio {metrics['ppl_ratio']:.4f})")


CHECK = Check(name=STEP, run=run_corpus_parity, recompute=recompute, problems=problems,
              figures=("perplexity", "mean_kl", "p99_kl", "top1_agreement", "ppl_ratio"), since=(0, 5, 0))
