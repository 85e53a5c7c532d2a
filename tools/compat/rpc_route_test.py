"""recompute() of a mixed-route measurement: every figure from the raw files, every way it can fail."""

from __future__ import annotations

import hashlib
import json
import pathlib
from collections.abc import Callable

import numpy as np
import pytest
from google.protobuf import json_format

from proto import certification_pb2
from tools.compat import compat_record, rpc_route
from tools.runner import log_blocks
from tools.runner.checks import corpus_parity, reference_parity

PARTIES = ("route", "cuda", "vulkan", "cpu")
ROUTE = ["-ngl", str(rpc_route.OFFLOAD_ALL), "-rpc", "127.0.0.1:1,127.0.0.1:2", "-dev", "RPC0,RPC1"]
M = pathlib.Path("m.gguf")


def _route_argv(i: int, flags: rpc_route.RecipeFlags = rpc_route.RecipeFlags()) -> list[str]:
    return rpc_route.logits_argv(pathlib.Path("/lanes/cuda/bin/llama-logits"), M, f"p{i}", pathlib.Path("x"), 4, ROUTE,
                                 flags)


def _greedy_route_argv(i: int) -> list[str]:
    return rpc_route.greedy_argv(pathlib.Path("/lanes/cuda/bin/llama-completion"), M, f"p{i}", 4,
                                 ["-ngl", str(rpc_route.OFFLOAD_ALL), "--rpc", "127.0.0.1:1,127.0.0.1:2"])


def _perplexity_route_argv() -> list[str]:
    return rpc_route.perplexity_argv(pathlib.Path("/lanes/cuda/bin/llama-perplexity"), M, pathlib.Path("x.kld"), 4, ROUTE)


def _corpus_positions(kl: float = 0.001, nll_shift: float = 0.0) -> dict[str, np.ndarray]:
    """corpus.positions.npz as write_corpus_positions leaves it: 32 chunks of 258 tokens, every scored
    position compared, decisive, the same top-1, KL `kl`, the route's NLL `nll_shift` above the CPU lane's."""
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 1000, size=corpus_parity.LANE_CHUNKS * corpus_parity.CONTEXT).astype(np.int32)
    next_token = corpus_parity.scored_next_tokens(tokens)
    n = next_token.size
    top1 = rng.integers(0, 1000, size=n)
    nll = rng.uniform(1.0, 4.0, size=n)
    return {"tokens": tokens, "reference_tokens": tokens.copy(), "next_token": next_token, "lane_nll": nll + nll_shift,
            "lane_top1": top1, "compared": np.ones(n, bool), "reference_nll": nll, "reference_top1": top1,
            "reference_margin": np.full(n, 1.0), "kl": np.full(n, kl)}


_CORPUS_CONFIG = {"corpus_sha256": corpus_parity.CORPUS_SHA256, "corpus_quantized_types": "Q4_K,Q6_K",
                  "corpus_bounds": "quantized"}


def _write_run(out: pathlib.Path, *, route_noise: float = 0.0, split: tuple[str, ...] = ("RPC0", "RPC1"),
               versions: tuple[str, ...] = ("3.0.0", "3.0.0"), greedy_route: str = "the same words",
               greedy: dict[str, str] | None = None,
               kv_layers: tuple[str, ...] = ("RPC0", "RPC1"), logit_prompts: int | None = None,
               recipe: dict | None = None, logged_flags: rpc_route.RecipeFlags = rpc_route.RecipeFlags(),
               corpus: dict[str, np.ndarray] | None = None, corpus_config: dict | None = None,
               with_corpus: bool = True, n_prompts: int = 2) -> pathlib.Path:
    """A measurement's raw files as measure() writes them; `recipe` is compat.config.json's (default:
    what the logged route commands ran; {}: no config file, as a measurement made before it);
    `corpus`/`corpus_config` the corpus comparison's file and config (default: a compatible one;
    with_corpus=False: none, as a measurement made before the route had one)."""
    logs = out / "logs"
    logs.mkdir(parents=True)
    rng = np.random.default_rng(0)
    arrays = {}
    lines = ["# lanes-config tie_margin=0.1", f"# lanes-config prompts={n_prompts}", "# lanes-config model_sha256=" + "c" * 64,
             "# lanes-config endpoints=127.0.0.1:1,127.0.0.1:2", "# lanes-config tol_max_abs_delta_logit=0.05",
             f"# lanes-config lane.cuda=linux-x86_64-cuda sha256:{'1' * 64} sha256:{'a' * 64} CUDA0",
             f"# lanes-config lane.vulkan=linux-x86_64-vulkan sha256:{'2' * 64} sha256:{'b' * 64} Vulkan0",
             "# lanes-config tol_max_mean_kl=0.0001", "# lanes-config tol_min_top1_agreement=1.0",
             "# lanes-config tol_min_greedy_agreement=1.0"]
    if logit_prompts is not None:
        lines.append(f"# lanes-config logit_prompts={logit_prompts}")
    for i in range(n_prompts):
        base = rng.normal(size=(5, 40)).astype(np.float32)
        base[:, 0] += 5.0  # decisive top-1 everywhere
        tokens = np.arange(5, dtype=np.int32) + i
        for who in PARTIES:
            noise = route_noise if who == "route" else 0.0
            arrays[f"{who}.{i}.tokens"] = tokens
            arrays[f"{who}.{i}.logits"] = base + noise * rng.normal(size=base.shape).astype(np.float32)
            text = greedy_route if who == "route" else (greedy or {}).get(who, "the same words")
            (logs / f"greedy.{who}.{i}.txt").write_text(text)
        lines.append(log_blocks.command_line(_route_argv(i, logged_flags)))
        lines += [f"load_tensors: RPC0[127.0.0.1:{n + 1}] model buffer size =     2.00 MiB" for n, d in enumerate(split)]
        lines += [f"llama_kv_cache: layer   {n}: dev = {d}" for n, d in enumerate(kv_layers)]
        lines.append("# exit 0 after 0.50s")
        lines += [log_blocks.command_line(_greedy_route_argv(i), f"stdout: greedy.route.{i}.txt"), "# exit 0 after 0.10s"]
    route_argvs = [argv for i in range(n_prompts) for argv in (_route_argv(i), _greedy_route_argv(i))]
    config = {}
    if with_corpus:
        route_argvs.append(_perplexity_route_argv())
        lines.append(log_blocks.command_line(_perplexity_route_argv()))
        lines += [f"load_tensors: RPC0[127.0.0.1:{n + 1}] model buffer size =     2.00 MiB" for n, d in enumerate(split)]
        lines += [f"llama_kv_cache: layer   {n}: dev = {d}" for n, d in enumerate(kv_layers)]
        lines.append("# exit 0 after 2.00s")
        with open(logs / rpc_route.CORPUS_FILE, "wb") as f:
            np.savez_compressed(f, **(corpus if corpus is not None else _corpus_positions()))
        config.update(corpus_config if corpus_config is not None else _CORPUS_CONFIG)
    (logs / "compat.log").write_text("\n".join(lines) + "\n")
    if recipe is None:
        recipe = json_format.MessageToDict(rpc_route.recipe_from_argv(route_argvs))
        # The route's compared logits: 5 tokens a prompt; over the corpus, 257.
        recipe["longestSequenceTokens"] = corpus_parity.CONTEXT - 1 if with_corpus else 5
    if recipe:
        config[rpc_route.RECIPE_CONFIG_KEY] = json.dumps(recipe)
    if config:
        log_blocks.write_config(log_blocks.config_path(logs, "compat"), config)
    for alias, version in zip(("cuda", "vulkan"), versions):
        (logs / f"rpc.{alias}.log").write_text(f"Starting RPC server v{version}\n  endpoint : 127.0.0.1:1\n")
    with open(logs / rpc_route.LOGITS_FILE, "wb") as f:
        np.savez_compressed(f, **arrays)
    return out


