"""A mixed-backend route run for real, and measured against each of its lanes alone and the CPU lane.

llama.cpp's RPC backend is the mechanism: one `ggml-rpc-server` per lane (a node of the route),
each on its lane's device, and a client that splits the model's layers across them (`-rpc`,
`-dev RPC0,RPC1`, `-ts 1,1`). On identical token sequences (a fixed prompt set) the route's full
logits are compared with each lane alone and with the CPU lane (max |delta logit|, mean KL, top-1
agreement on decisive positions), and greedy continuations are compared too. Over the committed
corpus (the runner's corpus_parity chunks: 32 sequences of 258 tokens) the route's next-token
distributions are compared with the certified CPU lane's under corpus_parity's bounds for the model.

Every party runs one recipe (RecipeFlags: by default the lanes' certified one, KV f16 with flash
attention on, full offload), and the record states it as the Recipe derived from the argv this module
built for the route's commands (recipe_from_argv), never from what a lane printed.

Everything lands in <out_dir>: logs/compat.log (every command as a `$` block with its output and
exit), logs/compat.config.json (the tool's own configuration: the recipe), logs/rpc.<lane>.log (each
server's own output: protocol version, devices, connections), logs/greedy.<who>.<i>.txt (each
continuation), logs/logits.npz (every logits array compared), logs/corpus.positions.npz (the corpus
comparison per scored position) and compat_report.json: the figures,
which recompute(out_dir) re-derives from those raw files alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pathlib
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time

import numpy as np
from google.protobuf import json_format

from proto import runner_report_pb2 as rpb
from tools.evidence import build_evidence
from tools.model import reference_forward
from tools.runner import backends, exits, lane_files, log_blocks
from tools.runner.checks import corpus_parity, reference_parity
from tools.runner.checks.reference_parity import TIE_MARGIN, compare
from tools.runner.steps import ProcessTracker, Step

SCHEMA_VERSION = 1
REPORT_FILE = "compat_report.json"
LOGITS_FILE = "logits.npz"
# Identical token sequences for every party: fixed prompts, tokenized by each binary the same way
# (same vocab); the token ids are compared too.
PROMPTS = (
    "The quick brown fox jumps over the lazy dog. Once upon a time",
    "In the beginning the Universe was created. This has made a lot of people very angry",
    "It was the best of times, it was the worst of times, it was the age of wisdom",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little money",
)
# Full logits (32000 floats per position per party) are compared on the first LOGIT_PROMPTS
# prompts, greedy continuations on all of them: logits on all four made a 37 MB raw file (float32
# logits do not compress), too large for the evidence that must travel to a GPU host with the lanes.
LOGIT_PROMPTS = 1
N_PREDICT = 16
SEED = 42
_RPC_VERSION = re.compile(r"Starting RPC server v(\d+\.\d+\.\d+)")
# One line per server that holds weights; the device index restarts at 0 on every server, so the
# endpoint is what tells them apart: `load_tensors: RPC0[127.0.0.1:38163] model buffer size = 4.50 MiB`.
_RPC_BUFFER = re.compile(r"load_tensors: +RPC\d*\[([^\]]+)\] model buffer size = +([0-9.]+) MiB")
# -ngl for "every layer": more layers than any GGUF model has (llama.cpp then offloads the output
# layer too); the recipe states it as n_gpu_layers -1, as a lane record's full offload.
OFFLOAD_ALL = 999
RECIPE_CONFIG_KEY = "recipe"
# The corpus comparison's reference party: the certified CPU lane, as in an accelerator's corpus_parity.
CORPUS_REFERENCE = "cpu"
CORPUS_FILE = "corpus.positions.npz"
# logits.npz keys of the path runs (_measure_paths): prompt.<i>.tokens, path.<who>.<i>.{tokens,top_logit,taken_logit}.
PROMPT_KEY = "prompt"
PATH_KEY = "path"
COMPLETION_TRAILER = b"\n\n"
# compat.config.json's greedy_rule: other text agrees as a near-tie path (path_gap). Measurements
# without it were judged by _late_divergence_of_every_lane.
GREEDY_RULE_PATHS = "near-tie-paths"
_CORPUS_ARRAYS = (*corpus_parity.POSITION_ARRAYS, "tokens", "reference_tokens")


class RouteError(Exception):
    """The route could not be run or measured; the message says which part and where its log is."""


@dataclasses.dataclass(frozen=True)
class RouteLane:
    lane_id: str
    backend: str
    lane_dir: pathlib.Path
    evidence: pathlib.Path
    device: str = ""  # ggml device name for its rpc-server (default: <Backend>0)
    report: pathlib.Path | None = None  # the lane's certification run on this host, if any

    @property
    def alias(self) -> str:
        return self.lane_id.rsplit("-", 1)[-1]

    @property
    def server_device(self) -> str:
        return self.device or backends.get(self.backend).rpc_device


# common's -lv threshold at which libllama's debug lines (per-device KV layers) are logged.
LOG_VERBOSITY_DEBUG = 5


@dataclasses.dataclass(frozen=True)
class RecipeFlags:
    """How every party runs the model. The defaults are the CUDA and Vulkan lanes' certified recipe
    (their records prove KV f16 with flash attention on, ctx 1024, batch 1024/512), so the
    compatibility record covers the recipe a route over them serves."""

    kv_cache_type: str = "f16"  # K and V
    flash_attention: str = "on"  # on | off
    context_size: int = 1024  # llama-completion's -c (llama-logits sizes its context to the prompt)
    batch_size: int = 1024
    ubatch_size: int = 512


@dataclasses.dataclass(frozen=True)
class Tolerances:
    max_abs_delta_logit: float = 0.05
    max_mean_kl: float = 1e-4
    min_top1_agreement: float = 1.0  # on decisive positions (reference margin > TIE_MARGIN)
    min_greedy_agreement: float = 1.0


def logit_bounds(quantized: tuple[str, ...], given: Tolerances) -> tuple[Tolerances, float]:
    """The route's logit tolerances and tie margin for a model whose weight types other than F32 are
    `quantized`: an F32 model is judged under `given` (by default the F32 bounds the policy's
    compatibility bounds state); any other model under the bounds its lanes' reference_parity
    judges it by (reference_parity.QUANTIZED_BOUNDS), with `given`'s greedy agreement. F32 bounds
    could never pass a quantized model, and a flag never makes its bounds looser."""
    if not quantized:
        return given, TIE_MARGIN
    q = reference_parity.QUANTIZED_BOUNDS
    return (dataclasses.replace(given, max_abs_delta_logit=q["tol_max_abs_delta_logit"], max_mean_kl=q["tol_mean_kl"],
                                min_top1_agreement=q["tol_top1_agreement_decisive"]), q["tie_margin"])


def loosened_bounds(cfg: dict[str, str]) -> list[str]:
    """Logit tolerances in compat.log looser than its model's kind allows (logit_bounds over the
    default Tolerances for the weight types the log names), a missing one included."""
    quantized = tuple(t for t in cfg.get("corpus_quantized_types", "").split(",") if t)
    want, tie = logit_bounds(quantized, Tolerances())
    kind = "quantized" if quantized else "F32"
    out = []
    for key, bound in [*dataclasses.asdict(want).items(), ("tie_margin", tie)]:
        name = key if key == "tie_margin" else f"tol_{key}"
        try:
            value = float(cfg[name])
        except (KeyError, ValueError):
            out.append(f"{name} not recorded")
            continue
        # A wider tie margin leaves fewer positions decisive: looser, as a lower minimum or a higher maximum.
        looser = value < bound if key.startswith("min_") else value > bound
        if looser or math.isnan(value):
            out.append(f"{name}={value:g} is looser than the {kind} model's bound {bound:g}")
    return out


def measurement_config(logs: pathlib.Path, text: str) -> tuple[dict[str, str], list[str]]:
    """The measurement's configuration and why it cannot be read: compat.config.json alone (a lane
    process writes none of it). A measurement made before every value went there (its file has no
    tie_margin) also has compat.log's `# lanes-config` lines read, refused where a command's output
    carries one (a lane process printing configuration)."""
    path = log_blocks.config_path(logs, "compat")
    try:
        own = log_blocks.load_config(path) if path.is_file() else {}
    except log_blocks.StepConfigError as err:
        return {}, [f"{path.name}: unreadable ({err})"]
    if "tie_margin" in own:
        return own, []
    printed = [c for c in log_blocks.commands(text) if c.exit_code is not None and "# lanes-config " in c.output]
    problems = [f"compat.log: {len(printed)} command output(s) carry `# lanes-config` lines; a lane process "
                "cannot configure the measurement"] if printed else []
    return {**log_blocks.config_values(text), **own}, problems


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.2)
    return False


def logits_argv(binary: pathlib.Path, model: pathlib.Path, prompt: str, out: pathlib.Path, threads: int,
                route: list[str] | None = None, flags: RecipeFlags = RecipeFlags()) -> list[str]:
    # llama-logits takes no -c/-b/-ub: its context is the prompt plus 16 tokens, one batch.
    argv = [str(binary), "-m", str(model), "-p", prompt, "-o", str(out), "-t", str(threads),
            "-fa", flags.flash_attention, "-ctk", flags.kv_cache_type, "-ctv", flags.kv_cache_type]
    return argv + (route or [])


def greedy_argv(binary: pathlib.Path, model: pathlib.Path, prompt: str, threads: int,
                route: list[str] | None = None, flags: RecipeFlags = RecipeFlags()) -> list[str]:
    return [str(binary), "-m", str(model), "-p", prompt, "-n", str(N_PREDICT), "--temp", "0", "-s", str(SEED),
            "--ignore-eos", "-no-cnv", "-t", str(threads), "-fa", flags.flash_attention,
            "-ctk", flags.kv_cache_type, "-ctv", flags.kv_cache_type, "-c", str(flags.context_size),
            "-b", str(flags.batch_size), "-ub", str(flags.ubatch_size), "--no-display-prompt",
            # Control tokens print as their text (else as nothing), so the path runs, which parse
            # special tokens, are fed every token the party generated.
            "-sp", *(route or [])]


def perplexity_argv(binary: pathlib.Path, model: pathlib.Path, out: pathlib.Path, threads: int,
                    route: list[str] | None = None, flags: RecipeFlags = RecipeFlags()) -> list[str]:
    """llama-perplexity over the runner's corpus chunks (corpus_parity: 258 tokens, one batch a chunk),
    writing upstream's --kl-divergence-base file, under the route's recipe."""
    size = str(corpus_parity.CONTEXT)
    return [str(binary), "-m", str(model), "-f", str(corpus_parity.CORPUS), "-c", size, "-b", size,
            "--chunks", str(corpus_parity.LANE_CHUNKS), "--kl-divergence-base", str(out), "-t", str(threads),
            "-fa", flags.flash_attention, "-ctk", flags.kv_cache_type, "-ctv", flags.kv_cache_type, *(route or [])]


def is_route_command(argv: list[str]) -> bool:
    """A command of the route itself (the client over the rpc-servers), not a comparison party."""
    return "-rpc" in argv or "--rpc" in argv


def recipe_from_argv(argvs: list[list[str]]) -> rpb.Recipe:
    """The recipe the route's commands ran, read from their argv alone (the fields of a lane record's
    recipe, tools/runner/recipe.py): -ctk/-ctv (llama.cpp's f16 when absent), -fa when on/off (auto
    proves no mode), -ngl (OFFLOAD_ALL or more: -1, every layer; the fewest otherwise; absent: 0),
    the largest -c/-b/-ub and -np (absent: 1, one sequence per command). How long a sequence was is
    the prompts', not a flag: context_per_sequence stays unstated (0), and measure() states
    longest_sequence_tokens from the sequences it compared (longest_compared_sequence)."""
    kv: set[str] = set()
    fa: set[str] = set()
    offload: list[int] = []
    sizes = {"context_size": 0, "batch_size": 0, "ubatch_size": 0, "parallel_sequences": 0}
    names = {"context_size": ("-c", "--ctx-size"), "batch_size": ("-b", "--batch-size"),
             "ubatch_size": ("-ub", "--ubatch-size"), "parallel_sequences": ("-np", "--parallel")}
    for argv in argvs:
        kv.add(log_blocks.flag_value(argv, "-ctk", "--cache-type-k") or "f16")
        kv.add(log_blocks.flag_value(argv, "-ctv", "--cache-type-v") or "f16")
        mode = log_blocks.flag_value(argv, "-fa", "--flash-attn")
        if mode in ("on", "off"):
            fa.add(mode)
        ngl = log_blocks.flag_value(argv, "-ngl", "--n-gpu-layers", "--gpu-layers")
        layers = int(ngl) if ngl is not None and ngl.isdigit() else 0  # -1/auto: nothing claimed
        offload.append(-1 if layers >= OFFLOAD_ALL else layers)
        for field, flag_names in names.items():
            value = log_blocks.flag_value(argv, *flag_names)
            given = int(value) if value is not None and value.isdigit() else (1 if field == "parallel_sequences" else 0)
            sizes[field] = max(sizes[field], given)
    ngl = 0 if not offload else -1 if all(o == -1 for o in offload) else min(o for o in offload if o != -1)
    return rpb.Recipe(kv_cache_types=sorted(kv), flash_attention=sorted(fa), n_gpu_layers=ngl, **sizes)


def default_split(n_servers: int) -> str:
    """-ts weights that give every server at least one transformer layer of a small model.

    llama.cpp splits the repeating layers and the output layer (n_layer + 1) by these weights; with
    equal weights the first server of a 2-layer model took both layers and the second only the
    output layer (measured on the H200). Weights 1, 2, ..., n put the output layer's extra share on
    the last server. recompute() checks the outcome (every server holds a KV-cache layer)."""
    return ",".join(str(i + 1) for i in range(n_servers))


def measure(lanes: list[RouteLane], client: str, cpu_lane_dir: pathlib.Path, model: pathlib.Path,
            out_dir: pathlib.Path, tolerances: Tolerances, threads: int, timeout_s: float = 300,
            tensor_split: str = "", cpu_evidence: pathlib.Path | None = None,
            flags: RecipeFlags = RecipeFlags()) -> dict:
    """Runs the route and every comparison, every party under `flags`; writes the raw files and
    compat_report.json; returns it. `cpu_evidence` is the CPU lane's build evidence (its lane
    manifest's), which the report names by digest. Every lane and the CPU lane are re-hashed against
    their build evidence before anything runs and after everything ran (lane_file_problems): a
    difference is a RouteError. The step's exit file (compat.exit) says PASS only when the route was
    measured and is compatible."""
    if flags.flash_attention not in ("on", "off"):
        raise RouteError(f"flash attention {flags.flash_attention!r}: give on or off (auto proves no mode)")
    if len(lanes) < 2 or len({lane.backend for lane in lanes}) < 2:
        raise RouteError("a mixed route needs two or more lanes of different backends")
    aliases = [lane.alias for lane in lanes]
    if len(set(aliases)) != len(lanes) or {"route", "cpu"} & set(aliases) or any("." in a for a in aliases):
        raise RouteError(f"the route's lanes must be distinct, with distinct backend names other than route/cpu: {aliases}")
    by_id = {lane.lane_id: lane for lane in lanes}
    if client not in by_id:
        raise RouteError(f"--client {client} is not one of the route's lanes {sorted(by_id)}")
    unverified = lane_file_problems(lanes, cpu_lane_dir, cpu_evidence)
    if unverified:
        raise RouteError("the route's lanes are not the lanes their build evidence describes: " + "; ".join(unverified))
    try:
        _, corpus_sha = corpus_parity.read_corpus()
        quantized = reference_parity.quantized_types(model)
        reference_parity.model_bounds(model)  # a type no bound was measured for is refused by name
    except (corpus_parity.CorpusError, OSError, ValueError) as err:
        raise RouteError(f"the corpus comparison cannot run: {err}") from err
    tolerances, tie_margin = logit_bounds(quantized, tolerances)
    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    tracker = ProcessTracker()
    step = Step("compat", logs, tracker)
    step.log(f"# lanes re-hashed before the route: 0 differences from their build evidence ({len(lanes)} lanes and the CPU lane)")
    step.config("corpus_sha256", corpus_sha)
    step.config("corpus_quantized_types", ",".join(quantized))
    step.config("corpus_bounds", corpus_parity.bounds_kind(quantized, accelerator=True))
    # Every value the figures are judged by goes to compat.config.json (this tool's own file, which no
    # lane process writes); the log repeats them for a reader.
    def configure(key: str, value: object) -> None:
        step.config(key, value)
        step.log(f"# lanes-config {key}={value}")

    configure("tie_margin", repr(tie_margin))
    model_sha = _digest(model).removeprefix("sha256:")
    configure("model_sha256", model_sha)
    configure("prompts", len(PROMPTS))
    configure("logit_prompts", LOGIT_PROMPTS)
    configure("greedy_rule", GREEDY_RULE_PATHS)
    # Each lane as measured: lane id, build evidence digest, runner report digest, server device.
    for lane in lanes:
        configure(f"lane.{lane.alias}", f"{lane.lane_id} {build_evidence.evidence_digest(lane.evidence)} "
                  f"{_digest(lane.report) if lane.report else '-'} {lane.server_device}")
    for key, value in dataclasses.asdict(tolerances).items():
        configure(f"tol_{key}", repr(value))
    servers: list[tuple[RouteLane, int, subprocess.Popen, pathlib.Path]] = []
    arrays: dict[str, np.ndarray] = {}
    route_argvs: list[list[str]] = []  # what the route ran: its recipe
    measured = False
    try:
        for lane in lanes:
            port = _free_port()
            log_path = logs / f"rpc.{lane.alias}.log"
            argv = [str(lane.lane_dir / "bin" / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port),
                    "-d", lane.server_device]
            step.log(f"$ {' '.join(argv)}  (log: {log_path.name})")
            with open(log_path, "w") as f:
                proc = tracker.popen(argv, stdout=f, stderr=subprocess.STDOUT)
            if not _wait_listening(port, proc, 60):
                raise RouteError(f"rpc-server of {lane.lane_id} did not listen on 127.0.0.1:{port} (see {log_path})")
            servers.append((lane, port, proc, log_path))
        endpoints = ",".join(f"127.0.0.1:{port}" for _, port, _, _ in servers)
        split = tensor_split or default_split(len(servers))
        offload = ["-ngl", str(OFFLOAD_ALL)]
        route_args = [*offload, "-rpc", endpoints, "-dev", ",".join(f"RPC{i}" for i in range(len(servers))),
                      "-ts", split]
        greedy_route = [*offload, "--rpc", endpoints, "--device", ",".join(f"RPC{i}" for i in range(len(servers))),
                        "-ts", split]
        configure("endpoints", endpoints)
        client_lane = by_id[client]
        parties = [("route", client_lane.lane_dir, route_args, greedy_route)]
        parties += [(lane.alias, lane.lane_dir, offload, offload) for lane in lanes]
        parties += [("cpu", cpu_lane_dir, [], [])]
        for who, lane_dir, args, gargs in parties:
            for i, prompt in enumerate(PROMPTS):
                if i < LOGIT_PROMPTS:
                    out = logs / f"logits.{who}.{i}.bin"
                    argv = logits_argv(lane_dir / "bin" / "llama-logits", model, prompt, out, threads, args, flags)
                    if who == "route":
                        route_argvs.append(argv)
                    res = step.run(argv, timeout_s)
                    if res.exit_code != 0 or not out.is_file():
                        raise RouteError(f"llama-logits for {who}, prompt {i}, exited {exits.describe(res.exit_code)} (see {step.log_path})")
                    tokens, values = reference_forward.read_logits_file(out)
                    arrays[f"{who}.{i}.tokens"], arrays[f"{who}.{i}.logits"] = np.asarray(tokens), np.asarray(values)
                    out.unlink()
                text = logs / f"greedy.{who}.{i}.txt"
                argv = greedy_argv(lane_dir / "bin" / "llama-completion", model, prompt, threads, gargs, flags)
                if who == "route":
                    route_argvs.append(argv)
                step.log(log_blocks.command_line(argv, f"stdout: {text.name}"))
                started = time.monotonic()
                proc = tracker.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                try:
                    stdout, stderr = proc.communicate(timeout=timeout_s)
                except subprocess.TimeoutExpired as err:
                    tracker.stop(proc)
                    raise RouteError(f"llama-completion for {who}, prompt {i}, timed out after {timeout_s:g}s") from err
                text.write_bytes(stdout)
                step.log(stderr.decode(errors="replace"))
                step.log(f"# exit {proc.returncode} after {time.monotonic() - started:.2f}s")
                if proc.returncode != 0:
                    raise RouteError(f"llama-completion for {who}, prompt {i}, exited {exits.describe(proc.returncode)} (see {step.log_path})")
        _measure_paths(step, parties[1:], model, logs, arrays, threads, timeout_s, flags)
        # llama-perplexity takes common's spelling (--rpc, --device); only llama-logits also takes -rpc.
        # common's logger drops libllama's info and debug lines below verbosity 5, and those are the
        # lines (weight buffers, KV layers per device) that show the corpus run really split.
        corpus_route = [*greedy_route, "-lv", str(LOG_VERBOSITY_DEBUG)]
        route_argvs.append(_corpus_comparison(step, client_lane.lane_dir, corpus_route, cpu_lane_dir, model, logs,
                                              threads, timeout_s, flags, out_dir))
        # A lane process may have rewritten a file of its lane or another's while the route ran.
        changed = lane_file_problems(lanes, cpu_lane_dir, cpu_evidence)
        if _digest(model).removeprefix("sha256:") != model_sha:
            changed.append(f"the model {model} changed")
        if changed:
            raise RouteError("a lane changed while the route was measured: " + "; ".join(changed))
        step.log("# lanes re-hashed after the route: 0 differences from their build evidence")
        # The tool's own file, not a log line a lane's output could repeat: recompute reads it there.
        recipe = recipe_from_argv(route_argvs)
        recipe.longest_sequence_tokens = max(longest_compared_sequence(arrays), corpus_sequence(logs))
        step.config(RECIPE_CONFIG_KEY, json.dumps(json_format.MessageToDict(recipe), sort_keys=True))
        measured = True
    finally:
        tracker.stop_all(grace_s=2.0)
        with open(logs / LOGITS_FILE, "wb") as f:
            np.savez_compressed(f, **arrays)
        if not measured:  # the exception on its way names the command
            step.finish(rpb.CheckResult.FAIL, "failed: see the last command")
    figures = recompute(out_dir)
    # CheckResult statuses (Step.finish writes "<0|1> <status>"), never a process exit code: 0 is
    # STATUS_UNSPECIFIED, and a passing measurement once read "1 STATUS_UNSPECIFIED".
    step.finish(rpb.CheckResult.PASS if figures["compatible"] else rpb.CheckResult.FAIL,
                "compatible" if figures["compatible"] else "not compatible: " + "; ".join(figures["problems"]))
    report = {
        "schema_version": SCHEMA_VERSION,
        "lanes": [{"lane_id": lane.lane_id, "backend": lane.backend, "server_device": lane.server_device,
                   "build_evidence_digest": build_evidence.evidence_digest(lane.evidence),
                   "certification_report_digest": _digest(lane.report) if lane.report else "",
                   "device_class": _device_class(lane.report)} for lane in lanes],
        "client_lane": client,
        "cpu_lane_build_evidence_digest": _evidence_digest(cpu_evidence),
        "model_sha256": model_sha,  # re-hashed equal after the run
        "prompts": list(PROMPTS),
        "network": {"endpoints": endpoints.split(","), "loopback": True,
                    "path": "client and every rpc-server on one host, TCP over 127.0.0.1"},
    }
    report.update(figures)
    report["log_digests"] = {p.name: _digest(p) for p in sorted(logs.iterdir()) if p.is_file()}
    (out_dir / REPORT_FILE).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return report


def lane_file_problems(lanes: list[RouteLane], cpu_lane_dir: pathlib.Path, cpu_evidence: pathlib.Path | None) -> list[str]:
    """Why a lane of the route, or the CPU lane, is not the lane its build evidence describes (a file
    of bin/ or lib/ changed, missing or unlisted; evidence of another lane); empty when each is. The
    measurement binds its record to those evidence digests, so a swapped binary would measure a lane
    nobody certified. measure() checks before and after the run: a file swapped and put back within
    it is not seen."""
    problems = []
    for lane in lanes:
        try:
            evidence = build_evidence.read_evidence(lane.evidence)
        except build_evidence.EvidenceError as err:
            problems.append(f"{lane.lane_id}: {err}")
            continue
        if evidence.lane_id != lane.lane_id:
            problems.append(f"{lane.evidence} is the build evidence of {evidence.lane_id}, not {lane.lane_id}")
            continue
        found = lane_files.differences(evidence, lane.lane_dir)
        problems += [f"{lane.lane_id} ({lane.lane_dir}): {p}" for p in found[:5]]
    arch = lanes[0].lane_id.split("-")[1] if lanes else ""  # <os>-<arch>-<backend>: the CPU lane's arch
    try:
        lane_files.verify_reference_lane(cpu_lane_dir, cpu_evidence, arch)
    except lane_files.ReferenceLaneError as err:
        problems.append(str(err).replace("--cpu_lane_evidence", "--cpu_evidence"))
    return problems


def route_continuation(greedy_file: pathlib.Path) -> str | None:
    """The text the route generated for a prompt: its greedy file less llama-completion's closing
    LOG("\\n\\n") (completion.cpp prints it after the last token), bytes that are not UTF-8 kept as
    surrogates (a 16th token may end inside a character; the argv carries them back as the same
    bytes); None when the file does not end so or holds a NUL (no argv can carry it): no path can
    then be measured, and the prompt agrees only where the text is identical."""
    data = greedy_file.read_bytes() if greedy_file.is_file() else b""
    if not data.endswith(COMPLETION_TRAILER) or b"\0" in data:
        return None
    return data[: -len(COMPLETION_TRAILER)].decode("utf-8", "surrogateescape")


def fed_bytes(i: int, continuation: str) -> bytes:
    """What the path runs of prompt i are fed: the prompt and the route's continuation, as bytes."""
    return (PROMPTS[i] + continuation).encode("utf-8", "surrogateescape")


