"""Model-level parity: the lane's logits for a fixed prompt against an independent oracle.

CPU lane: llama-logits vs the float64 NumPy reference of the model's architecture
(tools/model/references.py: llama and qwen2 in reference_forward.py, gemma3 in reference_gemma3.py).
Accelerator lanes: llama-logits with full offload vs the CPU lane's llama-logits on the same
prompt and model (the CPU lane is itself certified against the NumPy reference).

Both logits arrays are kept (reference_parity.logits.npz, compressed, digested with the log), so
every figure is recomputed from them by recompute(). Fail closed: any NaN/Inf in either array
fails, and so does a comparison with too few decisive positions (reference top-1 margin above
TIE_MARGIN): where nothing has a clear top-1, top-1 agreement proves nothing.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

import gguf
import numpy as np

from proto import runner_report_pb2 as rpb
from tools.model import prompt_tokenizer, reference_forward, references
from tools.runner import exits, log_blocks
from tools.runner.checks.base import Check, option
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult

STEP = "reference_parity"
LOGITS_FILE = f"{STEP}.logits.npz"
TIE_MARGIN = 0.1  # nats between the reference's top-1 and top-2 for a position to count as decisive
# Fewer positions than this prove little (a lane that tokenizes the prompt as BOS alone gives one).
MIN_TOKENS = 16
# The comparisons kept in the logits file: (figure prefix, reference array, lane array). The first
# is the check's main comparison; the others are there when the arrays are.
# On the CPU lane "reference" is the float64 forward pass itself; an accelerator's is the CPU lane,
# with "float64" beside it where the model is one the float64 reference computes.
# A run split over several GPUs (--gpus >= 2) also compares its logits with the same lane on one GPU
# of the set ("single_gpu"), at the accelerator bounds: the split must not change what the lane computes.
COMPARISONS = (("", "reference", "lane"), ("fa_on.", "reference", "lane_fa_on"), ("float64.", "float64", "lane"),
               ("single_gpu.", "single_gpu", "lane"))

# Models with quantized weights: ggml quantizes the activations to 8 bits in every quantized matmul
# (the weight type's vec_dot_type: Q8_0, Q8_1 or Q8_K), so per-logit deltas of order 1 and flipped
# near-ties are the kernels working as designed; the distribution is what must agree. Measured
# against the float64 reference on a 31-33 token prompt (docs/models.md): SmolLM2-135M Q4_1 max
# |dlogit| 0.97, mean KL 0.0032, max KL 0.0095; Qwen2.5-Coder-0.5B Q4_K_M 0.65 / 0.0010 / 0.0054;
# Gemma 3 270M Q4_K_M 1.29 / 0.0039 / 0.011; top-1 flips only where the reference's margin was
# < 0.17 nats. The bounds apply to a model only when every quantized type it holds was measured.
# A real model on a short prompt is often undecided between continuations: a quarter of the
# positions leading by 0.5 nats is enough to judge top-1 agreement; the KL judges every position.
QUANTIZED_BOUNDS = {"tol_max_abs_delta_logit": 5.0, "tol_mean_kl": 0.03, "tol_top1_agreement_decisive": 0.95,
                    "tie_margin": 0.5, "tol_min_decisive_fraction": 0.25}
MEASURED_QUANTIZED_TYPES = ("F16", "Q4_1", "Q4_K", "Q5_0", "Q6_K", "Q8_0")
# F16 weights are no exception: their matmuls round the activations to F16 (vec_dot_type F16).
_EXACT_TYPES = ("F32",)


class UnmeasuredQuantizationError(ValueError):
    """The model holds a quantized type no parity bound was measured for."""


def quantized_types(model: pathlib.Path) -> tuple[str, ...]:
    """The model's tensor types other than F32, sorted."""
    reader = gguf.GGUFReader(model, "r")
    return tuple(sorted({t.tensor_type.name for t in reader.tensors} - set(_EXACT_TYPES)))