def test_identical_route_is_compatible(tmp_path):
    result = rpc_route.recompute(_write_run(tmp_path))
    assert result["compatible"], result["problems"]
    assert result["rpc_protocol_version"] == "3.0.0"
    assert set(result["comparisons"]) == {"cuda", "vulkan", "cpu"}
    assert result["comparisons"]["cpu"]["greedy_agreement"] == 1.0
    assert result["worst"]["max_abs_delta_logit"] == 0.0


def _edit_log(out: pathlib.Path, old: str, new: str) -> None:
    log = out / "logs" / "compat.log"
    text = log.read_text()
    assert old in text
    log.write_text(text.replace(old, new, 1))


def test_a_lane_printing_configuration_into_its_output_is_refused(tmp_path):
    """A lane process's output (inside its command block) that prints `# lanes-config` lines would set
    the tolerances it is judged by: a measurement whose configuration is read from compat.log refuses it."""
    out = _write_run(tmp_path)
    _edit_log(out, "# exit 0 after 0.50s", "# lanes-config tol_max_mean_kl=1.0\n# exit 0 after 0.50s")
    result = rpc_route.recompute(out)
    assert not result["compatible"]
    assert any("command output(s) carry `# lanes-config` lines" in p for p in result["problems"]), result["problems"]


def test_the_configuration_file_is_the_only_source_when_it_has_every_value(tmp_path):
    """measure() writes every value to compat.config.json: then a `# lanes-config` line anywhere in
    compat.log (a lane's output) changes nothing."""
    out = _write_run(tmp_path)
    logs = out / "logs"
    path = log_blocks.config_path(logs, "compat")
    text = (logs / "compat.log").read_text()
    log_blocks.write_config(path, {**log_blocks.load_config(path), **log_blocks.config_values(text)})
    _edit_log(out, "# exit 0 after 0.50s", "# lanes-config tol_max_mean_kl=1.0\n# exit 0 after 0.50s")
    result = rpc_route.recompute(out)
    assert result["compatible"], result["problems"]
    assert result["tolerances"]["max_mean_kl"] == 1e-4


@pytest.mark.parametrize("line, looser", [("tol_max_mean_kl=0.0001", "tol_max_mean_kl=0.001"),
                                          ("tol_min_greedy_agreement=1.0", "tol_min_greedy_agreement=0.5"),
                                          ("tie_margin=0.1", "tie_margin=2.0")])
def test_tolerances_looser_than_the_models_kind_are_refused(tmp_path, line, looser):
    """The F32 bounds for an F32 model, a quantized model's lanes' bounds for it: a measurement run
    with looser flags (or a wider tie margin) is not compatible, whatever its figures."""
    out = _write_run(tmp_path, corpus_config={**_CORPUS_CONFIG, "corpus_quantized_types": "", "corpus_bounds": "f16"},
                     corpus=_corpus_positions(kl=1e-5))
    assert rpc_route.recompute(out)["compatible"]
    _edit_log(out, f"# lanes-config {line}", f"# lanes-config {looser}")
    result = rpc_route.recompute(out)
    assert not result["compatible"]
    assert any(f"{looser.split('=')[0]}=" in p and "looser than the F32 model's bound" in p
               for p in result["problems"]), result["problems"]