def _measure_paths(step: Step, parties: list[tuple[str, pathlib.Path, list[str], list[str]]], model: pathlib.Path,
                   logs: pathlib.Path, arrays: dict[str, np.ndarray], threads: int, timeout_s: float,
                   flags: RecipeFlags) -> None:
    """Each party alone (every lane, the CPU lane) fed the route's greedy text, prompt by prompt, in one
    llama-logits batch: per position its top logit and the logit of the token the text takes next
    (path.<who>.<i>.*), the prompt's own tokens (the CPU lane's) to say where the continuation starts,
    and the bytes fed (prompt.<i>.fed: compat.log cannot hold a -p with a newline as one line).
    recompute() reads from them whether the route's text is a path the party itself takes up to
    near-ties; the logits themselves (152k floats a position for some models) are not kept."""
    cpu_dir = next(lane_dir for who, lane_dir, _, _ in parties if who == CORPUS_REFERENCE)
    for i, prompt in enumerate(PROMPTS):
        continuation = route_continuation(logs / f"greedy.route.{i}.txt")
        if continuation is None:
            step.log(f"# greedy.route.{i}.txt does not end as llama-completion's output does: no path measured")
            continue
        arrays[f"{PROMPT_KEY}.{i}.fed"] = np.frombuffer(fed_bytes(i, continuation), np.uint8)
        runs = [(PROMPT_KEY, cpu_dir, [], prompt)]
        runs += [(f"{PATH_KEY}.{who}", lane_dir, args, prompt + continuation) for who, lane_dir, args, _ in parties]
        for key, lane_dir, args, text in runs:
            out = logs / f"{key}.{i}.bin"
            argv = logits_argv(lane_dir / "bin" / "llama-logits", model, text, out, threads, args, flags)
            res = step.run(argv, timeout_s)
            if res.exit_code != 0 or not out.is_file():
                raise RouteError(f"llama-logits for {key}, prompt {i}, exited {exits.describe(res.exit_code)} "
                                 f"(see {step.log_path})")
            try:
                tokens, values = reference_forward.read_logits_file(out)
            except ValueError as err:
                raise RouteError(f"llama-logits for {key}, prompt {i}: {err}") from err
            finally:
                out.unlink(missing_ok=True)
            if tokens.size and (tokens.min() < 0 or tokens.max() >= values.shape[1]):
                raise RouteError(f"llama-logits for {key}, prompt {i}: token ids outside its {values.shape[1]} logits")
            arrays[f"{key}.{i}.tokens"] = tokens.astype(np.int32)
            if key != PROMPT_KEY:
                taken = np.full(tokens.size, np.nan, np.float32)
                taken[:-1] = values[np.arange(tokens.size - 1), tokens[1:]]
                arrays[f"{key}.{i}.top_logit"] = values.max(axis=1).astype(np.float32)
                arrays[f"{key}.{i}.taken_logit"] = taken