def model_bounds(model: pathlib.Path) -> dict[str, float]:
    """The bounds that replace the F32 ones for this model (empty: an F32 model); a quantized
    type without a measured bound is refused by name, never given another type's bound."""
    types = quantized_types(model)
    if not types:
        return {}
    unmeasured = [t for t in types if t not in MEASURED_QUANTIZED_TYPES]
    if unmeasured:
        raise UnmeasuredQuantizationError(
            f"{model}: no parity bound was measured for tensor type(s) {', '.join(unmeasured)} "
            f"(measured: {', '.join(MEASURED_QUANTIZED_TYPES)}); measure them against the float64 reference first")
    return dict(QUANTIZED_BOUNDS)



def logits_command(ctx: RunContext, bin_path: pathlib.Path, out: pathlib.Path, offload: bool,
                   flash_attn: str = "auto", single_gpu: bool = False) -> list[str]:
    argv = [str(bin_path), "-m", str(ctx.config.model), "-p", ctx.config.parity_prompt, "-o", str(out),
            "-t", str(ctx.config.threads), "-fa", flash_attn]
    if flash_attn == "off":
        argv += ["-ctk", "f32", "-ctv", "f32"]  # an F16 cache would round K/V as well
    if offload and single_gpu:  # the split run's first GPU alone: the baseline the split is compared with
        argv += ["-ngl", "99", "-dev", ctx.split_args()[1].split(",")[0], "-sm", "none"]
    elif offload:
        argv += ["-ngl", "99", *ctx.split_args()]
    return argv


def tolerances(ctx: RunContext, bounds: dict[str, float] | None = None) -> dict[str, float]:
    """This lane's tolerances, as given to the step (its configuration file); `bounds` (a quantized
    model's, model_bounds) replace the F32 ones."""
    cfg = ctx.config
    delta, kl = ((cfg.parity_max_abs_delta, cfg.parity_max_mean_kl) if ctx.lane.is_accelerator
                 else (cfg.reference_max_abs_delta, cfg.reference_max_mean_kl))
    return {"tol_max_abs_delta_logit": delta, "tol_mean_kl": kl, "tol_top1_agreement_decisive": cfg.parity_min_top1,
            "tol_min_decisive_fraction": cfg.parity_min_decisive_fraction, "tie_margin": TIE_MARGIN,
            "tol_min_tokens": float(MIN_TOKENS)} | (bounds or {})


def secondary_tolerances(ctx: RunContext, bounds: dict[str, float] | None = None) -> dict[str, float]:
    """Flash attention on (F16 KV cache) against float64, and an accelerator against float64: the
    F16 rounding of K/V puts them at the accelerator's bounds, not the F32 path's (a quantized
    model's bounds are looser than both)."""
    cfg = ctx.config
    return {"tol_max_abs_delta_logit": cfg.parity_max_abs_delta, "tol_mean_kl": cfg.parity_max_mean_kl,
            "tol_top1_agreement_decisive": cfg.parity_min_top1,
            "tol_min_decisive_fraction": cfg.parity_min_decisive_fraction, "tie_margin": TIE_MARGIN} | (bounds or {})