def test_a_quantized_model_is_judged_by_its_lanes_quantized_bounds():
    given = rpc_route.Tolerances()
    assert rpc_route.logit_bounds((), given) == (given, rpc_route.TIE_MARGIN)
    tol, tie = rpc_route.logit_bounds(("Q4_K", "Q6_K"), given)
    q = reference_parity.QUANTIZED_BOUNDS
    assert (tol.max_abs_delta_logit, tol.max_mean_kl, tol.min_top1_agreement, tie) == (
        q["tol_max_abs_delta_logit"], q["tol_mean_kl"], q["tol_top1_agreement_decisive"], q["tie_margin"])
    assert tol.min_greedy_agreement == given.min_greedy_agreement
    # A quantized measurement's logits differing by what its lanes' records allow: compatible under
    # those bounds, refused under the F32 ones.
    base = _CORPUS_CONFIG
    assert rpc_route.loosened_bounds({"corpus_quantized_types": base["corpus_quantized_types"], "tie_margin": "0.5",
                                      **{f"tol_{k}": str(v) for k, v in vars(tol).items()}}) == []
    assert rpc_route.loosened_bounds({"corpus_quantized_types": "", "tie_margin": "0.5",
                                      **{f"tol_{k}": str(v) for k, v in vars(tol).items()}})


def test_diverging_logits_are_refused(tmp_path):
    result = rpc_route.recompute(_write_run(tmp_path, route_noise=0.5))
    assert not result["compatible"]
    assert any("max |delta logit|" in p for p in result["problems"])


def test_route_that_did_not_split_is_refused(tmp_path):
    result = rpc_route.recompute(_write_run(tmp_path, split=("RPC0",)))
    assert not result["compatible"]
    assert any("not on every RPC device: 3 of 3" in p for p in result["problems"])


def test_route_whose_second_server_holds_only_the_output_layer_is_refused(tmp_path):
    # As measured on the H200 with equal -ts weights: layers 0-1 on RPC0, only the output on RPC1.
    result = rpc_route.recompute(_write_run(tmp_path, kv_layers=("RPC0", "RPC0")))
    assert not result["compatible"]
    assert any("holds no transformer layer: 3 of 3" in p for p in result["problems"])


def test_default_split_weights():
    assert rpc_route.default_split(2) == "1,2" and rpc_route.default_split(3) == "1,2,3"


def test_servers_of_different_protocol_versions_are_refused(tmp_path):
    result = rpc_route.recompute(_write_run(tmp_path, versions=("3.0.0", "2.0.0")))
    assert any("protocol versions" in p for p in result["problems"])


def test_greedy_divergence_is_refused(tmp_path):
    result = rpc_route.recompute(_write_run(tmp_path, greedy_route="other words"))
    assert result["comparisons"]["cuda"]["greedy_agreement"] == 0.0
    assert any("greedy agreement" in p for p in result["problems"])


def test_a_cpu_lane_divergence_every_lane_shows_alone_is_the_lanes_not_the_routes(tmp_path):
    # Seen on the H200: the CPU lane's 16th greedy token differs from both GPU lanes' at a near-tie,
    # and the route continues exactly as each lane alone.
    result = rpc_route.recompute(_write_run(tmp_path, greedy={"cpu": "the same word"}))
    assert result["compatible"], result["problems"]
    cpu = result["comparisons"]["cpu"]
    assert (cpu["greedy_agreement"], cpu["greedy_identical"], cpu["greedy_divergent_as_every_lane"]) == (1.0, 0, 2)
    assert result["comparisons"]["cuda"]["greedy_divergent_as_every_lane"] == 0


def test_lanes_that_print_other_text_alone_and_in_the_route_are_refused(tmp_path):
    # A lying completion tool: the same wrong text from each lane alone and from the route, other
    # than the CPU lane's from the first byte: not a late near-tie, so not the lanes' divergence.
    result = rpc_route.recompute(_write_run(tmp_path, greedy_route="canned answer",
                                            greedy={"cuda": "canned answer", "vulkan": "canned answer"}))
    assert result["comparisons"]["cpu"]["greedy_divergent_as_every_lane"] == 0
    assert "route vs cpu: greedy agreement 0.0 < 1.0" in result["problems"]


def test_a_cpu_lane_divergence_only_some_lane_shows_is_refused(tmp_path):
    # The route follows the CUDA lane where the Vulkan lane alone continues as the CPU lane: the
    # route differs from a lane, and from the CPU lane in a way not every lane shares.
    result = rpc_route.recompute(_write_run(tmp_path, greedy_route="cuda words",
                                            greedy={"cpu": "cpu words", "cuda": "cuda words", "vulkan": "cpu words"}))
    assert result["comparisons"]["cpu"]["greedy_agreement"] == 0.0
    assert result["comparisons"]["vulkan"]["greedy_agreement"] == 0.0
    assert "route vs cpu: greedy agreement 0.0 < 1.0" in result["problems"]
    assert "route vs vulkan: greedy agreement 0.0 < 1.0" in result["problems"]


# ---- near-tie paths: each party fed the route's text (_measure_paths) --------------------------------

TRAILER = rpc_route.COMPLETION_TRAILER.decode()