def path_gap(arrays, who: str, i: int, route_text: str | None) -> float:
    """The largest gap, in nats, between `who`'s top logit and the logit of the token the route's
    continuation of prompt i takes, over every position of the continuation (the row before its first
    token through the row before its last), `who` fed the prompt and that continuation
    (_measure_paths). NaN when not measured; when what was fed is not the prompt and the route's text
    as greedy.route.<i>.txt holds it; when the continuation is not N_PREDICT tokens (a token that
    prints as nothing, or a text cut short, would leave tokens nobody judged); or when not comparable
    (the prompt's tokens are not its start, a non-finite logit, a taken logit above the top one)."""
    key = f"{PATH_KEY}.{who}.{i}"
    names = (f"{PROMPT_KEY}.{i}.fed", f"{PROMPT_KEY}.{i}.tokens", f"{key}.tokens", f"{key}.top_logit",
             f"{key}.taken_logit")
    if route_text is None or not 0 <= i < len(PROMPTS) or not all(n in arrays for n in names):
        return math.nan
    fed, prompt, tokens, top, taken = (np.asarray(arrays[n]) for n in names)
    if fed.dtype != np.uint8 or fed.tobytes() != fed_bytes(i, route_text):
        return math.nan
    n, p = tokens.size, prompt.size
    if p == 0 or n - p != N_PREDICT or top.shape != (n,) or taken.shape != (n,) or not np.array_equal(tokens[:p], prompt):
        return math.nan
    # Row j holds the logits for the token at j + 1: rows p-1 .. n-2 predict the continuation's tokens.
    gaps = top[p - 1:n - 1].astype(np.float64) - taken[p - 1:n - 1].astype(np.float64)
    if not np.all(np.isfinite(gaps)) or np.any(gaps < 0):
        return math.nan
    return float(gaps.max())