def compare(ref: np.ndarray, got: np.ndarray, tie_margin: float = TIE_MARGIN) -> tuple[dict[str, int], dict[str, float]]:
    """(counts, metrics) of `got` against `ref` ([n_tokens, n_vocab]). With any non-finite value
    the numeric metrics are left out (they would be NaN) and counts.nonfinite_* say why."""
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    if ref.ndim != 2 or ref.shape != got.shape:
        raise ValueError(f"logits shapes differ: reference {ref.shape} vs lane {got.shape}")
    counts = {"n_tokens": int(ref.shape[0]), "n_vocab": int(ref.shape[1]),
              "nonfinite_reference": int((~np.isfinite(ref)).sum()), "nonfinite_lane": int((~np.isfinite(got)).sum())}
    if counts["nonfinite_reference"] or counts["nonfinite_lane"] or ref.shape[0] == 0 or ref.shape[1] < 2:
        counts["n_decisive"] = 0
        return counts, {}

    def log_softmax(x: np.ndarray) -> np.ndarray:
        x = x - x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))

    lp_ref, lp_got = log_softmax(ref), log_softmax(got)
    kl = (np.exp(lp_ref) * (lp_ref - lp_got)).sum(axis=1)
    top2 = np.sort(ref, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    decisive = margin > tie_margin
    agree = ref.argmax(axis=1) == got.argmax(axis=1)
    counts["n_decisive"] = int(decisive.sum())
    metrics = {
        "max_abs_delta_logit": float(np.max(np.abs(ref - got))),
        "top1_agreement": float(agree.mean()),
        "min_ref_top1_margin": float(margin.min()),
        "mean_kl": float(kl.mean()),
        "max_kl": float(kl.max()),
    }
    if decisive.any():  # no decisive position: no agreement figure at all (never a vacuous 1.0)
        metrics["top1_agreement_decisive"] = float(agree[decisive].mean())
    return counts, metrics


def judge(counts: dict[str, int], metrics: dict[str, float], tol: dict[str, float]) -> list[str]:
    problems = []
    if counts.get("nonfinite_lane") or counts.get("nonfinite_reference"):
        problems.append(f"non-finite logits: {counts.get('nonfinite_lane', 0)} in the lane's, "
                        f"{counts.get('nonfinite_reference', 0)} in the reference's")
        return problems
    n, n_decisive = counts.get("n_tokens", 0), counts.get("n_decisive", 0)
    need = max(1, math.ceil(tol["tol_min_decisive_fraction"] * n))
    if n_decisive < need:
        problems.append(f"only {n_decisive} of {n} positions have a decisive reference top-1 (margin > "
                        f"{tol['tie_margin']:g}); need {need}: top-1 agreement would prove nothing")

    # `not (x <= tol)`: a NaN or missing figure fails instead of slipping past a `>` comparison.
    def within(key: str, limit: float, upper: bool = True) -> bool:
        x = metrics.get(key, math.nan)
        return x <= limit if upper else x >= limit

    if not within("max_abs_delta_logit", tol["tol_max_abs_delta_logit"]):
        problems.append(f"max |delta logit| {metrics.get('max_abs_delta_logit', math.nan):.4g} > {tol['tol_max_abs_delta_logit']:g}")
    if not within("mean_kl", tol["tol_mean_kl"]):
        problems.append(f"mean KL {metrics.get('mean_kl', math.nan):.3g} > {tol['tol_mean_kl']:g}")
    if n_decisive and not within("top1_agreement_decisive", tol["tol_top1_agreement_decisive"], upper=False):
        problems.append(f"top-1 agreement on decisive positions {metrics.get('top1_agreement_decisive', math.nan):.3f} "
                        f"< {tol['tol_top1_agreement_decisive']:g}")
    return problems


def save_logits(path: pathlib.Path, arrays: dict[str, np.ndarray]) -> None:
    # Exactly the arrays compared: the lane's float32 as llama-logits wrote them, the references as
    # computed (float64 for the NumPy oracle, float32 for the CPU lane), the prompt's token ids as
    # the lane used them and as the model's vocabulary gives them.
    with open(path, "wb") as f:
        np.savez_compressed(f, **{k: np.asarray(v) for k, v in arrays.items()})


def read_tolerances(config: dict[str, str], prefix: str = "") -> dict[str, float]:
    return {k[len(prefix):]: float(v) for k, v in config.items()
            if k.startswith(prefix) and k[len(prefix):].startswith(("tol_", "tie_margin"))}


def _tokens_figures(z) -> dict[str, int]:
    lane, expected = np.asarray(z["tokens"]), np.asarray(z["expected_tokens"])
    same = lane.shape == expected.shape and bool(np.array_equal(lane, expected))
    return {"n_expected_tokens": int(expected.size), "n_lane_tokens": int(lane.size), "tokens_match_vocabulary": int(same)}


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    logs_dir = pathlib.Path(logs_dir)
    config = log_blocks.step_config(logs_dir, STEP)
    counts: dict[str, int] = {}
    metrics: dict[str, float] = {}
    with np.load(logs_dir / LOGITS_FILE, allow_pickle=False) as z:
        for prefix, ref_key, lane_key in COMPARISONS:
            if ref_key not in z.files or lane_key not in z.files:
                continue
            if prefix == "fa_on." and "cpu_lane" in z.files:
                continue  # flash attention on is compared end to end on the CPU lane only
            tol = read_tolerances(config, prefix)
            c, m = compare(z[ref_key], z[lane_key], tol.get("tie_margin", TIE_MARGIN))
            counts.update({prefix + k: v for k, v in c.items()})
            metrics.update({prefix + k: v for k, v in m.items()})
            metrics.update({prefix + k: v for k, v in tol.items()})
        if "expected_tokens" in z.files:  # runs that recorded their prompt (runner 0.3.0 on)
            counts.update(_tokens_figures(z))
        if "cpu_lane" in z.files:  # accelerators: the CPU lane's own logits, compared with the lane's
            same = z["cpu_lane"].shape == z["lane"].shape and bool(np.array_equal(z["cpu_lane"], z["lane"]))
            counts["identical_to_cpu_lane"] = int(same)
    return counts, metrics


def loosened_bounds(config: dict[str, str]) -> list[str]:
    """Tolerances in the step's configuration looser than its model's quantized types allow (runs
    that recorded the types). F32 models get the flags' bounds, which the
    runner's strictness check holds to the defaults."""
    if "quantized_types" not in config:
        return []
    types = [t for t in config["quantized_types"].split(",") if t]
    if not types:
        return []
    unmeasured = [t for t in types if t not in MEASURED_QUANTIZED_TYPES]
    if unmeasured:
        return [f"no parity bound was measured for tensor type(s) {', '.join(unmeasured)}"]
    out = []
    for prefix in ("", "fa_on.", "float64.", "single_gpu."):
        for key, bound in QUANTIZED_BOUNDS.items():
            if prefix + key not in config:
                continue
            value = float(config[prefix + key])
            lower_is_looser = key in ("tol_top1_agreement_decisive", "tol_min_decisive_fraction")
            looser = value < bound if lower_is_looser else value != bound if key == "tie_margin" else value > bound
            if looser or math.isnan(value):
                out.append(f"{prefix}{key}={value:g} is looser than the quantized bound {bound:g}")
    return out


def judge_all(counts: dict[str, int], metrics: dict[str, float], config: dict[str, str]) -> list[str]:
    """Every reason the figures fail: the main comparison, the secondary ones, the tokens."""
    out: list[str] = loosened_bounds(config)
    # A run that recorded its prompt (every current one: the prompt is in its config file) is judged
    # on its tokens; older runs recorded neither.
    judged_on_tokens = "prompt" in config
    if judged_on_tokens and not counts.get("tokens_match_vocabulary"):
        out.append(f"the lane's {counts.get('n_lane_tokens', 0)} prompt token(s) differ from the model vocabulary's "
                   f"{counts.get('n_expected_tokens', 0)} tokens of the prompt (tokenized independently of the lane)")
    min_tokens = float(config.get("tol_min_tokens", MIN_TOKENS))
    if judged_on_tokens and counts.get("n_tokens", 0) < min_tokens:
        out.append(f"only {counts.get('n_tokens', 0)} token positions compared; need at least {min_tokens:g}")
    if counts.get("identical_to_cpu_lane"):
        out.append("the lane's logits are bit-identical to the CPU lane's (max |delta logit| 0): not computed on the device")
    if "n_tokens" not in counts:
        return out  # no comparison was possible (the reasons above say why)
    for prefix, _, _ in COMPARISONS:
        if prefix and f"{prefix}n_tokens" not in counts:
            continue
        strip = {k[len(prefix):]: v for k, v in counts.items() if k.startswith(prefix)} if prefix else counts
        mstrip = {k[len(prefix):]: v for k, v in metrics.items() if k.startswith(prefix)} if prefix else metrics
        label = {"": "", "fa_on.": "flash attention on vs float64: ", "float64.": "vs the float64 reference: ",
                 "single_gpu.": "vs the same lane on one GPU: "}[prefix]
        out += [label + p for p in judge(strip, mstrip, read_tolerances(config, prefix))]
    return out


def _read(res, path: pathlib.Path):
    if res.exit_code != 0 or not path.is_file():
        raise RuntimeError(f"{pathlib.Path(res.argv[0]).name} exited {exits.describe(res.exit_code)} without logits")
    return reference_forward.read_logits_file(path)


def _float64_reference(model: pathlib.Path, tokens: np.ndarray, required: bool) -> np.ndarray | None:
    """The NumPy float64 forward pass, where a reference implements the model (required on the CPU lane)."""
    try:
        return references.forward(model, tokens)
    except ValueError:
        if required:
            raise
        return None


def run_reference_parity(ctx: RunContext, step: Step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    cfg = ctx.config
    accel = ctx.lane.is_accelerator
    try:
        bounds = model_bounds(cfg.model)
    except (UnmeasuredQuantizationError, OSError, ValueError) as err:
        return CR.FAIL, f"{type(err).__name__}: {err}"
    step.config("quantized_types", ",".join(quantized_types(cfg.model)))
    for key, value in tolerances(ctx, bounds).items():
        step.config(key, f"{value!r}")
    for prefix in ("fa_on.", "float64."):
        for key, value in secondary_tolerances(ctx, bounds).items():
            step.config(prefix + key, f"{value!r}")
    split = accel and getattr(cfg, "gpus", 1) >= 2
    if split:
        for key, value in secondary_tolerances(ctx, bounds).items():
            step.config("single_gpu." + key, f"{value!r}")
    step.config("prompt", cfg.parity_prompt)
    arrays: dict[str, np.ndarray] = {}
    try:
        expected = np.asarray(prompt_tokenizer.from_gguf(cfg.model).encode(cfg.parity_prompt), np.int32)
    except (prompt_tokenizer.TokenizerError, ValueError) as err:
        return CR.FAIL, f"cannot tokenize the prompt independently of the lane: {err}"
    arrays["expected_tokens"] = expected
    got_path = ctx.scratch_dir / "lane.logits"
    # Against the float64 reference: flash attention off and an F32 KV cache, since either would
    # round K/V to F16 and hide real errors under a loose tolerance; flash attention on is compared
    # end to end too, at the F16 bounds.
    flash_attn = "auto" if accel else "off"
    res = step.run(logits_command(ctx, ctx.bin("llama-logits"), got_path, accel, flash_attn), cfg.timeout_s)
    step.result.exit_code = res.exit_code
    try:
        tokens, got = _read(res, got_path)
        arrays.update(tokens=tokens, lane=got)
        if not np.array_equal(tokens, expected):
            # Nothing to compare position by position: the figures record the mismatch alone.
            return _fail_on_tokens(ctx, step, arrays)
        if accel:
            ref_path = ctx.scratch_dir / "cpu_lane.logits"
            ref_res = step.run(logits_command(ctx, ctx.bin("llama-logits", cfg.cpu_lane_dir), ref_path, False), cfg.timeout_s)
            ref_tokens, ref = _read(ref_res, ref_path)
            if not np.array_equal(tokens, ref_tokens):
                return CR.FAIL, "the lane and the CPU lane tokenized the prompt differently"
            arrays.update(reference=ref, cpu_lane=ref)
            float64 = _float64_reference(cfg.model, expected, required=False)
            if float64 is not None:
                arrays["float64"] = float64
            oracle = "CPU lane llama-logits" + (" and the NumPy float64 reference" if "float64" in arrays else "")
            if split:
                one_path = ctx.scratch_dir / "single_gpu.logits"
                one_res = step.run(logits_command(ctx, ctx.bin("llama-logits"), one_path, True, flash_attn, single_gpu=True),
                                   cfg.timeout_s)
                one_tokens, one = _read(one_res, one_path)
                if not np.array_equal(tokens, one_tokens):
                    return CR.FAIL, "the split run and the one-GPU run tokenized the prompt differently"
                arrays["single_gpu"] = one
                oracle += " (and the lane on one GPU)"
        else:
            step.log(f"reference: NumPy float64 forward of {cfg.model} over {len(expected)} tokens")
            ref = _float64_reference(cfg.model, expected, required=True)
            arrays["reference"] = ref
            fa_path = ctx.scratch_dir / "lane_fa_on.logits"
            fa_res = step.run(logits_command(ctx, ctx.bin("llama-logits"), fa_path, False, "on"), cfg.timeout_s)
            fa_tokens, fa_got = _read(fa_res, fa_path)
            if not np.array_equal(fa_tokens, tokens):
                return CR.FAIL, "llama-logits tokenized the prompt differently with flash attention on"
            arrays["lane_fa_on"] = fa_got
            oracle = "NumPy float64 reference"
    except (RuntimeError, ValueError, KeyError) as err:
        return CR.FAIL, f"{type(err).__name__}: {err}"
    logits_path = ctx.logs_dir / LOGITS_FILE
    save_logits(logits_path, arrays)
    step.extra_logs.append(logits_path)
    step.log(f"oracle: {oracle}; logits kept in {LOGITS_FILE} (arrays {', '.join(sorted(arrays))})")
    try:
        counts, metrics = recompute(ctx.logs_dir)
    except ValueError as err:
        return CR.FAIL, f"{type(err).__name__}: {err}"
    step.log(f"comparison vs {oracle}: {counts} {metrics}")
    step.result.counts.update(counts)
    step.result.metrics.update(metrics)
    found = judge_all(counts, metrics, log_blocks.step_config(ctx.logs_dir, STEP))
    if found:
        return CR.FAIL, f"vs {oracle}: " + "; ".join(found)
    return CR.PASS, (f"vs {oracle}: max|dlogit| {metrics['max_abs_delta_logit']:.3g}, mean KL {metrics['mean_kl']:.2g}, "
                     f"top-1 {metrics['top1_agreement']:.3f} over {counts['n_tokens']} tokens "
                     f"({counts['n_decisive']} decisive, agreement there {metrics['top1_agreement_decisive']:.3f})"
                     + (f"; flash attention on: max|dlogit| {metrics['fa_on.max_abs_delta_logit']:.3g}"
                        if "fa_on.max_abs_delta_logit" in metrics else "")
                     + (f"; vs float64: max|dlogit| {metrics['float64.max_abs_delta_logit']:.3g}"
                        if accel and "float64.max_abs_delta_logit" in metrics else "")
                     + (f"; vs one GPU: max|dlogit| {metrics['single_gpu.max_abs_delta_logit']:.3g}, "
                        f"mean KL {metrics['single_gpu.mean_kl']:.2g}" if "single_gpu.max_abs_delta_logit" in metrics else ""))


def _fail_on_tokens(ctx: RunContext, step: Step, arrays: dict[str, np.ndarray]) -> tuple[int, str]:
    logits_path = ctx.logs_dir / LOGITS_FILE
    save_logits(logits_path, arrays)
    step.extra_logs.append(logits_path)
    counts, metrics = recompute(ctx.logs_dir)
    step.result.counts.update(counts)
    step.result.metrics.update(metrics)
    lane, want = arrays["tokens"].tolist(), arrays["expected_tokens"].tolist()
    step.log(f"lane tokens {lane}\nvocabulary tokens {want}")
    return CR.FAIL, "; ".join(judge_all(counts, metrics, log_blocks.step_config(ctx.logs_dir, STEP)))


def problems(logs_dir: pathlib.Path) -> list[str]:
    """Why the raw files fail this check (empty = PASS): the audit re-derives the verdict from them."""
    logs_dir = pathlib.Path(logs_dir)
    counts, metrics = recompute(logs_dir)
    return judge_all(counts, metrics, log_blocks.step_config(logs_dir, STEP))


@dataclasses.dataclass(frozen=True)
class Options:
    # Model-level parity tolerances (defaults measured on the tiny F32 model, see README.md).
    parity_max_abs_delta: float = option(0.05, "reference_parity: max |delta logit|.")
    parity_max_mean_kl: float = option(1e-4, "reference_parity: max mean KL (nats).")
    # On positions whose reference top-1 margin is decisive.
    parity_min_top1: float = option(1.0, "reference_parity: min top-1 agreement on decisive positions.")
    # A comparison where few positions have a clear top-1 (margin > 0.1 nats) proves little.
    parity_min_decisive_fraction: float = option(0.5)
    # CPU lane vs the float64 NumPy reference, flash attention off (measured 1.2e-5 / 9e-13 on F32).
    reference_max_abs_delta: float = option(1e-3)
    reference_max_mean_kl: float = option(1e-8)


CHECK = Check(name="reference_parity", run=run_reference_parity, recompute=recompute, problems=problems,
              figures=("max_abs_delta_logit", "mean_kl", "top1_agreement"), options=Options)
