"""The lane spec (//lanes:spec.json, generated from lanes/private/lanes.bzl): load it, resolve a lane.

spec.json carries its LaneSpec schema (`lane_schema`, written from lanes/private/spec_schema.bzl,
the one list of a lane's fields, which Starlark checks too): every lane is validated against it
before it is read.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib


class LaneSpecError(Exception):
    """The spec is unreadable, of an unknown schema, does not match its LaneSpec schema, or does not
    name the requested lane."""


# The schema's type names (spec_schema.bzl) as JSON values.
_SCHEMA_TYPES: dict[str, type] = {"string": str, "bool": bool, "list": list, "dict": dict}


def schema_problems(lanes: dict, schema: dict) -> list[str]:
    """What is wrong with the spec's lanes against its LaneSpec schema (empty when they match)."""
    problems = []
    for lane_id, lane in sorted(lanes.items()):
        if not isinstance(lane, dict):
            problems.append(f"{lane_id}: not an object")
            continue
        problems += [f"{lane_id}: field {name} is not in the LaneSpec schema" for name in sorted(set(lane) - set(schema))]
        for name, field in schema.items():
            if name not in lane:
                if field.get("required"):
                    problems.append(f"{lane_id}: required field {name} is missing")
                continue
            want = _SCHEMA_TYPES.get(field.get("type"))
            if want is None:
                problems.append(f"schema field {name} has an unknown type {field.get('type')!r}")
            elif not isinstance(lane[name], want):
                problems.append(f"{lane_id}: field {name} is a {type(lane[name]).__name__}, the schema says {field['type']}")
            elif want is list and not all(isinstance(v, str) for v in lane[name]):
                problems.append(f"{lane_id}: field {name} is a list of other than strings")
    return problems


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
    # Test fixtures written by hand carry no schema; every spec Bazel writes does.
    if "lane_schema" in spec:
        schema = spec["lane_schema"]
        problems = schema_problems(lanes, schema) if isinstance(schema, dict) else ["lane_schema is not an object"]
        if problems:
            raise LaneSpecError(f"{spec_path} does not match its LaneSpec schema: " + "; ".join(problems))
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