def _corpus_comparison(step: Step, client_dir: pathlib.Path, route_args: list[str], cpu_lane_dir: pathlib.Path,
                       model: pathlib.Path, logs: pathlib.Path, threads: int, timeout_s: float, flags: RecipeFlags,
                       out_dir: pathlib.Path) -> list[str]:
    """The route and the CPU lane over the corpus; writes logs/CORPUS_FILE and returns the route's argv.
    The logits files (2 GB for a 262k vocabulary) live in a directory made now and go with it."""
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="corpus-", dir=out_dir))
    try:
        files, route_argv = {}, []
        for who, lane_dir, args in (("route", client_dir, route_args), (CORPUS_REFERENCE, cpu_lane_dir, [])):
            out = scratch / f"{who}.kld"
            argv = perplexity_argv(lane_dir / "bin" / "llama-perplexity", model, out, threads, args, flags)
            route_argv = argv if who == "route" else route_argv
            res = step.run(argv, timeout_s)
            if res.exit_code != 0 or not out.is_file():
                raise RouteError(f"llama-perplexity for {who} exited {exits.describe(res.exit_code)} without its "
                                 f"logits file (see {step.log_path})")
            files[who] = out
        write_corpus_positions(files["route"], files[CORPUS_REFERENCE], logs / CORPUS_FILE)
        return route_argv
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _kld_vocab(path: pathlib.Path) -> int:
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) != 20 or head[:8] != corpus_parity.KLD_MAGIC:
        raise RouteError(f"{path}: not a llama-perplexity --kl-divergence-base file")
    return struct.unpack_from("<i", head, 12)[0]