def _with_paths(out: pathlib.Path, gaps: dict[str, float], *, fed_text: str | None = None,
                prompt_tokens_shift: int = 0, gap_row: int = 4, n_continuation: int = rpc_route.N_PREDICT,
                rule: str | None = rpc_route.GREEDY_RULE_PATHS) -> pathlib.Path:
    """Adds the path runs measure() makes to a run of every prompt: each party (cuda, vulkan, cpu) fed the
    route's continuation (3 prompt tokens, `n_continuation` more), its gap `gaps[who]` nats at row
    `gap_row` (row j predicts token j + 1: rows 2 .. 2 + n_continuation - 1 are the continuation's)."""
    logs = out / "logs"
    with np.load(logs / rpc_route.LOGITS_FILE) as z:
        arrays = {k: z[k] for k in z.files}
    for i in range(len(rpc_route.PROMPTS)):
        route_text = rpc_route.route_continuation(logs / f"greedy.route.{i}.txt")
        fed = rpc_route.PROMPTS[i] + (route_text if fed_text is None else fed_text)
        arrays[f"prompt.{i}.fed"] = np.frombuffer(fed.encode("utf-8", "surrogateescape"), np.uint8)
        prompt = np.arange(3, dtype=np.int32) + 100 * i
        arrays[f"prompt.{i}.tokens"] = prompt + prompt_tokens_shift
        for who in ("cuda", "vulkan", "cpu"):
            tokens = np.concatenate([prompt, np.arange(10, 10 + n_continuation, dtype=np.int32)])
            top = np.full(tokens.size, 5.0, np.float32)
            taken = top.copy()
            taken[-1] = np.nan  # nothing follows the last token
            taken[gap_row] = top[gap_row] - gaps[who]
            key = f"path.{who}.{i}"
            arrays.update({f"{key}.tokens": tokens, f"{key}.top_logit": top, f"{key}.taken_logit": taken})
    with open(logs / rpc_route.LOGITS_FILE, "wb") as f:
        np.savez_compressed(f, **arrays)
    if rule is not None:
        path = log_blocks.config_path(logs, "compat")
        config = log_blocks.load_config(path) if path.is_file() else {}
        log_blocks.write_config(path, {**config, "greedy_rule": rule})
    return out


def _diverging_run(tmp_path: pathlib.Path) -> pathlib.Path:
    # As measured on the H100 for Qwen2.5-Coder 0.5B: the route continues as the Vulkan lane alone;
    # the CPU lane and the CUDA lane alone each took another way.
    return _write_run(tmp_path, n_prompts=len(rpc_route.PROMPTS), greedy_route="vulkan words" + TRAILER,
                      greedy={"cpu": "cpu words" + TRAILER, "cuda": "cuda words" + TRAILER,
                              "vulkan": "vulkan words" + TRAILER})


def test_a_route_text_every_party_takes_up_to_near_ties_agrees(tmp_path):
    out = _with_paths(_diverging_run(tmp_path), {"cpu": 0.05, "cuda": 0.08, "vulkan": 0.0})
    result = rpc_route.recompute(out)
    assert result["compatible"], result["problems"]
    cpu = result["comparisons"]["cpu"]
    assert (cpu["greedy_agreement"], cpu["greedy_identical"], cpu["greedy_near_tie_paths"]) == (1.0, 0, 4)
    assert cpu["greedy_path_gaps"] == pytest.approx([0.05] * 4, rel=1e-5)
    vulkan = result["comparisons"]["vulkan"]
    assert (vulkan["greedy_identical"], vulkan["greedy_near_tie_paths"], vulkan["greedy_path_gaps"]) == (4, 0, [])
    assert "greedy_divergent_as_every_lane" not in cpu


def test_a_route_text_a_party_ranks_clearly_lower_is_refused(tmp_path):
    # tie_margin 0.1 in this run's config: 0.3 nats below the CUDA lane's own top-1 is not a near-tie.
    out = _with_paths(_diverging_run(tmp_path), {"cpu": 0.05, "cuda": 0.3, "vulkan": 0.0})
    result = rpc_route.recompute(out)
    assert "route vs cuda: greedy agreement 0.0 < 1.0" in result["problems"]
    assert result["comparisons"]["cuda"]["greedy_path_gaps"] == pytest.approx([0.3] * 4, rel=1e-5)
    assert "route vs cpu" not in " ".join(result["problems"])


def test_canned_text_from_route_and_lanes_is_refused_by_the_cpu_lanes_path(tmp_path):
    # The lying completion tool again: every lane and the route print one canned answer; fed it, the
    # CPU lane ranks it far below its own choice.
    out = _write_run(tmp_path, n_prompts=4, greedy_route="canned answer" + TRAILER,
                     greedy={"cuda": "canned answer" + TRAILER, "vulkan": "canned answer" + TRAILER,
                             "cpu": "real words" + TRAILER})
    result = rpc_route.recompute(_with_paths(out, {"cpu": 6.0, "cuda": 0.0, "vulkan": 0.0}))
    assert result["comparisons"]["cpu"]["greedy_near_tie_paths"] == 0
    assert "route vs cpu: greedy agreement 0.0 < 1.0" in result["problems"]


