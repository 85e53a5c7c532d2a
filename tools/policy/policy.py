"""AdmissionPolicy files: JSON (json_format) on disk, validated on load, identified by a digest.

The digest is sha256 over canonical JSON (proto field names, sorted keys, no whitespace), so anyone
can recompute it from the policy file with any JSON tool, independent of protobuf's wire encoding.

A policy is parsed strictly: a duplicate JSON key, a keyid listed twice, deep nesting, unknown
fields or non-UTF-8 bytes are a PolicyError (order in the file never decides trust).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from collections.abc import Collection

from google.protobuf import json_format

from proto import admission_pb2
from tools.policy import dsse, safe_io, trust
from tools.policy.errors import PolicyError, TrustError

POLICY_SCHEMA_VERSION = 1


def policy_from_json(text: str | bytes, source: str = "policy") -> admission_pb2.AdmissionPolicy:
    policy = admission_pb2.AdmissionPolicy()
    try:
        obj = dsse.loads_strict(text)  # duplicate keys / depth / UTF-8 first: json_format keeps the last duplicate
        json_format.ParseDict(obj, policy)
    except (TrustError, json_format.ParseError) as err:
        raise PolicyError(f"{source}: not an AdmissionPolicy in JSON ({err}); see tools/admission/policy_tool.py") from err
    validate(policy, source)
    return policy


def load_policy(path: pathlib.Path | str) -> admission_pb2.AdmissionPolicy:
    path = pathlib.Path(path)
    try:
        data = safe_io.read_regular_file(path)
    except TrustError as err:
        raise PolicyError(f"{path}: cannot read policy ({err}); create one with policy_tool.py") from err
    return policy_from_json(data, str(path))


def validate(policy: admission_pb2.AdmissionPolicy, source: str = "policy") -> trust.TrustStore:
    """Raises PolicyError on anything a verifier could misread; returns the policy's trust store."""
    if policy.schema_version != POLICY_SCHEMA_VERSION:
        raise PolicyError(
            f"{source}: policy schema_version {policy.schema_version}, this tool reads {POLICY_SCHEMA_VERSION}"
        )
    if not policy.policy_id:
        raise PolicyError(f"{source}: policy_id is empty; decisions must name the policy they applied")
    for f in policy.speed_floors:
        if not f.lane_id or not f.metric:
            raise PolicyError(f"{source}: speed floor {f} needs lane_id ('*' for all) and metric")
        scoped = f.model_sha256.lower().removeprefix("sha256:")
        if f.model_sha256 and (len(scoped) != 64 or any(c not in "0123456789abcdef" for c in scoped)):
            raise PolicyError(f"{source}: speed floor {f.lane_id} {f.metric}: model_sha256 {f.model_sha256!r} is not a "
                              "sha256 (64 hex digits)")
    seen: set[tuple[str, str]] = set()
    for c in policy.metric_ceilings:
        if not c.lane_id or not c.metric:
            raise PolicyError(f"{source}: metric ceiling {c} needs lane_id ('*' for all) and metric")
        if (c.lane_id, c.metric) in seen:
            raise PolicyError(f"{source}: metric ceiling for lane {c.lane_id!r} metric {c.metric!r} listed twice; "
                              "keep one (order must not decide)")
        seen.add((c.lane_id, c.metric))
    pairs: set[tuple[str, str]] = set()
    for r in policy.lane_required_checks:
        if not r.lane_id or not r.check:
            raise PolicyError(f"{source}: lane required check {r} needs lane_id ('*' for all) and check")
        if (r.lane_id, r.check) in pairs:
            raise PolicyError(f"{source}: lane required check {r.check!r} for lane {r.lane_id!r} listed twice; keep one")
        pairs.add((r.lane_id, r.check))
    try:
        store = trust.TrustStore.from_trusted_keys(policy.trusted_keys)
    except PolicyError as err:
        raise PolicyError(f"{source}: {err}") from err
    probes = policy.probes
    if probes.min_passing_probes:
        if not probes.max_age_s:
            raise PolicyError(f"{source}: probes.max_age_s is 0: say how old a probe may be (seconds)")
        unknown = [k for k in probes.tracker_keyids if k not in store.public_keys]
        if not probes.tracker_keyids or unknown:
            raise PolicyError(f"{source}: probes.tracker_keyids must name trusted keys (the Trackers' whose probe "
                              f"records count); not trusted: {[k[:16] for k in unknown] or '(none named)'}")
    return store


def required_checks_for(policy: admission_pb2.AdmissionPolicy, lane_id: str) -> list[str]:
    """Every check a record of lane_id must have PASS: the policy's own list, then the lane's."""
    extra = [r.check for r in policy.lane_required_checks if r.lane_id in ("*", lane_id)]
    return list(dict.fromkeys([*policy.required_checks, *extra]))


def canonical_json(policy: admission_pb2.AdmissionPolicy) -> str:
    obj = json_format.MessageToDict(policy, preserving_proto_field_name=True)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def policy_to_json(policy: admission_pb2.AdmissionPolicy) -> str:
    obj = json_format.MessageToDict(policy, preserving_proto_field_name=True)
    return json.dumps(obj, sort_keys=True, indent=2) + "\n"


def policy_digest(policy: admission_pb2.AdmissionPolicy) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(policy).encode("utf-8")).hexdigest()


def accepted_record_schema_versions(supported: Collection[int] | None, known: Collection[int]) -> frozenset[int]:
    """The record schema versions a verifier accepts: those of `known` that the policy's
    supported_record_schema_versions names, or every known one where the policy names none."""
    return frozenset(known) & frozenset(supported) if supported else frozenset(known)
