"""report.recipe: what the checks really ran, read back from the step logs at the end of the run.

Each `$ <argv>` line of a step log that runs one of the lane's own llama binaries (the CPU lane's
commands in an accelerator run are the oracle, not the recipe) contributes its flags, checked
against what the binary itself logged after it (in the step log, or in the file the command line
names, e.g. `(log: concurrency.server.log)`):
- kv_cache_types: -ctk / -ctv (llama.cpp's default f16 when absent);
- flash_attention: "on"/"off" as resolved by llama.cpp ("Flash Attention enabled|disabled",
  `flash_attn = enabled|disabled`), else the -fa value when it is on/off;
- n_gpu_layers: -1 when every offloading command logged `offloaded N/N layers` (full offload),
  the fewest layers offloaded otherwise, 0 on the CPU lane (nothing offloaded);
- context_size, batch_size, ubatch_size, parallel_sequences: the largest `llama_context: n_ctx /
  n_batch / n_ubatch / n_seq_max` the binaries logged, else the -c / -b / -ub / -np values;
- context_per_sequence: the serving step's cells per slot from the runner's own llama-server argv
  (-c over -np; -c itself with a unified KV cache, where one sequence may fill it all);
- gpu_count, split_mode, tensor_split (multi-GPU runs only, runner --gpus >= 2): -sm / --split-mode
  and -ts / --tensor-split as the commands passed them (commands that disagree: every value, comma
  (";" between tensor splits) joined, which no route asks for), and the most distinct devices one command logged
  (`using device CUDA<n>`), else its -dev list; 0 / empty when no command split the model;
- longest_sequence_tokens: the most tokens of one sequence whose outputs a step that PASSED
  verified, from the runner's own files: corpus_parity's chunks (positions up to context-2 are
  scored: context-1 tokens) and reference_parity's prompt. (Runs before runner 0.5.0 recorded neither.)
"""

from __future__ import annotations

import pathlib
import re

import numpy as np

from proto import runner_report_pb2 as rpb
from tools.runner import log_blocks

_FA_RESOLVED = re.compile(r"Flash Attention (enabled|disabled)")
_FA_CONTEXT = re.compile(r"llama_context: flash_attn\s*=\s*(enabled|disabled)")
_USING_DEVICE = re.compile(r"using device ([A-Za-z]+[0-9]+) \(")
_OFFLOADED = re.compile(r"load_tensors: offloaded (\d+)/(\d+) layers to GPU")
_CTX = {key: re.compile(rf"llama_context: {key}\s*=\s*(\d+)") for key in ("n_ctx", "n_batch", "n_ubatch", "n_seq_max")}
# Runs from this runner version record context_per_sequence and longest_sequence_tokens.
SEQUENCE_FIELDS_SINCE = (0, 5, 0)
_FLAGS = {"n_ctx": ("-c", "--ctx-size"), "n_batch": ("-b", "--batch-size"), "n_ubatch": ("-ub", "--ubatch-size"),
          "n_seq_max": ("-np", "--parallel")}


def lane_bin_dir(logs_dir: pathlib.Path) -> str | None:
    """The lane under test's bin/: artifact_integrity runs its `llama-completion --version` first."""
    for cmd in log_blocks.commands(log_blocks.read(logs_dir / "artifact_integrity.log")):
        if cmd.argv and cmd.argv[0].endswith("/llama-completion"):
            return str(pathlib.PurePath(cmd.argv[0]).parent)
    return None


# Only checks that judge the lane's numbers prove a recipe element: parity against an independent
# reference (reference_parity, op_oracle) and batched-vs-sequential equality (concurrency). A KV type
# or mode that only graph_smoke, cancellation or speed ran is exercised, not proven: it stays out.
PROVING_STEPS = ("reference_parity", "op_oracle", "corpus_parity", "concurrency")


def lane_commands(logs_dir: pathlib.Path, bin_dir: str | None,
                  steps: tuple[str, ...] = PROVING_STEPS) -> list[tuple[list[str], str]]:
    """(argv, everything the binary logged) of each lane llama-* command in the given steps' logs."""
    out = []
    for log in sorted(logs_dir.glob("*.log")):
        if log.name.count(".") != 1:  # <step>.log only; server/stderr files are read via their command
            continue
        if log.stem not in steps:
            continue
        for cmd in log_blocks.commands(log_blocks.read(log)):
            if not cmd.argv or "--version" in cmd.argv:
                continue
            exe = pathlib.PurePath(cmd.argv[0])
            if not exe.name.startswith("llama-") or (bin_dir is not None and str(exe.parent) != bin_dir):
                continue
            text = cmd.output + "".join("\n" + log_blocks.read(logs_dir / f) for f in cmd.files)
            out.append((cmd.argv, text))
    return out