def write_corpus_positions(route_kld: pathlib.Path, reference_kld: pathlib.Path, dest: pathlib.Path) -> None:
    """Per scored position of the corpus: the route's figures against the CPU lane's (KL, NLLs, top-1s),
    the two tokenizations side by side, as corpus_parity.position_figures computes them."""
    opened: list[corpus_parity.KldFile] = []
    try:
        n_vocab = _kld_vocab(route_kld)
        route = corpus_parity.KldFile(route_kld, n_vocab, corpus_parity.LANE_CHUNKS)
        opened.append(route)
        reference = corpus_parity.KldFile(reference_kld, n_vocab, corpus_parity.LANE_CHUNKS)
        opened.append(reference)
        tokens, reference_tokens = route.tokens(), reference.tokens()
        if np.array_equal(tokens, reference_tokens):
            positions = corpus_parity.position_figures(route.rows(), reference.rows(),
                                                       corpus_parity.scored_next_tokens(tokens))
        else:  # not comparable position by position; recompute names the difference
            positions = corpus_parity.position_figures(iter(()), iter(()), np.zeros(0, np.int64))
    except corpus_parity.CorpusError as err:
        raise RouteError(f"corpus comparison: {err}") from err
    finally:
        for f in opened:
            f.close()
    with open(dest, "wb") as f:
        np.savez_compressed(f, tokens=tokens.astype(np.int32), reference_tokens=reference_tokens.astype(np.int32),
                            **positions)


