"""Creating and updating AdmissionPolicy files: trusted keys with validity windows, required checks,
speed floors, metric ceilings, maximum record age, accepted record schema versions.

Reading and validating a policy is tools/policy/policy.py (signing and admission both need it);
writing one lives here, above tools/certify, because a new policy accepts the record schema version
that tools/certify signs. `policy_tool.py` is the command line over these functions.
"""

from __future__ import annotations

import datetime as dt
import pathlib
from collections.abc import Collection, Iterable

from proto import admission_pb2
from tools.certify import records
from tools.policy import dsse, keys, timestamps
from tools.policy import policy as policy_lib
from tools.policy.errors import PolicyError


def new_policy(policy_id: str) -> admission_pb2.AdmissionPolicy:
    if not policy_id:
        raise PolicyError("a new policy needs --policy_id")
    return admission_pb2.AdmissionPolicy(
        schema_version=policy_lib.POLICY_SCHEMA_VERSION,
        policy_id=policy_id,
        max_record_age_days=90,
        # What tools/certify signs, of both record kinds (one list covers both).
        supported_record_schema_versions=sorted({records.CERTIFICATION_SCHEMA_VERSION,
                                                 records.COMPATIBILITY_SCHEMA_VERSION}),
    )


def add_trusted_key(
    policy: admission_pb2.AdmissionPolicy,
    public_key: bytes,
    not_before: dt.datetime,
    not_after: dt.datetime,
    owner: str = "",
) -> str:
    """Trusts `public_key` (raw or PEM) for [not_before, not_after]; replaces an entry with the same keyid."""
    if not_after <= not_before:
        raise PolicyError(f"not_after {not_after} must be later than not_before {not_before}")
    raw = dsse.raw_public_key(keys.public_key_from_bytes(public_key))
    keyid = dsse.keyid_for(raw)
    kept = [k for k in policy.trusted_keys if k.keyid != keyid]
    del policy.trusted_keys[:]
    policy.trusted_keys.extend(kept)
    policy.trusted_keys.add(
        keyid=keyid,
        public_key=raw,
        not_before=timestamps.format_utc(not_before),
        not_after=timestamps.format_utc(not_after),
        owner=owner,
    )
    return keyid


def set_required_checks(policy: admission_pb2.AdmissionPolicy, names: Iterable[str]) -> None:
    del policy.required_checks[:]
    policy.required_checks.extend(dict.fromkeys(names))


def add_lane_required_check(policy: admission_pb2.AdmissionPolicy, lane_id: str, check: str) -> None:
    if not any((r.lane_id, r.check) == (lane_id, check) for r in policy.lane_required_checks):
        policy.lane_required_checks.add(lane_id=lane_id, check=check)


def parse_lane_pair(text: str, flag: str, example: str) -> tuple[str, str]:
    """LANE:NAME (a check or a metric) from a flag value."""
    lane, sep, name = text.rpartition(":")
    if not (sep and lane and name):
        raise PolicyError(f"--{flag} {text!r}: write LANE:NAME, e.g. {example!r}")
    return lane, name


def set_speed_floor(policy: admission_pb2.AdmissionPolicy, lane_id: str, metric: str, min_value: float) -> None:
    kept = [f for f in policy.speed_floors if (f.lane_id, f.metric) != (lane_id, metric)]
    del policy.speed_floors[:]
    policy.speed_floors.extend(kept)
    policy.speed_floors.add(lane_id=lane_id, metric=metric, min_value=min_value)


def set_metric_ceiling(policy: admission_pb2.AdmissionPolicy, lane_id: str, metric: str, max_value: float) -> None:
    kept = [c for c in policy.metric_ceilings if (c.lane_id, c.metric) != (lane_id, metric)]
    del policy.metric_ceilings[:]
    policy.metric_ceilings.extend(kept)
    policy.metric_ceilings.add(lane_id=lane_id, metric=metric, max_value=max_value)