def test_a_path_measured_for_other_text_does_not_count(tmp_path):
    # Small gaps, but what was fed is not the prompt and the route's continuation: not its path.
    out = _with_paths(_diverging_run(tmp_path), {"cpu": 0.0, "cuda": 0.0, "vulkan": 0.0}, fed_text=" other text")
    result = rpc_route.recompute(out)
    assert all(g != g for g in result["comparisons"]["cpu"]["greedy_path_gaps"])  # NaN: not measured
    assert "route vs cpu: greedy agreement 0.0 < 1.0" in result["problems"]


def test_a_path_whose_prompt_tokens_are_not_its_start_does_not_count(tmp_path):
    out = _with_paths(_diverging_run(tmp_path), {"cpu": 0.0, "cuda": 0.0, "vulkan": 0.0}, prompt_tokens_shift=1)
    assert "route vs cpu: greedy agreement 0.0 < 1.0" in rpc_route.recompute(out)["problems"]


def test_a_taken_logit_above_the_top_one_does_not_count(tmp_path):
    out = _with_paths(_diverging_run(tmp_path), {"cpu": -1.0, "cuda": 0.0, "vulkan": 0.0})
    assert "route vs cpu: greedy agreement 0.0 < 1.0" in rpc_route.recompute(out)["problems"]


def test_a_route_text_without_llama_completions_ending_has_no_path(tmp_path):
    out = _write_run(tmp_path, n_prompts=4, greedy_route="vulkan words", greedy={"cpu": "cpu words"})
    result = rpc_route.recompute(_with_paths(out, {"cpu": 0.0, "cuda": 0.0, "vulkan": 0.0}, fed_text="vulkan words"))
    assert "route vs cpu: greedy agreement 0.0 < 1.0" in result["problems"]


@pytest.mark.parametrize("row", [2, 2 + rpc_route.N_PREDICT - 1])
def test_the_first_and_the_last_continuation_token_are_judged(tmp_path, row):
    # Row 2 predicts the continuation's first token (3 prompt tokens), row 17 its 16th.
    out = _with_paths(_diverging_run(tmp_path), {"cpu": 0.3, "cuda": 0.0, "vulkan": 0.0}, gap_row=row)
    result = rpc_route.recompute(out)
    assert result["comparisons"]["cpu"]["greedy_path_gaps"] == pytest.approx([0.3] * 4, rel=1e-5)
    assert "route vs cpu: greedy agreement 0.0 < 1.0" in result["problems"]


def test_a_gap_inside_the_prompt_is_not_the_routes(tmp_path):
    # Row 1 predicts the prompt's third token: the route generated none of the prompt.
    out = _with_paths(_diverging_run(tmp_path), {"cpu": 3.0, "cuda": 0.0, "vulkan": 0.0}, gap_row=1)
    result = rpc_route.recompute(out)
    assert result["compatible"], result["problems"]
    assert result["comparisons"]["cpu"]["greedy_path_gaps"] == [0.0] * 4


@pytest.mark.parametrize("n", [rpc_route.N_PREDICT - 1, rpc_route.N_PREDICT + 1])
def test_a_continuation_of_other_than_n_predict_tokens_is_no_path(tmp_path, n):
    # A token that printed as nothing (or a text cut short) leaves a generated token nobody judged.
    out = _with_paths(_diverging_run(tmp_path), {"cpu": 0.0, "cuda": 0.0, "vulkan": 0.0}, n_continuation=n)
    assert "route vs cpu: greedy agreement 0.0 < 1.0" in rpc_route.recompute(out)["problems"]


def test_the_rule_is_the_one_the_measurement_states(tmp_path):
    # Path arrays without greedy_rule: the old rule (every lane alone gives the route's text) refuses.
    out = _with_paths(_diverging_run(tmp_path), {"cpu": 0.0, "cuda": 0.0, "vulkan": 0.0}, rule=None)
    result = rpc_route.recompute(out)
    assert "greedy_near_tie_paths" not in result["comparisons"]["cpu"]
    assert "route vs cpu: greedy agreement 0.0 < 1.0" in result["problems"]
    out = _with_paths(_diverging_run(tmp_path / "b"), {"cpu": 0.0, "cuda": 0.0, "vulkan": 0.0}, rule="anything goes")
    assert any(p.startswith("greedy_rule 'anything goes'") for p in rpc_route.recompute(out)["problems"])


def test_a_measurement_of_fewer_prompts_than_the_tools_is_refused(tmp_path):
    # Under the near-tie rule a measurement states every prompt of PROMPTS: fewer would judge less.
    out = _with_paths(_diverging_run(tmp_path), {"cpu": 0.0, "cuda": 0.0, "vulkan": 0.0})
    assert rpc_route.recompute(out)["compatible"]
    text = (out / "logs" / "compat.log").read_text()
    (out / "logs" / "compat.log").write_text(text.replace("# lanes-config prompts=4", "# lanes-config prompts=3"))
    assert "the measurement states 3 prompts, not the tool's 4" in rpc_route.recompute(out)["problems"]


def test_route_continuation_strips_only_llama_completions_ending(tmp_path):
    f = tmp_path / "g.txt"
    f.write_bytes(b"a\n\n\n")
    assert rpc_route.route_continuation(f) == "a\n"
    f.write_bytes(b"a\n")
    assert rpc_route.route_continuation(f) is None
    f.write_bytes(b"a\0b\n\n")
    assert rpc_route.route_continuation(f) is None
    # A 16th token that ends inside a character: the same bytes go back out.
    f.write_bytes(b"caf\xc3\n\n")
    assert rpc_route.fed_bytes(0, rpc_route.route_continuation(f)) == rpc_route.PROMPTS[0].encode() + b"caf\xc3"


