"""A recordable run is held to the defaults or stricter, and to its policy.

Every bound a flag can move is named here once, with the direction that loosens it. A flag looser
than its default (or than the policy, where the policy names that bound) leaves the run
non-recordable with the reason: the flags of a hurried operator are untrusted input too. The
policy's floors and ceilings are applied on top (the stricter of the flag and the policy wins), and
a run without a policy is never recordable: its speed floors would be 0.
"""

from __future__ import annotations

import dataclasses
import pathlib

from tools.core.digest import sha256_file
from tools.runner import speed_floors

# option -> "max" (a ceiling: a larger value is looser) or "min" (a floor: a smaller one is looser).
BOUNDS: dict[str, str] = {
    "parity_max_abs_delta": "max",
    "parity_max_mean_kl": "max",
    "parity_min_top1": "min",
    "parity_min_decisive_fraction": "min",
    "reference_max_abs_delta": "max",
    "reference_max_mean_kl": "max",
    "cancel_bound_s": "max",
    "sigint_exit_bound_s": "max",
    "cancel_recovery_factor": "max",
    "cancel_recovery_floor_s": "max",
    "memory_tolerance_mib": "max",
    "speed_floor_tg": "min",
    "speed_floor_pp": "min",
    "min_speedup_roofline_pp": "min",
    "min_speedup_roofline_tg": "min",
    "min_tg_model_roofline_fraction": "min",
    "n_predict": "min",
    "host_max_runnable_per_cpu": "max",
}

# Words that mark an option as a bound; tests/strictness_test checks each such option is in BOUNDS.
BOUND_WORDS = ("max", "min", "floor", "bound", "tolerance")


def _looser(value: float, reference: float, direction: str) -> bool:
    return value > reference if direction == "max" else value < reference


def _stricter(a: float, b: float, direction: str) -> float:
    return min(a, b) if direction == "max" else max(a, b)


def policy_bounds(policy_path: pathlib.Path, lane_id: str, model_sha256: str = "") -> dict[str, float]:
    """The bounds the policy sets for this lane and model (only those it names)."""
    bounds: dict[str, float] = {}
    tg, pp = speed_floors.floors_for_lane(policy_path, lane_id, model_sha256)
    rel_pp, rel_tg = speed_floors.relative_floors_for_lane(policy_path, lane_id)
    for name, value in (("speed_floor_tg", tg), ("speed_floor_pp", pp),
                        ("min_speedup_roofline_pp", rel_pp), ("min_speedup_roofline_tg", rel_tg)):
        if value > 0:
            bounds[name] = value
    cancel = speed_floors.ceiling_for_lane(policy_path, lane_id, speed_floors.CANCEL_CEILING)
    if cancel is not None:
        bounds["cancel_bound_s"] = cancel
    return bounds


def defaults(config) -> dict[str, object]:
    """Each option's default, from the config's own fields."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(config):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def apply(config, lane_id: str, default_kv_types: tuple[str, ...]) -> list[str]:
    """Checks the run's bounds and applies the policy's (config is changed in place).

    Returns why the run is not recordable (empty: held to the defaults and the policy or stricter).
    """
    reasons: list[str] = []
    base = defaults(config)
    for name, direction in BOUNDS.items():
        if not hasattr(config, name):
            continue
        value, default = float(getattr(config, name)), float(base[name])
        if _looser(value, default, direction):
            reasons.append(f"--{name}={value:g} is looser than the default {default:g} (bring-up only)")
    missing_kv = [t for t in default_kv_types if t not in config.kv_types]
    if missing_kv:
        reasons.append(f"--kv_types={','.join(config.kv_types)} leaves out {','.join(missing_kv)} "
                       "(a recordable run exercises every KV cache type of the spec)")
    if config.policy is None:
        reasons.append("no --policy: a recordable run is held to the admission policy's floors and ceilings")
        return reasons
    model_sha256 = sha256_file(config.model) if config.model is not None and pathlib.Path(config.model).is_file() else ""
    for name, bound in policy_bounds(config.policy, lane_id, model_sha256).items():
        direction = BOUNDS[name]
        setattr(config, name, _stricter(float(getattr(config, name)), bound, direction))
    return reasons
