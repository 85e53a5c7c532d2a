"""What one runner invocation is asked to do (built from flags by runner.py, or directly by tests)."""

from __future__ import annotations

import dataclasses
import os
import pathlib

DEFAULT_KV_TYPES = ("f16", "q8_0", "q4_0")

# Check names, in the order they run. --skip takes these.
CHECKS = (
    "preflight",
    "artifact_integrity",
    "fixture_parity",
    "op_oracle",
    # Every CPU variant the host can run vs the x64 baseline, on the ops with variant kernels.
    "cpu_variants",
    # llama.cpp's own CTest suite over the lane's build (lanes whose spec asks for it).
    "upstream_ctest",
    "reference_parity",
    "graph_smoke",
    "concurrency",
    "cancellation",
    "speed",
    # Last: aggregates the per-step cleanup checks the runner makes after every step (speed included).
    "cleanup",
)


@dataclasses.dataclass
class RunnerConfig:
    lane: str
    lane_dir: pathlib.Path
    evidence: pathlib.Path | None
    spec: pathlib.Path
    model: pathlib.Path | None
    out_dir: pathlib.Path
    report: pathlib.Path
    cpu_lane_dir: pathlib.Path | None = None
    model_source: str = ""
    kv_types: tuple[str, ...] = DEFAULT_KV_TYPES
    threads: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    skip: tuple[str, ...] = ()
    allow_software_icd: bool = False
    fixture_ops: str = ""  # bring-up -o filter for test-backend-ops; non-recordable
    # test-backend-ops -j (its own worker threads, each with its own backend instance; test mode
    # only). 0 = half the host's cores, at most 8: Vulkan's per-shape pipeline creation made the
    # serial run longer than one step timeout on the H200.
    fixture_jobs: int = 0
    speed_floor_tg: float = 0.0
    speed_floor_pp: float = 0.0
    timeout_s: float = 600.0
    # Model-level parity tolerances (defaults measured on the tiny F32 model, see README.md).
    parity_max_abs_delta: float = 0.05
    parity_max_mean_kl: float = 1e-4
    parity_min_top1: float = 1.0  # on positions whose reference top-1 margin is decisive
    # A comparison where few positions have a clear top-1 (margin > 0.1 nats) proves little.
    parity_min_decisive_fraction: float = 0.5
    # CPU lane vs the float64 NumPy reference, flash attention off (measured 1.2e-5 / 9e-13 on F32).
    reference_max_abs_delta: float = 1e-3
    reference_max_mean_kl: float = 1e-8
    parity_prompt: str = "The quick brown fox jumps over the lazy dog. Once upon a time"
    n_predict: int = 16
    seed: int = 42
    # llama-bench sizes; 0 = per-backend default (CPU: -p 64 -n 32 -r 2; accelerators: -p 512 -n 128 -r 3).
    bench_pp: int = 0
    bench_tg: int = 0
    bench_reps: int = 0
    # A model large enough to be memory-bandwidth bound: tg on it vs the measured bandwidth.
    roofline_model: pathlib.Path | None = None
    hbm_bandwidth_gbs: float = 0.0  # bring-up override of the measured bandwidth (non-recordable)
    # Accelerator lanes vs the CPU lane on the same host in the same run (why these values: speed.py).
    min_speedup_roofline_pp: float = 2.0
    min_speedup_roofline_tg: float = 4.0
    memory_tolerance_mib: float = 64.0
    sigint_exit_bound_s: float = 10.0
    # cancellation: a dropped stream's slot must be released (server log) within this bound, and
    # the next request served within it; written into cancellation.log as `# lanes-config`.
    cancel_bound_s: float = 5.0
    build_provenance: str = "bazel"
    gpu_index: int = 0
    # Another accelerator lane on this host (e.g. CUDA beside Vulkan): benched in the same speed
    # step for a side-by-side figure. Informational: no floor is applied to the ratio.
    peer_lane_dir: pathlib.Path | None = None
    peer_backend: str = ""
    # An upstream-default build of the same tree on this host (//lanes:<alias>_upstream): benched in
    # the speed step for the lane/upstream ratio, which a policy speed floor may bound
    # (speed.upstream_ratio_pp / speed.upstream_ratio_tg).
    upstream_dir: pathlib.Path | None = None
    # upstream_ctest: the lane's CTest bundle (//lanes:<alias>_ctest), the ctest executable, its -j
    # (0: half the host's cores, at most 8) and a bound on the whole suite, seconds.
    ctest_bundle: pathlib.Path | None = None
    ctest: str = "ctest"
    ctest_jobs: int = 0
    ctest_timeout_s: float = 1800.0

    def resolved_ctest_jobs(self) -> int:
        return self.ctest_jobs if self.ctest_jobs > 0 else max(1, min(8, (os.cpu_count() or 2) // 2))

    def normalized(self) -> "RunnerConfig":
        """Paths made absolute (binaries run with other working directories)."""
        c = dataclasses.replace(self)
        for name in ("lane_dir", "evidence", "spec", "model", "out_dir", "report", "cpu_lane_dir", "roofline_model", "peer_lane_dir", "upstream_dir", "ctest_bundle"):
            value = getattr(c, name)
            if value is not None:
                setattr(c, name, pathlib.Path(os.path.abspath(value)))
        return c