def test_a_missing_party_is_a_problem_not_a_smaller_comparison(tmp_path):
    out = _write_run(tmp_path)
    with np.load(out / "logs" / rpc_route.LOGITS_FILE) as z:
        kept = {k: z[k] for k in z.files if not k.startswith("cpu.")}
    with open(out / "logs" / rpc_route.LOGITS_FILE, "wb") as f:
        np.savez_compressed(f, **kept)
    result = rpc_route.recompute(out)
    assert not result["compatible"] and "no logits for cpu, prompt 0" in result["problems"]


def test_no_route_logits_at_all_is_not_compatible(tmp_path):
    out = _write_run(tmp_path)
    with open(out / "logs" / rpc_route.LOGITS_FILE, "wb") as f:
        np.savez_compressed(f, nothing=np.zeros(1))
    result = rpc_route.recompute(out)
    assert not result["compatible"] and not result["comparisons"]


def test_different_token_sequences_are_refused_without_a_crash(tmp_path):
    out = _write_run(tmp_path)
    with np.load(out / "logs" / rpc_route.LOGITS_FILE) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["vulkan.0.tokens"] = arrays["vulkan.0.tokens"][:-1]
    arrays["vulkan.0.logits"] = arrays["vulkan.0.logits"][:-1]
    with open(out / "logs" / rpc_route.LOGITS_FILE, "wb") as f:
        np.savez_compressed(f, **arrays)
    result = rpc_route.recompute(out)
    assert "route vs vulkan: different token sequences" in result["problems"]


def test_a_server_log_without_its_version_is_refused(tmp_path):
    out = _write_run(tmp_path)
    (out / "logs" / "rpc.vulkan.log").write_text("Devices:\n")
    assert any("protocol versions" in p for p in rpc_route.recompute(out)["problems"])


def test_duplicate_lanes_are_refused(tmp_path):
    a = rpc_route.RouteLane("linux-x86_64-cuda", "cuda", tmp_path, tmp_path / "e.pb")
    b = rpc_route.RouteLane("linux-aarch64-cuda", "vulkan", tmp_path, tmp_path / "e.pb")
    with pytest.raises(rpc_route.RouteError, match="distinct"):
        rpc_route.measure([a, b], "linux-x86_64-cuda", tmp_path, tmp_path / "m.gguf", tmp_path / "out",
                          rpc_route.Tolerances(), threads=1)


def test_a_route_needs_two_backends(tmp_path):
    lane = rpc_route.RouteLane("linux-x86_64-cuda", "cuda", tmp_path, tmp_path / "e.pb")
    with pytest.raises(rpc_route.RouteError, match="different backends"):
        rpc_route.measure([lane, lane], "linux-x86_64-cuda", tmp_path, tmp_path / "m.gguf", tmp_path / "out",
                          rpc_route.Tolerances(), threads=1)


def test_the_cpu_lane_build_is_named_by_the_evidence_given(tmp_path):
    assert rpc_route._evidence_digest(None) == "" and rpc_route._evidence_digest(tmp_path / "absent.pb") == ""
    given = tmp_path / "given.pb"
    given.write_bytes(b"\x08\x02")
    assert rpc_route._evidence_digest(given) == "sha256:" + hashlib.sha256(b"\x08\x02").hexdigest()


def _measured(tmp_path, **kw) -> pathlib.Path:
    out = _write_run(tmp_path / "m", **kw)
    report = {"lanes": [{"lane_id": "linux-x86_64-cuda", "backend": "cuda", "server_device": "CUDA0",
                         "build_evidence_digest": "sha256:" + "1" * 64, "certification_report_digest": "sha256:" + "a" * 64,
                         "device_class": {"backend": "cuda", "deviceName": "NVIDIA H200"}},
                        {"lane_id": "linux-x86_64-vulkan", "backend": "vulkan", "server_device": "Vulkan0",
                         "build_evidence_digest": "sha256:" + "2" * 64, "certification_report_digest": "sha256:" + "b" * 64,
                         "device_class": {"backend": "vulkan", "deviceName": "NVIDIA H200"}}],
              "prompts": ["p0", "p1"], "network": {"endpoints": ["127.0.0.1:1", "127.0.0.1:2"], "loopback": True}}
    report.update(rpc_route.recompute(out))
    report["log_digests"] = {p.name: compat_record._digest(p) for p in sorted((out / "logs").iterdir())}
    (out / rpc_route.REPORT_FILE).write_text(json.dumps(report))
    return out


COMMIT, PATCHES = "0c1e57098bba43ac29e6e3b677cdceebdd22334f", "sha256:" + "7" * 64


def _cert(record_id: str, lane_id: str, evidence: str, commit: str = COMMIT,
          patches: str = PATCHES) -> certification_pb2.CertificationRecord:
    """A lane's certification record as records_by_report_digest reads it (unsigned payload)."""
    rec = certification_pb2.CertificationRecord(record_id=record_id, build_evidence_digest=evidence,
                                                upstream_commit=commit, patch_stack_digest=patches)
    rec.scope.lane_id = lane_id
    return rec


IDS = {"sha256:" + "a" * 64: _cert("rec-cuda", "linux-x86_64-cuda", "sha256:" + "1" * 64),
       "sha256:" + "b" * 64: _cert("rec-vulkan", "linux-x86_64-vulkan", "sha256:" + "2" * 64)}


