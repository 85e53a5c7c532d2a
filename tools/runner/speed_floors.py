"""Speed floors for a lane, read from an admission policy file (JSON).

Read with json alone, not the admission library, so the runner runs on GPU hosts that carry only
its own few packages.
"""

from __future__ import annotations

import json
import pathlib


class PolicyFloorsError(Exception):
    """The policy file cannot be read; the message names it."""


def floors_for_lane(policy_path: pathlib.Path, lane_id: str) -> tuple[float, float]:
    """(tg, pp) tokens/s floors: the highest floor that names this lane or '*'."""
    try:
        policy = json.loads(pathlib.Path(policy_path).read_text())
    except (OSError, ValueError) as err:
        raise PolicyFloorsError(f"{policy_path}: cannot read the policy for its speed floors ({err})") from err
    floors = {"tg": 0.0, "pp": 0.0}
    for floor in policy.get("speed_floors", []):
        if floor.get("lane_id") in (lane_id, "*"):
            for kind in floors:
                if floor.get("metric") == f"speed.{kind}_tokens_per_s":
                    floors[kind] = max(floors[kind], float(floor.get("min_value", 0.0)))
    return floors["tg"], floors["pp"]
