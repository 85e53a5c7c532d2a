"""What one runner invocation is asked to do (built from flags by cli.py, or directly by tests).

RunnerConfig is flat: the run-wide options below, then every check's options (its module's
Options dataclass, see checks/base.py) in registry order. Each option is written once, there.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

from tools.runner import checks
from tools.runner.checks.base import option
from tools.runner.checks.graph_smoke import DEFAULT_KV_TYPES

__all__ = ["CHECKS", "DEFAULT_KV_TYPES", "RunnerConfig", "RunOptions", "option_fields"]

# Check names, in the order they run. --skip takes these.
CHECKS = checks.names()


@dataclasses.dataclass
class RunOptions:
    """Options of the whole run (every check may read them)."""
    lane: str = option(help="Lane id or alias (e.g. linux-x86_64-cpu or cpu).", required=True)
    lane_dir: pathlib.Path = option(help="The lane's artifacts (bin/, lib/).", path=True, required=True)
    evidence: pathlib.Path | None = option(help="<lane>.evidence.pb of the artifacts under test.", path=True)
    spec: pathlib.Path = option(help="The lane spec (//lanes:spec.json).", path=True, required=True)
    model: pathlib.Path | None = option(help="GGUF model (the main job passes the embedded tiny model).", path=True)
    out_dir: pathlib.Path = option(help="Directory for logs/.", path=True, required=True)
    report: pathlib.Path = option(help="Report path (.pb; a .json twin is written beside it).", path=True, required=True)
    cpu_lane_dir: pathlib.Path | None = option(
        None, "Accelerator lanes: the CPU lane (parity oracle and speed baseline).", path=True)
    cpu_lane_evidence: pathlib.Path | None = option(
        None, "Accelerator lanes: --cpu_lane_dir's build evidence (<lane>.evidence.pb); the CPU lane is re-hashed "
        "against it.", path=True)
    model_source: str = option("", "Where the model came from, e.g. embedded://tools/model:tiny_llama_f32; default: the path.")
    threads: int = option(help="CPU threads for the lane binaries (default: all cores).",
                          default_factory=lambda: os.cpu_count() or 1)
    skip: tuple[str, ...] = option((), "Checks to skip (bring-up only: non-recordable, exit != 0). One of "
                                   f"{','.join(CHECKS)}.")
    timeout_s: float = option(600.0, "Timeout of each command a step runs, seconds.")
    # Empty / -1: drawn fresh for the run (tools/runner/challenge.py); a fixed one is bring-up only.
    parity_prompt: str = option("")
    n_predict: int = option(16)
    seed: int = option(-1)
    build_provenance: str = option("bazel", 'How the artifacts came to be: "bazel" or "rebuild-from-lane-spec on <host>".')
    gpu_index: int = option(0, "GPU (nvidia-smi index) the run is about; with --gpus=N, the first of N consecutive ones.")
    gpus: int = option(1, "GPUs of this host the model is split over (CUDA lanes; N >= 2 certifies a multi-GPU "
                       "device class: every GPU and the interconnect nvidia-smi topo -m reports).")
    split_mode: str = option("", "--gpus >= 2: llama.cpp's --split-mode, layer or row (default layer).")
    tensor_split: str = option("", "--gpus >= 2: llama.cpp's --tensor-split, one weight per GPU, e.g. 1,1 "
                               "(default: llama.cpp's split by free memory).")
    policy: pathlib.Path | None = option(
        None, "Admission policy JSON: its floors and ceilings for this lane bind the run (a run without one is "
        "not recordable).", path=True)


def option_fields() -> list[dataclasses.Field]:
    """Every option of a run: the run-wide ones, then each check's, in registry order; once each."""
    fields: list[dataclasses.Field] = list(dataclasses.fields(RunOptions))
    seen = {f.name: "the run" for f in fields}
    for check in checks.REGISTRY:
        for f in dataclasses.fields(check.options):
            if f.name in seen:
                raise ValueError(f"option {f.name!r} of check {check.name} is also an option of {seen[f.name]}")
            seen[f.name] = check.name
            fields.append(f)
    return fields


def _make_config_class() -> type:
    def field_spec(f: dataclasses.Field) -> tuple[str, object, dataclasses.Field]:
        kwargs = {"metadata": f.metadata}
        if f.default is not dataclasses.MISSING:
            kwargs["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            kwargs["default_factory"] = f.default_factory
        return f.name, f.type, dataclasses.field(**kwargs)

    specs = [field_spec(f) for f in option_fields()]
    # Fields without a default come first (the dataclass needs them so).
    def no_default(s):
        return s[2].default is dataclasses.MISSING and s[2].default_factory is dataclasses.MISSING
    ordered = [s for s in specs if no_default(s)] + [s for s in specs if not no_default(s)]
    return dataclasses.make_dataclass("RunnerConfig", ordered, namespace={
        "__module__": __name__,
        "__doc__": "One runner invocation: RunOptions plus every check's Options, flat.",
        "normalized": _normalized,
    })


def _normalized(self):
    """Paths made absolute (binaries run with other working directories)."""
    c = dataclasses.replace(self)
    for f in dataclasses.fields(c):
        value = getattr(c, f.name)
        if f.metadata.get("path") and value is not None:
            setattr(c, f.name, pathlib.Path(os.path.abspath(value)))
    return c


RunnerConfig = _make_config_class()