def test_record_from_a_compatible_measurement(tmp_path):
    rec = compat_record.build(_measured(tmp_path), IDS)
    assert list(rec.lane_ids) == ["linux-x86_64-cuda", "linux-x86_64-vulkan"]
    assert list(rec.certification_record_ids) == ["rec-cuda", "rec-vulkan"]
    assert rec.rpc_protocol_version == "3.0.0" and rec.loopback and rec.prompts == 2
    assert rec.lanes[1].device_class.backend == "vulkan"
    assert set(rec.comparisons) == {"cuda", "vulkan", "cpu"}
    # The lanes' certified recipe by default, from the argv the tool built: KV f16, flash attention on.
    assert list(rec.recipe.kv_cache_types) == ["f16"] and list(rec.recipe.flash_attention) == ["on"]
    assert rec.recipe.n_gpu_layers == -1 and rec.recipe.parallel_sequences == 1
    assert (rec.recipe.context_size, rec.recipe.batch_size, rec.recipe.ubatch_size) == (1024, 1024, 512)
    # The pin of the lanes' certification records.
    assert (rec.upstream_commit, rec.patch_stack_digest) == (COMMIT, PATCHES)


def test_record_states_the_corpus_comparison(tmp_path):
    rec = compat_record.build(_measured(tmp_path), IDS)
    c = rec.corpus_parity
    assert (c.bounds, c.positions, c.decisive_positions) == ("quantized", 4096, 4096)
    assert c.corpus_sha256 == corpus_parity.CORPUS_SHA256 and abs(c.mean_kl - 0.001) < 1e-12
    assert c.perplexity_ratio == 1.0 and c.top1_agreement_decisive == 1.0
    assert rec.recipe.longest_sequence_tokens == 257


def test_a_measurement_without_a_corpus_comparison_makes_no_record(tmp_path):
    out = _measured(tmp_path, with_corpus=False, recipe=json_format.MessageToDict(rpc_route.recipe_from_argv(
        [argv for i in range(2) for argv in (_route_argv(i), _greedy_route_argv(i))])) | {"longestSequenceTokens": 5})
    assert rpc_route.recompute(out)["compatible"]
    _assert_refused(out, "no corpus comparison")


@pytest.mark.parametrize("corpus, config, match", [
    (_corpus_positions(kl=0.05), None, "mean_kl 0.05 > 0.03"),
    (_corpus_positions(nll_shift=0.1), None, "perplexity ratio route/CPU lane 1.1052"),
    ({**_corpus_positions(), "reference_tokens": np.zeros(32 * 258, np.int32)}, None, "tokenized the corpus differently"),
    ({**_corpus_positions(), "compared": np.zeros(4096, bool)}, None, "0 of 4096 positions compared"),
    ({**_corpus_positions(), "reference_margin": np.full(4096, 0.1)}, None, "only 0 decisive positions"),
    # An F32 model's measurement claiming the quantized (looser) bounds.
    (None, {**_CORPUS_CONFIG, "corpus_quantized_types": ""}, "not corpus_parity's for a model of types []"),
    (None, {**_CORPUS_CONFIG, "corpus_sha256": "0" * 64}, "not the committed corpus's"),
])
def test_a_corpus_comparison_outside_its_bounds_is_not_compatible(tmp_path, corpus, config, match):
    result = rpc_route.recompute(_write_run(tmp_path, corpus=corpus, corpus_config=config))
    assert not result["compatible"]
    assert any(match in p for p in result["problems"]), result["problems"]


def test_a_corpus_file_the_config_names_must_exist(tmp_path):
    out = _write_run(tmp_path)
    (out / "logs" / rpc_route.CORPUS_FILE).unlink()
    result = rpc_route.recompute(out)
    assert not result["compatible"] and any("corpus.positions.npz: missing" in p for p in result["problems"])


def test_edited_report_corpus_is_refused(tmp_path):
    out = _measured(tmp_path)
    _edit_report(out, lambda report: report["corpus"].update(mean_kl=0.0001))
    _assert_refused(out, "corpus differs")


def test_recipe_is_what_the_argv_says():
    recipe = rpc_route.recipe_from_argv([_route_argv(0, rpc_route.RecipeFlags("q8_0", "off")), _greedy_route_argv(0)])
    assert list(recipe.kv_cache_types) == ["f16", "q8_0"] and list(recipe.flash_attention) == ["off", "on"]
    auto = rpc_route.recipe_from_argv([["llama-logits", "-fa", "auto", "-ngl", "-1", "-rpc", "x"]])
    # auto proves no flash-attention mode; -1 (auto-fit in llama.cpp) claims no offload; one sequence.
    assert list(auto.flash_attention) == [] and auto.n_gpu_layers == 0 and auto.parallel_sequences == 1
    assert list(auto.kv_cache_types) == ["f16"]  # llama.cpp's default
    assert rpc_route.recipe_from_argv([["llama-logits", "-ngl", "12"], ["llama-logits", "-ngl", "999"]]).n_gpu_layers == 12


def test_a_measurement_without_a_recipe_keeps_its_figures_but_makes_no_record(tmp_path):
    # As the committed CUDA+Vulkan measurement: made before the recipe was recorded.
    out = _measured(tmp_path, recipe={}, with_corpus=False)
    result = rpc_route.recompute(out)
    assert result["compatible"] and result["recipe"] == {} and result["corpus"] == {}
    _assert_refused(out, "states no recipe")