def recipe_from_logs(logs_dir: pathlib.Path, accelerator: bool, bin_dir: str | None = None) -> rpb.Recipe:
    bin_dir = lane_bin_dir(logs_dir) or bin_dir
    kv: set[str] = set()
    fa: set[str] = set()
    offload: list[int] = []
    sizes = {k: 0 for k in _CTX}
    server_seq: list[int] = []
    modes: set[str] = set()
    splits: set[str] = set()
    devices = 0
    for argv, text in lane_commands(logs_dir, bin_dir):
        mode = log_blocks.flag_value(argv, "-sm", "--split-mode")
        if mode is not None and mode != "none":  # -sm none: reference_parity's one-GPU baseline, not the split
            modes.add(mode)
            splits.add((log_blocks.flag_value(argv, "-ts", "--tensor-split") or "").replace("/", ","))
            listed = log_blocks.flag_value(argv, "-dev", "--device") or ""
            devices = max(devices, len(set(_USING_DEVICE.findall(text))) or len([d for d in re.split(r"[,/]", listed) if d]))
        if pathlib.PurePath(argv[0]).name == "llama-server":
            server_seq.append(_cells_per_slot(argv))
        kv.add(log_blocks.flag_value(argv, "-ctk", "--cache-type-k") or "f16")
        kv.add(log_blocks.flag_value(argv, "-ctv", "--cache-type-v") or "f16")
        resolved = _FA_RESOLVED.findall(text) or _FA_CONTEXT.findall(text)
        if resolved:
            fa.update("on" if r == "enabled" else "off" for r in resolved)
        else:
            flag = log_blocks.flag_value(argv, "-fa", "--flash-attn")
            if flag in ("on", "off", "1", "0"):
                fa.add("on" if flag in ("on", "1") else "off")
        for done, total in _OFFLOADED.findall(text):
            offload.append(-1 if int(done) == int(total) else int(done))
        for key, pattern in _CTX.items():
            seen = [int(v) for v in pattern.findall(text)]
            flag = log_blocks.flag_value(argv, *_FLAGS[key])
            if not seen and flag is not None and flag.isdigit():
                seen = [int(flag)]
            sizes[key] = max([sizes[key], *seen])
    if not accelerator or not offload:
        ngl = 0  # nothing offloaded is proven
    else:
        ngl = -1 if all(o == -1 for o in offload) else min(o for o in offload if o != -1)
    recipe = rpb.Recipe(kv_cache_types=sorted(kv), flash_attention=sorted(fa), n_gpu_layers=ngl,
                        context_size=sizes["n_ctx"], batch_size=sizes["n_batch"], ubatch_size=sizes["n_ubatch"],
                        parallel_sequences=sizes["n_seq_max"])
    if accelerator and modes:
        recipe.split_mode = ",".join(sorted(modes))
        recipe.tensor_split = ";".join(sorted(splits))
        recipe.gpu_count = devices
    if not log_blocks.run_predates(SEQUENCE_FIELDS_SINCE):
        recipe.context_per_sequence = max(server_seq or [0])
        recipe.longest_sequence_tokens = longest_sequence(logs_dir)
    return recipe


def _cells_per_slot(argv: list[str]) -> int:
    """-c over -np as the runner started llama-server (-c alone with a unified KV cache); 0 when
    either is missing or not a number (then nothing is claimed)."""
    ctx, slots = log_blocks.flag_value(argv, "-c", "--ctx-size"), log_blocks.flag_value(argv, "-np", "--parallel")
    if not (ctx and ctx.isdigit() and slots and slots.isdigit() and int(slots) > 0):
        return 0
    unified = any(a in ("-kvu", "--kv-unified") for a in argv)
    return int(ctx) if unified else -(-int(ctx) // int(slots))


def _passed(logs_dir: pathlib.Path, step: str) -> bool:
    path = logs_dir / f"{step}.exit"
    return path.is_file() and path.read_text(errors="replace").split()[1:2] == ["PASS"]


def longest_sequence(logs_dir: pathlib.Path) -> int:
    """The most tokens of one sequence whose outputs corpus_parity or reference_parity verified
    (steps that passed, from their kept files)."""
    longest = 0
    corpus = logs_dir / "corpus_parity.positions.npz"
    if corpus.is_file() and _passed(logs_dir, "corpus_parity"):
        context = int(log_blocks.step_config(logs_dir, "corpus_parity").get("context", "0") or 0)
        with np.load(corpus, allow_pickle=False) as z:
            if context > 1 and z["tokens"].size >= context and z["lane_nll"].size > 0:
                longest = context - 1  # the last position's output is never scored
    parity = logs_dir / "reference_parity.logits.npz"
    if parity.is_file() and _passed(logs_dir, "reference_parity"):
        with np.load(parity, allow_pickle=False) as z:
            if "lane" in z.files:
                longest = max(longest, int(z["lane"].shape[0]))
    return longest


def sequence_problem(recipe: rpb.Recipe) -> str:
    """Why the recipe claims more context per sequence than any proving step ran (empty: it does not)."""
    if recipe.context_per_sequence > recipe.longest_sequence_tokens:
        return (f"the recipe's context per sequence is {recipe.context_per_sequence} tokens but no proving step ran a "
                f"sequence longer than {recipe.longest_sequence_tokens} tokens (corpus_parity verifies 257-token "
                "sequences when it passes)")
    return ""
