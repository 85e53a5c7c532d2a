"""Admission over files: nodes, routes, the policy and a records directory read from disk (strictly,
through tools/policy/safe_io), decided by admission.decide, and summarised for people.

`admission_cli.py` is the command line over these functions (flags, --out, exit status).
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

from google.protobuf import json_format

from proto import admission_pb2, runner_report_pb2
from tools.admission import admission, tracker_admission
from tools.policy import policy as policy_lib
from tools.policy import safe_io
from tools.policy.errors import MalformedInputError, TrustError
from tools.publish import tracker as tracker_lib

AUTHORITY_NOTE = "(summary for people; the decision JSON written with --out is the authority)"


def _parse_into(obj: dict, msg, what: str, path) -> None:
    try:
        json_format.ParseDict(obj, msg)
    except (json_format.ParseError, ValueError, TypeError) as err:
        raise MalformedInputError(f"{path}: not a {what} JSON ({err})") from err


def _load_json(path: pathlib.Path | str, what: str) -> dict:
    try:
        return safe_io.load_json_object(path, what)
    except TrustError as err:
        raise type(err)(f"{path}: {what}: {err}") from err


def load_node(path: pathlib.Path | str) -> admission_pb2.NodeDescription:
    """A NodeDescription from strict JSON (no duplicate keys, UTF-8, bounded size and depth)."""
    node = admission_pb2.NodeDescription()
    _parse_into(_load_json(path, "NodeDescription"), node, "NodeDescription", path)
    if not node.node_id:
        node.node_id = pathlib.Path(path).stem
    return node


def load_route(path: pathlib.Path | str) -> admission_pb2.RouteRequest:
    """A RouteRequest from strict JSON; its recipe (or its lack of one) is decided by admission."""
    route = admission_pb2.RouteRequest()
    _parse_into(_load_json(path, "RouteRequest"), route, "RouteRequest", path)
    return route


def recipe_from_flags(kv_cache_types: Sequence[str], flash_attention: str, n_gpu_layers: int, context_size: int,
                      batch_size: int, ubatch_size: int, parallel: int,
                      context_per_sequence: int = 0, gpus: int = 1, split_mode: str = "",
                      tensor_split: str = "") -> runner_report_pb2.Recipe:
    return runner_report_pb2.Recipe(
        kv_cache_types=sorted(set(kv_cache_types)),
        flash_attention=["off", "on"] if flash_attention == "auto" else [flash_attention],
        n_gpu_layers=n_gpu_layers, context_size=context_size, batch_size=batch_size,
        ubatch_size=ubatch_size, parallel_sequences=parallel, context_per_sequence=context_per_sequence,
        gpu_count=gpus if gpus >= 2 else 0, split_mode=(split_mode or "layer") if gpus >= 2 else split_mode,
        tensor_split=tensor_split,
    )


def _route(route_path, route_id: str, node_paths: Sequence[str], model_sha256: str,
           recipe: runner_report_pb2.Recipe | None, model_shard_sha256: Sequence[str]) -> admission_pb2.RouteRequest:
    """The route to decide: a RouteRequest file (its id overridden when one is given), else the nodes."""
    if route_path:
        route = load_route(route_path)
        if route_id:
            route.route_id = route_id
        return route
    return admission.route_from_nodes([load_node(p) for p in node_paths], model_sha256, route_id,
                                      recipe, model_shard_sha256)


def decide_from_files(
    policy_path: pathlib.Path | str,
    records_dir: pathlib.Path | str,
    node_paths: Sequence[str],
    model_sha256: str,
    route_id: str = "",
    recipe: runner_report_pb2.Recipe | None = None,
    model_shard_sha256: Sequence[str] = (),
    route_path: pathlib.Path | str | None = None,
) -> tuple[admission_pb2.AdmissionDecision, list[admission_pb2.InputProblem]]:
    """(decision, record files that could not be used; also listed in decision.unusable_inputs).

    Raises a TrustError for unusable input (policy, nodes, route, the records directory itself).
    """
    policy = policy_lib.load_policy(policy_path)
    route = _route(route_path, route_id, node_paths, model_sha256, recipe, model_shard_sha256)
    certs, compats, problems = admission.load_records_dir(records_dir)
    decision = admission.decide(policy, certs, compats, route)
    decision.unusable_inputs.extend(problems)
    return decision, problems


def decide_from_repository(
    policy_path: pathlib.Path | str,
    repository_url: str,
    tracker_state_dir: pathlib.Path | str,
    bootstrap_root: pathlib.Path | str | None,
    node_paths: Sequence[str],
    model_sha256: str,
    route_id: str = "",
    recipe: runner_report_pb2.Recipe | None = None,
    model_shard_sha256: Sequence[str] = (),
    route_path: pathlib.Path | str | None = None,
    records_dir: pathlib.Path | str | None = None,
):
    """(decision, route, view or None) from a record repository through a Tracker refresh; records
    in records_dir (a cache or copy) are screened like served ones (log, retired key, revocations)."""
    policy = policy_lib.load_policy(policy_path)
    route = _route(route_path, route_id, node_paths, model_sha256, recipe, model_shard_sha256)
    root = safe_io.read_regular_file(bootstrap_root) if bootstrap_root else None
    tracker = tracker_lib.Tracker(tracker_state_dir, repository_url, bootstrap_root=root)
    extra, problems = [], []
    if records_dir:
        certs, compats, problems = admission.load_records_dir(records_dir)
        extra = certs  # compatibility copies come with the repository's own
    decision, view = tracker_admission.refresh_and_decide(tracker, policy, route, extra_records=extra)
    decision.unusable_inputs.extend(problems)
    return decision, route, view


def render(decision: admission_pb2.AdmissionDecision) -> str:
    """The human summary: one line per fact, every file-derived text escaped."""
    e = safe_io.escape
    lines = [f"admission {AUTHORITY_NOTE}"]
    for p in decision.unusable_inputs:
        lines.append(f"unusable record file {e(p.file)!s}: {e(p.code)}: {e(p.reason)}")
    for lane in decision.lanes:
        state = "routable, record " + e(lane.record_id[:16]) if lane.routable else "refused"
        lines.append(f"{e(lane.node_id)} ({e(lane.lane_id)}): {state}")
    for reason in decision.reasons:
        lines.append(f"  {e(reason)}")
    lines.append(f"route {e(decision.route_id) or '(unnamed)'}: {'ROUTABLE' if decision.routable else 'REFUSED'} "
                 f"(policy {e(decision.policy_id)} {e(decision.policy_digest[:19])})")
    return "\n".join(lines) + "\n"
