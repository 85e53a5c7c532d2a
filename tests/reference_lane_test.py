"""The float64 references against the CPU lane, one small seeded model per architecture.

Each model (tools/model/arch_models.py: llama with Llama-3 rope_freqs and GQA, qwen2 with biases,
gemma3 with sliding-window layers; quantized matrices) runs through the lane's llama-logits (flash
attention off, F32 KV cache, as reference_parity runs it); the prompt's tokens must be the
independent tokenizer's, and the logits must pass reference_parity's own judge at the model's
bounds. The same judge must fail the lane against a reference that leaves out what the
architecture adds (rope_freqs, the biases, the sliding window) or uses other weights.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import gguf
import numpy as np
import pytest

from tools.model import arch_models, prompt_tokenizer, reference_forward, reference_gemma3, references
from tools.runner.checks import reference_parity

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."))
LANE_BIN = RUNFILES / "lanes" / "lanes" / "cpu" / "bin"
PROMPT = ("The quick brown fox jumps over the lazy dog while 12 ravens watch from the old oak tree "
          "near the river bank.")
CASES = arch_models.LANE_TEST_CASES



@dataclasses.dataclass
class LaneRun:
    model: pathlib.Path
    tokens: np.ndarray
    logits: np.ndarray


@pytest.fixture(scope="module", params=sorted(CASES))
def lane_run(request, tmp_path_factory) -> LaneRun:
    arch = request.param
    vocab, qtype = CASES[arch]
    tmp = tmp_path_factory.mktemp(arch)
    model = arch_models.write_model(arch, arch_models.vocab_dir(sys.argv) / vocab, tmp / f"tiny-{arch}.gguf", qtype)
    out = tmp / "lane.logits"
    res = subprocess.run([str(LANE_BIN / "llama-logits"), "-m", str(model), "-p", PROMPT, "-o", str(out), "-t", "2",
                          "-fa", "off", "-ctk", "f32", "-ctv", "f32"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    tokens, logits = reference_forward.read_logits_file(out)
    return LaneRun(model, tokens, logits)


def _judge(run: LaneRun, reference: np.ndarray) -> tuple[dict, dict, list[str]]:
    bounds = reference_parity.model_bounds(run.model)
    tol = {"tol_max_abs_delta_logit": 1e-3, "tol_mean_kl": 1e-8, "tol_top1_agreement_decisive": 1.0,
           "tol_min_decisive_fraction": 0.5, "tie_margin": 0.1} | bounds
    counts, metrics = reference_parity.compare(reference, run.logits, tol["tie_margin"])
    return counts, metrics, reference_parity.judge(counts, metrics, tol)


def test_lane_matches_the_reference_of_its_architecture(lane_run: LaneRun) -> None:
    assert lane_run.tokens.tolist() == prompt_tokenizer.from_gguf(lane_run.model).encode(PROMPT)
    assert len(lane_run.tokens) >= reference_parity.MIN_TOKENS
    counts, metrics, problems = _judge(lane_run, references.forward(lane_run.model, lane_run.tokens))
    print(lane_run.model.name, json.dumps({**counts, **metrics}))
    assert not problems, problems
    assert metrics["max_abs_delta_logit"] > 0  # computed by the lane, not copied


def test_the_judge_fails_a_reference_without_the_architectures_features(lane_run: LaneRun) -> None:
    arch = gguf.GGUFReader(lane_run.model, "r").fields["general.architecture"].contents()
    module = references.module_for(gguf.GGUFReader(lane_run.model, "r"))
    model = module.load_model(lane_run.model)
    if arch == "llama":
        del model.tensors["rope_freqs.weight"]
    elif arch == "qwen2":
        for name in [n for n in model.tensors if n.endswith(".bias")]:
            del model.tensors[name]
    else:
        model = dataclasses.replace(model, hp=dataclasses.replace(model.hp, sliding_window=0))
    _, metrics, problems = _judge(lane_run, module.forward(model, lane_run.tokens))
    assert problems, (arch, metrics)


def test_the_judge_fails_a_reference_with_other_weights(lane_run: LaneRun, tmp_path: pathlib.Path) -> None:
    arch = gguf.GGUFReader(lane_run.model, "r").fields["general.architecture"].contents()
    vocab, qtype = CASES[arch]
    other = arch_models.write_model(arch, arch_models.vocab_dir(sys.argv) / vocab, tmp_path / "other.gguf", qtype, seed=99)
    _, metrics, problems = _judge(lane_run, references.forward(other, lane_run.tokens))
    assert problems, metrics


def test_the_registry_names_each_architecture() -> None:
    assert references.BY_ARCHITECTURE["llama"] is reference_forward
    assert references.BY_ARCHITECTURE["qwen2"] is reference_forward
    assert references.BY_ARCHITECTURE["gemma3"] is reference_gemma3


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-s", "-p", "no:cacheprovider"]))
