"""State shared by the checks of one run."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import TYPE_CHECKING

from proto import build_evidence_pb2 as epb
from proto import runner_report_pb2 as rpb
from tools.runner import backends
from tools.runner.challenge import Challenge
from tools.runner.lane_spec import Lane
from tools.runner.steps import ProcessTracker

if TYPE_CHECKING:  # the config is built from the checks, which use this module
    from tools.runner.config import RunnerConfig


@dataclasses.dataclass
class RunContext:
    config: RunnerConfig
    lane: Lane
    logs_dir: pathlib.Path
    scratch_dir: pathlib.Path  # the runner's temp files; cleanup removes it and checks it is gone
    tracker: ProcessTracker = dataclasses.field(default_factory=ProcessTracker)
    evidence: epb.BuildEvidence | None = None
    device: rpb.DeviceClass = dataclasses.field(default_factory=rpb.DeviceClass)
    model_bytes: int = 0  # weight bytes (llama-bench model_size), for the roofline
    model_info: object | None = None  # model_file.ModelInfo, set by preflight
    non_recordable: list[str] = dataclasses.field(default_factory=list)
    # Accelerator runs: the reference CPU lane's evidence and its digest (preflight verifies them).
    reference_evidence: epb.BuildEvidence | None = None
    reference_evidence_digest: str = ""
    challenge: Challenge | None = None  # this run's prompts and seed (runner.run draws them)

    def bin(self, name: str, lane_dir: pathlib.Path | None = None) -> pathlib.Path:
        return (lane_dir or self.config.lane_dir) / "bin" / name

    @property
    def ngl(self) -> list[str]:
        """Full offload on accelerator lanes (split over --gpus devices: split_args); nothing to
        offload on the CPU lane."""
        return ["-ngl", "99", *self.split_args()] if self.lane.is_accelerator else []

    def split_args(self, bench: bool = False) -> list[str]:
        """A multi-GPU run's llama.cpp flags: its devices (-dev CUDA<i>,...), --split-mode and
        --tensor-split; llama-bench (bench=True) separates one test's values with "/". Empty for one GPU."""
        return split_args(self.config, self.lane.backend, bench)

    @property
    def backend0(self) -> str:
        """ggml's name for the first device of the lane's backend (test-backend-ops -b)."""
        return backends.get(self.lane.backend).ggml_device


def split_args(config, backend: str, bench: bool = False) -> list[str]:
    gpus = getattr(config, "gpus", 1)
    if gpus < 2:
        return []
    sep = "/" if bench else ","
    prefix = backends.get(backend).ggml_device.rstrip("0123456789")
    first = config.gpu_index
    argv = ["-dev", sep.join(f"{prefix}{first + i}" for i in range(gpus)), "-sm", config.split_mode or "layer"]
    if config.tensor_split:
        argv += ["-ts", config.tensor_split.replace(",", sep)]
    return argv
