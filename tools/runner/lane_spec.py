"""The lane spec (//lanes:spec.json, generated from lanes/lanes.bzl): load it, resolve a lane."""

from __future__ import annotations

import dataclasses
import json
import pathlib


class LaneSpecError(Exception):
    """The spec is unreadable, of an unknown schema, or does not name the requested lane."""


@dataclasses.dataclass(frozen=True)
class Lane:
    lane_id: str
    alias: str
    os: str
    arch: str
    backend: str
    sdk: str
    targets: tuple[str, ...]
    log_evidence: tuple[str, ...]
    ggml_libs: tuple[str, ...]
    # test-backend-ops -o filter from the spec: the ops this lane's graphs use (empty: all ops).
    fixture_ops: tuple[str, ...] = ()
    # Required op -> the check that covers it where fixture parity cannot evaluate it (e.g.
    # {"MUL_MAT": "op_oracle"} on the CPU lane, whose grad mode cannot run MUL_MAT).
    op_coverage: dict[str, str] = dataclasses.field(default_factory=dict, hash=False)
    # CPU lanes built with ggml's runtime-selected variants (GGML_BACKEND_DL): the variants the
    # lane ships; the one ggml loads on a host is that host's compute_capability.
    cpu_variants: tuple[str, ...] = ()
    # Whether the lane's certification runs llama.cpp's CTest suite (the runner's upstream_ctest
    # step); false where it gates in CI instead (the CPU lane).
    ctest_in_certification: bool = False
    # The spec's CTest exclusions (test -> reason): a bundle built with others is stale or foreign.
    ctest_excluded: dict[str, str] = dataclasses.field(default_factory=dict, hash=False)

    @property
    def is_accelerator(self) -> bool:
        return self.backend != "cpu"


def load_lane(spec_path: pathlib.Path, name: str) -> Lane:
    """The lane whose id or alias is `name`."""
    try:
        spec = json.loads(pathlib.Path(spec_path).read_text())
    except (OSError, ValueError) as err:
        raise LaneSpecError(f"{spec_path}: cannot read the lane spec ({err}); build //lanes:spec.json") from err
    if spec.get("schema_version") != 1 or not isinstance(spec.get("lanes"), dict):
        raise LaneSpecError(f"{spec_path}: not a schema_version 1 lane spec")
    lanes = spec["lanes"]
    lane_id = name if name in lanes else next((k for k, v in lanes.items() if name and v.get("alias") == name), None)
    if lane_id is None:
        known = ", ".join(sorted(lanes))
        raise LaneSpecError(f"lane {name!r} is neither a lane id nor an alias in {spec_path} (known: {known})")
    v = lanes[lane_id]
    return Lane(
        lane_id=lane_id,
        alias=v.get("alias", ""),
        os=v["os"],
        arch=v["arch"],
        backend=v["backend"],
        sdk=v.get("sdk", ""),
        targets=tuple(v.get("targets", ())),
        log_evidence=tuple(v.get("log_evidence", ())),
        ggml_libs=tuple(v.get("ggml_libs", ())),
        fixture_ops=tuple(v.get("fixture_ops", ())),
        op_coverage={str(k): str(c) for k, c in (v.get("op_coverage") or {}).items()},
        cpu_variants=tuple(v.get("cpu_variants", ())),
        ctest_in_certification=bool((v.get("ctest") or {}).get("in_certification", False)),
        ctest_excluded={str(k): str(r) for k, r in ((v.get("ctest") or {}).get("excluded") or {}).items()},
    )