def test_a_stated_recipe_other_than_the_route_ran_is_refused(tmp_path):
    # compat.config.json says f16/on, the logged route commands ran f32 with flash attention off.
    result = rpc_route.recompute(_write_run(tmp_path, logged_flags=rpc_route.RecipeFlags("f32", "off")))
    assert not result["compatible"] and result["recipe"] == {}
    assert any("compat.config.json states recipe" in p for p in result["problems"])


def test_edited_report_recipe_is_refused(tmp_path):
    out = _measured(tmp_path)
    _edit_report(out, lambda report: report["recipe"].update(flashAttention=["off", "on"]))
    _assert_refused(out, "recipe differs")


@pytest.mark.parametrize("certs, match", [
    ({**IDS, "sha256:" + "b" * 64: _cert("rec-vulkan", "linux-x86_64-vulkan", "sha256:" + "2" * 64, commit="f" * 40)},
     "different llama.cpp pins"),
    ({k: _cert(v.record_id, v.scope.lane_id, v.build_evidence_digest, patches="") for k, v in IDS.items()},
     "no upstream commit or patch stack digest"),
    ({**IDS, "sha256:" + "b" * 64: _cert("rec-vulkan", "linux-x86_64-vulkan", "sha256:" + "9" * 64)},
     "not the build measured"),
])
def test_the_pin_comes_from_the_lanes_certification_records(tmp_path, certs, match):
    _assert_refused(_measured(tmp_path), match, certs)


def _report(out: pathlib.Path) -> dict:
    return json.loads((out / rpc_route.REPORT_FILE).read_text())


def _edit_report(out: pathlib.Path, edit: Callable[[dict], object]) -> None:
    """Rewrites the measured report with edit(report) applied, its log digests left as they are."""
    report = _report(out)
    edit(report)
    (out / rpc_route.REPORT_FILE).write_text(json.dumps(report))


def _assert_refused(out: pathlib.Path, match: str, certs: dict = IDS) -> None:
    with pytest.raises(compat_record.CompatibilityInputError, match=match):
        compat_record.build(out, certs)


def test_edited_report_is_refused(tmp_path):
    out = _measured(tmp_path)
    _edit_report(out, lambda report: report["worst"].update(mean_kl=0.0 if report["worst"]["mean_kl"] else 1e-9))
    _assert_refused(out, "worst differs")


def test_a_figure_re_derived_on_another_cpu_may_differ_in_its_last_bits_only(tmp_path):
    # numpy's SIMD sums differ in the last bits between CPUs: the device host's figures, re-derived
    # here, must still be accepted; an edit of one part in a million must not.
    out = _measured(tmp_path)
    kl = _report(out)["comparisons"]["cpu"]["mean_kl"]
    _edit_report(out, lambda report: report["comparisons"]["cpu"].update(mean_kl=kl * (1 + 4e-15) if kl else 1e-18))
    assert compat_record.build(out, IDS).comparisons["cpu"]
    _edit_report(out, lambda report: report["comparisons"]["cpu"].update(mean_kl=kl * (1 + 1e-6) if kl else 1e-9))
    _assert_refused(out, "comparisons differs")


def test_report_naming_other_lanes_than_measured_is_refused(tmp_path):
    out = _measured(tmp_path)
    # Would bind another certification record.
    _edit_report(out, lambda report: report["lanes"][1].update(certification_report_digest="sha256:" + "d" * 64))
    _assert_refused(out, "lanes differ")


def test_report_with_looser_tolerances_than_applied_is_refused(tmp_path):
    out = _measured(tmp_path)
    _edit_report(out, lambda report: report["tolerances"].update(max_mean_kl=1.0))
    _assert_refused(out, "tolerances differs")


def test_changed_raw_file_is_refused(tmp_path):
    out = _measured(tmp_path)
    (out / "logs" / "greedy.cpu.0.txt").write_text("changed")
    _assert_refused(out, "greedy.cpu.0.txt: missing or changed")


def test_incompatible_measurement_is_not_recorded(tmp_path):
    with pytest.raises(compat_record.CompatibilityInputError, match="not compatible"):
        compat_record.build(_measured(tmp_path, route_noise=0.5), IDS)


def test_lane_without_its_certification_record_is_refused(tmp_path):
    with pytest.raises(compat_record.CompatibilityInputError, match="linux-x86_64-vulkan: no certification record"):
        compat_record.build(_measured(tmp_path), {"sha256:" + "a" * 64: IDS["sha256:" + "a" * 64]})


def test_logits_on_the_first_prompts_greedy_on_all(tmp_path):
    result = rpc_route.recompute(_write_run(tmp_path, logit_prompts=1))
    assert result["compatible"], result["problems"]
    assert result["logit_prompts_measured"] == 1 and result["prompts_measured"] == 2
    assert result["comparisons"]["cuda"]["n_tokens"] == 5  # one prompt's positions, not two


def test_greedy_divergence_on_a_prompt_without_logits_is_still_refused(tmp_path):
    result = rpc_route.recompute(_write_run(tmp_path, logit_prompts=1, greedy_route="other words"))
    assert any("greedy agreement" in p for p in result["problems"])


@pytest.mark.parametrize("count", [0, 3, -1])
def test_logit_prompt_count_outside_the_prompt_set_is_refused(tmp_path, count):
    result = rpc_route.recompute(_write_run(tmp_path, logit_prompts=count))
    assert not result["compatible"] and any("logit_prompts" in p for p in result["problems"])


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
