"""Speed floors for a lane, read from an admission policy file (JSON).

Read with json alone, not the admission library, so the runner runs on GPU hosts that carry only
its own few packages.
"""

from __future__ import annotations

import json
import pathlib

from tools.core import errors


class PolicyFloorsError(errors.UsageError):
    """The policy file cannot be read; the message names it."""


def _model_applies(floor: dict, model_sha256: str) -> bool:
    """A floor scoped to a model (model_sha256) binds only that model's runs and records."""
    scoped = str(floor.get("model_sha256", "")).lower().removeprefix("sha256:")
    return not scoped or scoped == model_sha256.lower().removeprefix("sha256:")


def floors_for_lane(policy_path: pathlib.Path, lane_id: str, model_sha256: str = "") -> tuple[float, float]:
    """(tg, pp) tokens/s floors: the highest floor that names this lane or '*' (and this model, for a
    floor scoped to one)."""
    try:
        policy = json.loads(pathlib.Path(policy_path).read_text())
    except (OSError, ValueError) as err:
        raise PolicyFloorsError(f"{policy_path}: cannot read the policy for its speed floors ({err})") from err
    floors = {"tg": 0.0, "pp": 0.0}
    for floor in policy.get("speed_floors", []):
        if floor.get("lane_id") in (lane_id, "*") and _model_applies(floor, model_sha256):
            for kind in floors:
                if floor.get("metric") == f"speed.{kind}_tokens_per_s":
                    floors[kind] = max(floors[kind], float(floor.get("min_value", 0.0)))
    return floors["tg"], floors["pp"]


def ceiling_for_lane(policy_path: pathlib.Path, lane_id: str, metric: str) -> float | None:
    """The policy's metric ceiling for this lane (the lowest naming this lane or '*'); None if none."""
    try:
        policy = json.loads(pathlib.Path(policy_path).read_text())
    except (OSError, ValueError) as err:
        raise PolicyFloorsError(f"{policy_path}: cannot read the policy for its metric ceilings ({err})") from err
    values = [float(c.get("max_value", 0.0)) for c in policy.get("metric_ceilings", [])
              if c.get("lane_id") in (lane_id, "*") and c.get("metric") == metric]
    return min(values) if values else None


# The cancellation bound: how long a dropped stream may hold its slot (server clock).
CANCEL_CEILING = "cancellation.stream_task_seconds"


# Accelerator lanes are held to ratios over the CPU lane measured on the same host in the same run
# (absolute tokens/s floors cannot tell an accelerator from a CPU fallback); the record carries the
# same metrics, so admission re-checks these floors too.
ROOFLINE_SPEEDUP_PP = "speed.roofline_speedup_pp"
ROOFLINE_SPEEDUP_TG = "speed.roofline_speedup_tg"


def relative_floors_for_lane(policy_path: pathlib.Path, lane_id: str) -> tuple[float, float]:
    """(min speed-up on pp, on tg) over the CPU lane, both on the roofline model; 0.0 = none."""
    try:
        policy = json.loads(pathlib.Path(policy_path).read_text())
    except (OSError, ValueError) as err:
        raise PolicyFloorsError(f"{policy_path}: cannot read the policy for its speed floors ({err})") from err
    floors = {ROOFLINE_SPEEDUP_PP: 0.0, ROOFLINE_SPEEDUP_TG: 0.0}
    for floor in policy.get("speed_floors", []):
        if floor.get("lane_id") in (lane_id, "*") and floor.get("metric") in floors and not floor.get("model_sha256"):
            floors[floor["metric"]] = max(floors[floor["metric"]], float(floor.get("min_value", 0.0)))
    return floors[ROOFLINE_SPEEDUP_PP], floors[ROOFLINE_SPEEDUP_TG]