def corpus_sequence(logs: pathlib.Path) -> int:
    """The longest sequence the corpus comparison verified: a chunk less its unscored last position."""
    path = pathlib.Path(logs) / CORPUS_FILE
    if not path.is_file():
        return 0
    with np.load(path, allow_pickle=False) as z:
        if {"tokens", "lane_nll"} <= set(z.files) and z["tokens"].size >= corpus_parity.CONTEXT and z["lane_nll"].size > 0:
            return corpus_parity.CONTEXT - 1
    return 0


def corpus_figures(logs: pathlib.Path) -> tuple[dict, list[str]]:
    """The corpus comparison's figures and why they fail, from logs/CORPUS_FILE and compat.config.json
    alone; ({}, []) for a measurement made before the route's corpus parity (neither exists). The
    bounds are corpus_parity's for the kind the config names, which must be the model's kind: a
    measurement cannot state looser ones."""
    path = pathlib.Path(logs) / CORPUS_FILE
    cfg_path = log_blocks.config_path(logs, "compat")
    try:
        cfg = log_blocks.load_config(cfg_path) if cfg_path.is_file() else {}
    except log_blocks.StepConfigError as err:
        return {}, [f"{cfg_path.name}: unreadable ({err})"]
    kind = cfg.get("corpus_bounds")
    if kind is None and not path.is_file():
        return {}, []
    if not path.is_file():
        return {}, [f"{CORPUS_FILE}: missing, but {cfg_path.name} states a corpus comparison"]
    quantized = tuple(t for t in cfg.get("corpus_quantized_types", "").split(",") if t)
    if kind not in corpus_parity.BOUNDS or kind != corpus_parity.bounds_kind(quantized, accelerator=True):
        return {}, [f"corpus bounds {kind!r} are not corpus_parity's for a model of types {list(quantized)}"]
    problems = []
    if cfg.get("corpus_sha256") != corpus_parity.CORPUS_SHA256:
        problems.append(f"corpus sha256 {cfg.get('corpus_sha256')!r} is not the committed corpus's")
    tol = corpus_parity.BOUNDS[kind]
    with np.load(path, allow_pickle=False) as npz:
        z = {k: npz[k] for k in npz.files}
    missing = [k for k in _CORPUS_ARRAYS if k not in z]
    if missing:
        return {}, [f"route vs {CORPUS_REFERENCE} over the corpus: {CORPUS_FILE} lacks {', '.join(missing)}"]
    # Shapes before figures: arrays of different lengths are no measurement (and would not index).
    malformed = corpus_parity.shape_problems(z, None)
    if malformed or np.asarray(z["tokens"]).ndim != 1 or np.asarray(z["reference_tokens"]).ndim != 1:
        return {}, [f"route vs {CORPUS_REFERENCE} over the corpus: {p}" for p in malformed or ["token arrays not 1-D"]]
    counts, metrics = corpus_parity.figures(z, tol["tie_margin"])
    if not np.array_equal(z["tokens"], z["reference_tokens"]):
        problems.append("the route and the CPU lane tokenized the corpus differently")
    if not np.array_equal(z["next_token"], corpus_parity.scored_next_tokens(z["tokens"])):
        problems.append("the positions' next tokens are not the corpus tokens")
    if counts["nonfinite"]:
        problems.append(f"{counts['nonfinite']} non-finite figure(s)")
    if counts["n_scored"] < corpus_parity.MIN_SCORED or counts["n_compared"] != counts["n_scored"]:
        problems.append(f"{counts['n_compared']} of {counts['n_scored']} positions compared; need every one of at "
                        f"least {corpus_parity.MIN_SCORED}")
    need = max(1, math.ceil(tol["tol_min_decisive_fraction"] * counts["n_compared"]))
    if counts["n_decisive"] < need:
        problems.append(f"only {counts['n_decisive']} decisive positions; need {need}")
    # `not (x <= bound)` also fails NaN or a missing figure.
    for key, bound in (("mean_kl", tol["tol_mean_kl"]), ("p99_kl", tol["tol_p99_kl"])):
        if not metrics.get(key, math.nan) <= bound:
            problems.append(f"{key} {metrics.get(key, math.nan):.3g} > {bound:g}")
    if not metrics.get("top1_agreement_decisive", math.nan) >= tol["tol_top1_agreement_decisive"]:
        problems.append(f"top-1 agreement on decisive positions {metrics.get('top1_agreement_decisive', math.nan):.4f} "
                        f"< {tol['tol_top1_agreement_decisive']:g}")
    ratio = metrics.get("ppl_ratio", 0.0)
    if not (ratio > 0 and abs(math.log(ratio)) <= tol["tol_abs_log_ppl_ratio"]):
        problems.append(f"perplexity ratio route/CPU lane {ratio:.5g} outside exp(+-{tol['tol_abs_log_ppl_ratio']:g})")
    figures = {"bounds": kind, "corpus_sha256": cfg.get("corpus_sha256", ""), **counts, **metrics,
               **{k: v for k, v in tol.items()}}
    return figures, [f"route vs {CORPUS_REFERENCE} over the corpus: {p}" for p in problems]