def parse_speed_floor(text: str) -> tuple[str, str, float]:
    lane, sep, rest = text.partition(":")
    metric, sep2, value = rest.rpartition(":")
    if not (sep and sep2 and lane and metric):
        raise PolicyError(f"--speed_floor {text!r}: write LANE:METRIC:MIN, e.g. '*:speed.tg_tokens_per_s:5'")
    try:
        return lane, metric, float(value)
    except ValueError as err:
        raise PolicyError(f"--speed_floor {text!r}: MIN {value!r} is not a number") from err


def update_policy_file(
    path: pathlib.Path | str,
    *,
    policy_id: str = "",
    public_key: bytes | None = None,
    owner: str = "",
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
    valid_days: int = 365,
    required_checks: Iterable[str] | None = None,
    speed_floors: Iterable[tuple[str, str, float]] = (),
    metric_ceilings: Iterable[tuple[str, str, float]] = (),
    max_record_age_days: int | None = None,
    supported_record_schema_versions: Iterable[int] | None = None,
    remove_keyids: Iterable[str] = (),
    compatibility_bounds: tuple[float, float, float, float] | None = None,
    quantized_compatibility_bounds: tuple[float, float, float, float] | None = None,
    lane_required_checks: Iterable[tuple[str, str]] = (),
    remove_speed_floors: Iterable[tuple[str, str]] = (),
    known_lanes: Collection[str] | None = None,
) -> admission_pb2.AdmissionPolicy:
    """Loads `path` (or starts a new policy), applies the changes, validates and writes it back.
    With known_lanes, a lane-scoped entry must name one of them or '*': a mistyped lane id would
    otherwise apply to no lane, silently."""
    path = pathlib.Path(path)
    lane_required_checks, speed_floors, metric_ceilings = list(lane_required_checks), list(speed_floors), list(metric_ceilings)
    if known_lanes is not None:
        unknown = sorted({e[0] for e in [*lane_required_checks, *speed_floors, *metric_ceilings]}
                         - set(known_lanes) - {"*"})
        if unknown:
            raise PolicyError(f"{path}: lane(s) {unknown} are not in the lane spec (known: {sorted(known_lanes)}); "
                              "use a lane id from it, or '*' for every lane")
    policy = policy_lib.load_policy(path) if path.exists() else new_policy(policy_id)
    if policy_id:
        policy.policy_id = policy_id
    for keyid in remove_keyids:
        kept = [k for k in policy.trusted_keys if k.keyid != keyid]
        if len(kept) == len(policy.trusted_keys):
            raise PolicyError(f"{path}: no trusted key {keyid!r} to remove")
        del policy.trusted_keys[:]
        policy.trusted_keys.extend(kept)
    if public_key is not None:
        start = not_before or timestamps.now()
        add_trusted_key(policy, public_key, start, not_after or start + dt.timedelta(days=valid_days), owner)
    if required_checks is not None:
        set_required_checks(policy, required_checks)
    for lane, metric in remove_speed_floors:
        kept = [f for f in policy.speed_floors if (f.lane_id, f.metric) != (lane, metric)]
        if len(kept) == len(policy.speed_floors):
            raise PolicyError(f"{path}: no speed floor {lane}:{metric} to remove")
        del policy.speed_floors[:]
        policy.speed_floors.extend(kept)
    for lane, check in lane_required_checks:
        add_lane_required_check(policy, lane, check)
    for lane, metric, value in speed_floors:
        set_speed_floor(policy, lane, metric, value)
    for lane, metric, value in metric_ceilings:
        set_metric_ceiling(policy, lane, metric, value)
    if max_record_age_days is not None:
        policy.max_record_age_days = max_record_age_days
    if supported_record_schema_versions is not None:
        del policy.supported_record_schema_versions[:]
        policy.supported_record_schema_versions.extend(supported_record_schema_versions)
    # max mean KL, min top-1 agreement, max |delta logit|, min greedy agreement.
    for bounds, c in ((compatibility_bounds, policy.compatibility),
                      (quantized_compatibility_bounds, policy.quantized_compatibility)):
        if bounds is not None:
            c.max_mean_kl, c.min_top1_agreement, c.max_abs_delta_logit, c.min_greedy_agreement = bounds
    policy_lib.validate(policy, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(policy_lib.policy_to_json(policy))
    return policy