def _digest(path: pathlib.Path) -> str:
    return "sha256:" + hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def _evidence_digest(evidence: pathlib.Path | None) -> str:
    return build_evidence.evidence_digest(evidence) if evidence is not None and evidence.is_file() else ""


def _device_class(report: pathlib.Path | None) -> dict:
    if report is None:
        return {}
    rep = rpb.RunnerReport()
    rep.ParseFromString(pathlib.Path(report).read_bytes())
    return json_format.MessageToDict(rep.device_class)


def recompute(out_dir: pathlib.Path) -> dict:
    """Every figure, from logs/logits.npz, logs/greedy.*.txt, logs/rpc.*.log, compat.log and
    compat.config.json only."""
    logs = pathlib.Path(out_dir) / "logs"
    text = log_blocks.read(logs / "compat.log")
    cfg, injected = measurement_config(logs, text)
    tol = {k.removeprefix("tol_"): float(v) for k, v in cfg.items() if k.startswith("tol_")}
    tie = float(cfg.get("tie_margin", TIE_MARGIN))
    problems: list[str] = injected + loosened_bounds(cfg)
    recipe, why = _measured_recipe(logs, text)
    if why:
        problems.append(why)
    per_server = {p.name: _RPC_VERSION.findall(log_blocks.read(p)) for p in sorted(logs.glob("rpc.*.log"))}
    versions = sorted({v for found in per_server.values() for v in found})
    if len(per_server) < 2 or any(len(found) != 1 for found in per_server.values()) or len(versions) != 1:
        problems.append(f"rpc-server protocol versions {per_server or 'none'}: need two or more servers, each "
                        "printing exactly one version, all equal")
    # The route really split its layers: every RPC device got model weights, in every route run.
    split_runs = []
    for cmd in log_blocks.commands(text):
        if _lists_device_buffers(cmd.argv):  # llama.cpp's own log lists every weight buffer
            devices = {m.group(1) for m in _RPC_BUFFER.finditer(cmd.output) if float(m.group(2)) > 0}
            split_runs.append(sorted(devices))
    n_servers = len(list(logs.glob("rpc.*.log")))
    unsplit = [d for d in split_runs if len(d) < n_servers]
    if not split_runs or unsplit:
        problems.append(f"route runs whose weights were not on every RPC device: {len(unsplit)} of {len(split_runs)}")
    # Every server computes at least one transformer layer (a KV-cache layer), not only the output.
    no_layer = [devs for devs in _kv_devices_per_route_run(text) if len(devs) < n_servers]
    if not split_runs or no_layer:
        problems.append(f"route runs where some RPC device holds no transformer layer: {len(no_layer)} of {len(split_runs)}")
    comparisons: dict[str, dict] = {}
    # What was measured is what compat.log ran: every party (each lane alone, the CPU lane) on every
    # prompt; a party or prompt missing from logits.npz is a problem, never a smaller comparison.
    n_prompts = int(cfg.get("prompts", "0") or 0)
    # Logits on the first logit_prompts prompts (a measurement without the line: on all of them).
    n_logit_prompts = int(cfg.get("logit_prompts", n_prompts) or 0)
    parties = sorted({p.name[len("rpc."):-len(".log")] for p in logs.glob("rpc.*.log")} | {"cpu"})
    if n_prompts <= 0:
        problems.append("compat.log names no prompt count")
    if not 0 < n_logit_prompts <= max(n_prompts, 0):
        problems.append(f"compat.log's logit_prompts={n_logit_prompts} is not between 1 and prompts={n_prompts}")
        n_logit_prompts = 0
    with np.load(logs / LOGITS_FILE, allow_pickle=False) as z:
        keys = set(z.files)
        # The rule is the one the measurement states it was made under, never inferred from its data.
        paths_measured = cfg.get("greedy_rule", "") == GREEDY_RULE_PATHS
        if cfg.get("greedy_rule", GREEDY_RULE_PATHS) != GREEDY_RULE_PATHS:
            problems.append(f"greedy_rule {cfg.get('greedy_rule')!r}: this tool judges only {GREEDY_RULE_PATHS!r}")
        if paths_measured and n_prompts != len(PROMPTS):
            problems.append(f"the measurement states {n_prompts} prompts, not the tool's {len(PROMPTS)}")
        continuations = [route_continuation(logs / f"greedy.route.{i}.txt") for i in range(max(n_prompts, 0))]
        for i in range(n_logit_prompts):
            if f"route.{i}.logits" not in keys:
                problems.append(f"no route logits for prompt {i}")
        for who in parties:
            ref_rows, got_rows, tokens_equal = [], [], True
            for i in range(n_logit_prompts):
                if f"{who}.{i}.logits" not in keys or f"route.{i}.logits" not in keys:
                    problems.append(f"no logits for {who}, prompt {i}")
                    continue
                if not np.array_equal(z[f"{who}.{i}.tokens"], z[f"route.{i}.tokens"]):
                    tokens_equal = False  # different token sequences: not comparable position by position
                    continue
                ref_rows.append(z[f"{who}.{i}.logits"])
                got_rows.append(z[f"route.{i}.logits"])
            if not tokens_equal:
                problems.append(f"route vs {who}: different token sequences")
            if not ref_rows:
                problems.append(f"route vs {who}: nothing compared")
                continue
            try:
                counts, metrics = compare(np.concatenate(ref_rows), np.concatenate(got_rows), tie)
            except ValueError as err:
                problems.append(f"route vs {who}: {err}")
                continue
            greedy_same = [_same_nonempty(logs / f"greedy.{who}.{i}.txt", logs / f"greedy.route.{i}.txt")
                           for i in range(n_prompts)]
            if paths_measured:
                # A continuation other than the party's own agrees where the party, fed the route's
                # text, takes every token of it within the tie margin of its own top-1: the route
                # went another way only at near-ties (as the party's own greedy runs do between
                # batch shapes), never through a token the party ranks clearly lower.
                gaps = [math.nan if same else path_gap(z, who, i, continuations[i])
                        for i, same in enumerate(greedy_same)]
                near = [not same and gap <= tie for same, gap in zip(greedy_same, gaps)]
                greedy = {"greedy_near_tie_paths": sum(near),
                          "greedy_path_gaps": [gap for same, gap in zip(greedy_same, gaps) if not same]}
            else:
                # A measurement made before the path runs: against the CPU lane, a continuation that
                # differs late and only as every lane alone differs is the lanes' divergence;
                # against a lane, only identical text agrees.
                lanes = [p for p in parties if p != CORPUS_REFERENCE]
                near = [not same and who == CORPUS_REFERENCE and _late_divergence_of_every_lane(logs, i, lanes)
                        for i, same in enumerate(greedy_same)]
                greedy = {"greedy_divergent_as_every_lane": sum(near)}
            comparisons[who] = {**counts, **metrics, "tokens_identical": tokens_equal,
                                "greedy_agreement": (sum(greedy_same) + sum(near)) / n_prompts if n_prompts else math.nan,
                                "greedy_identical": sum(greedy_same), **greedy, "greedy_prompts": n_prompts}
            problems += [f"route vs {who}: {p}" for p in _judge(comparisons[who], tol)]
    corpus, corpus_problems = corpus_figures(logs)
    problems += corpus_problems
    worst = {
        "max_abs_delta_logit": max((c.get("max_abs_delta_logit", math.inf) for c in comparisons.values()), default=math.inf),
        "mean_kl": max((c.get("mean_kl", math.inf) for c in comparisons.values()), default=math.inf),
        "top1_agreement": min((c.get("top1_agreement_decisive", -1.0) for c in comparisons.values()), default=-1.0),
        "greedy_agreement": min((c.get("greedy_agreement", -1.0) for c in comparisons.values()), default=-1.0),
    }
    return {"rpc_protocol_version": versions[0] if len(versions) == 1 else "", "comparisons": comparisons,
            "worst": worst, "tolerances": tol, "problems": problems, "compatible": not problems,
            "model_sha256": cfg.get("model_sha256", ""), "prompts_measured": n_prompts,
            "logit_prompts_measured": n_logit_prompts,
            "lanes_measured": sorted(v for k, v in cfg.items() if k.startswith("lane.")),
            "endpoints": [e for e in cfg.get("endpoints", "").split(",") if e], "recipe": recipe, "corpus": corpus}


def longest_compared_sequence(arrays) -> int:
    """The longest token sequence the route ran whose logits were compared position by position (the
    route's llama-logits runs): what the record may state as longest_sequence_tokens."""
    return max((len(arrays[k]) for k in arrays.keys() if k.startswith("route.") and k.endswith(".tokens")), default=0)


def _measured_recipe(logs: pathlib.Path, text: str) -> tuple[dict, str]:
    """(the recipe compat.config.json states, as a Recipe JSON dict, and why it is not what the
    route's commands in compat.log ran; empty when it is). A measurement made before the recipe was
    recorded states none ({}): its figures stand, and the record built from it carries no recipe."""
    path = log_blocks.config_path(logs, "compat")
    if not path.is_file():
        return {}, ""
    try:
        stated = json.loads(log_blocks.load_config(path).get(RECIPE_CONFIG_KEY, "{}"))
    except (log_blocks.StepConfigError, ValueError) as err:
        return {}, f"{path.name}: no readable recipe ({err})"
    ran = [cmd.argv for cmd in log_blocks.commands(text) if is_route_command(cmd.argv)]
    derived = {}
    if ran:
        recipe = recipe_from_argv(ran)
        try:
            with np.load(logs / LOGITS_FILE) as z:
                recipe.longest_sequence_tokens = max(longest_compared_sequence(z), corpus_sequence(logs))
        except (OSError, ValueError) as err:
            return {}, f"{LOGITS_FILE}: unreadable ({err}): the longest sequence measured cannot be derived"
        derived = json_format.MessageToDict(recipe)
    if stated != derived:
        return {}, f"{path.name} states recipe {stated}, the route's commands in compat.log ran {derived}"
    return stated, ""


# Of the CPU lane's continuation, the share the route's must repeat before a divergence can be the
# lanes' own: a near-tie late in 16 tokens, never a continuation that is other text from the start
# (a lane whose completion tool printed the same wrong text alone and in the route).
GREEDY_SHARED_PREFIX = 0.75


def _late_divergence_of_every_lane(logs: pathlib.Path, i: int, lanes: list[str]) -> bool:
    route = logs / f"greedy.route.{i}.txt"
    cpu = logs / f"greedy.{CORPUS_REFERENCE}.{i}.txt"
    if not lanes or not cpu.is_file() or not all(_same_nonempty(logs / f"greedy.{lane}.{i}.txt", route) for lane in lanes):
        return False
    ours, theirs = route.read_bytes(), cpu.read_bytes()
    shared = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return len(theirs) > 0 and shared >= GREEDY_SHARED_PREFIX * len(theirs)


def _same_nonempty(a: pathlib.Path, b: pathlib.Path) -> bool:
    return a.is_file() and b.is_file() and b.stat().st_size > 0 and a.read_bytes() == b.read_bytes()


_KV_LAYER = re.compile(r"llama_kv_cache: layer +\d+: dev = (RPC\d+)")


def _lists_device_buffers(argv: list[str]) -> bool:
    """A route run whose log is read for its weight buffers and KV layers per RPC device: llama-logits
    and llama-perplexity (llama-completion's output is the text compared, not its log)."""
    return is_route_command(argv) and bool(argv) and pathlib.PurePath(argv[0]).name in (
        "llama-logits", "llama-perplexity")


def _kv_devices_per_route_run(text: str) -> list[set[str]]:
    return [{m.group(1) for m in _KV_LAYER.finditer(cmd.output)}
            for cmd in log_blocks.commands(text) if _lists_device_buffers(cmd.argv)]


def _judge(c: dict, tol: dict) -> list[str]:
    out = []
    if c.get("nonfinite_lane") or c.get("nonfinite_reference"):
        return ["non-finite logits"]
    if c.get("n_decisive", 0) == 0:
        out.append("no decisive position: top-1 agreement would prove nothing")
    # `not (x <= limit)` also fails NaN or a missing figure.
    if not c.get("max_abs_delta_logit", math.nan) <= tol.get("max_abs_delta_logit", 0.0):
        out.append(f"max |delta logit| {c.get('max_abs_delta_logit')} > {tol.get('max_abs_delta_logit')}")
    if not c.get("mean_kl", math.nan) <= tol.get("max_mean_kl", 0.0):
        out.append(f"mean KL {c.get('mean_kl')} > {tol.get('max_mean_kl')}")
    if not c.get("top1_agreement_decisive", math.nan) >= tol.get("min_top1_agreement", 1.0):
        out.append(f"top-1 agreement {c.get('top1_agreement_decisive')} < {tol.get('min_top1_agreement')}")
    if not c.get("greedy_agreement", math.nan) >= tol.get("min_greedy_agreement", 1.0):
        out.append(f"greedy agreement {c.get('greedy_agreement')} < {tol.get('min_greedy_agreement')}")
    return out
