"""Decides whether a route over the given nodes is admissible, writes the decision, exits 0 if routable.

  admission_cli --policy=policy.json --records_dir=records --node=node-a.json --node=node-b.json \\
                --model_sha256=<hex> [--model_shard_sha256=<hex> ...] \\
                [--kv_cache_type=f16] [--flash_attention=auto] [--n_gpu_layers=-1] \\
                [--context_size=4096] [--batch_size=2048] [--ubatch_size=512] [--parallel=1] \\
                --out=decision.json
  admission_cli --policy=policy.json --records_dir=records --route=route.json --out=decision.json

The decision JSON (--out) is the authority; the lines printed are a summary for people, with every
name and value from input files escaped (no control characters reach the terminal).

Without --route, the route's recipe is built from the recipe flags, whose defaults are llama.cpp's
(KV cache f16, flash attention auto, all layers offloaded, context 4096, batch 2048, ubatch 512,
one sequence); "auto" flash attention needs both modes proven, since llama.cpp picks either. A
--route file states its own recipe; one without a recipe is refused (scope-recipe-mismatch).

Exit status: 0 routable, 1 refused (reasons in the decision), 2 unusable input (bad flags; policy,
node, route or records directory missing, unreadable, not UTF-8, malformed), 3 internal error.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Sequence

from absl import flags
from google.protobuf import json_format

from proto import admission_pb2, runner_report_pb2
from tools.admission import admission, safe_io
from tools.admission import policy as policy_lib
from tools.certify.errors import CertifyError, MalformedInputError

EXIT_ROUTABLE, EXIT_REFUSED, EXIT_UNUSABLE_INPUT, EXIT_INTERNAL = 0, 1, 2, 3

AUTHORITY_NOTE = "(summary for people; the decision JSON written with --out is the authority)"


def define_flags(fv: flags.FlagValues | None = None) -> flags.FlagValues:
    """Defines the flags on `fv` (a fresh FlagValues by default): importing this module (the main job
    does) must not collide with the importer's own flags."""
    fv = fv if fv is not None else flags.FlagValues()
    flags.DEFINE_string("policy", None, "AdmissionPolicy JSON.", flag_values=fv)
    flags.DEFINE_string("records_dir", None, "Directory of *.dsse.json certification and compatibility records.", flag_values=fv)
    flags.DEFINE_multi_string("node", [], "NodeDescription JSON, one per node of the route.", flag_values=fv)
    flags.DEFINE_string("route", "", "RouteRequest JSON (nodes, model, recipe); instead of --node and the model/recipe flags.", flag_values=fv)
    flags.DEFINE_string("model_sha256", "", "sha256 of the model the route serves (of the first split for GGUF splits).", flag_values=fv)
    flags.DEFINE_multi_string("model_shard_sha256", [], "For GGUF splits: every split's sha256, in order.", flag_values=fv)
    flags.DEFINE_string("route_id", "", "Route id recorded in the decision.", flag_values=fv)
    flags.DEFINE_string("out", "", "Where to write the AdmissionDecision JSON: the authoritative result.", flag_values=fv)
    flags.DEFINE_multi_string("kv_cache_type", ["f16"], "KV cache type(s) the route uses (llama.cpp -ctk/-ctv).", flag_values=fv)
    flags.DEFINE_enum("flash_attention", "auto", ["on", "off", "auto"], "Flash attention (-fa); auto needs on and off proven.", flag_values=fv)
    flags.DEFINE_integer("n_gpu_layers", -1, "Layers offloaded (-ngl); -1 all, 0 none.", flag_values=fv)
    flags.DEFINE_integer("context_size", 4096, "Context size (-c).", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("batch_size", 2048, "Logical batch (-b).", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("ubatch_size", 512, "Physical batch (-ub).", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("parallel", 1, "Concurrent sequences / server slots (-np).", lower_bound=1, flag_values=fv)
    return fv


def _parse_into(obj: dict, msg, what: str, path) -> None:
    try:
        json_format.ParseDict(obj, msg)
    except (json_format.ParseError, ValueError, TypeError) as err:
        raise MalformedInputError(f"{path}: not a {what} JSON ({err})") from err


def _load_json(path: pathlib.Path | str, what: str) -> dict:
    try:
        return safe_io.load_json_object(path, what)
    except CertifyError as err:
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
                      batch_size: int, ubatch_size: int, parallel: int) -> runner_report_pb2.Recipe:
    return runner_report_pb2.Recipe(
        kv_cache_types=sorted(set(kv_cache_types)),
        flash_attention=["off", "on"] if flash_attention == "auto" else [flash_attention],
        n_gpu_layers=n_gpu_layers, context_size=context_size, batch_size=batch_size,
        ubatch_size=ubatch_size, parallel_sequences=parallel,
    )


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

    Raises a CertifyError for unusable input (policy, nodes, route, the records directory itself).
    """
    policy = policy_lib.load_policy(policy_path)
    if route_path:
        route = load_route(route_path)
        if route_id:
            route.route_id = route_id
    else:
        route = admission.route_from_nodes([load_node(p) for p in node_paths], model_sha256, route_id,
                                           recipe, model_shard_sha256)
    certs, compats, problems = admission.load_records_dir(records_dir)
    decision = admission.decide(policy, certs, compats, route)
    decision.unusable_inputs.extend(problems)
    return decision, problems


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


def run(fv: flags.FlagValues, out=sys.stdout, err=sys.stderr) -> int:
    """Decides from parsed flags; returns the exit status (never raises for bad input)."""
    if not fv.policy or not fv.records_dir:
        print("usage: --policy and --records_dir are required", file=err)
        return EXIT_UNUSABLE_INPUT
    if fv.route and (fv.node or fv.model_sha256 or fv.model_shard_sha256):
        print("usage: give either --route or --node/--model_sha256, not both", file=err)
        return EXIT_UNUSABLE_INPUT
    recipe = recipe_from_flags(fv.kv_cache_type, fv.flash_attention, fv.n_gpu_layers, fv.context_size,
                               fv.batch_size, fv.ubatch_size, fv.parallel)
    try:
        decision, _ = decide_from_files(fv.policy, fv.records_dir, fv.node, fv.model_sha256, fv.route_id,
                                        recipe, fv.model_shard_sha256, fv.route or None)
    except CertifyError as error:
        print(f"unusable input: {error.code}: {safe_io.escape(error)}", file=err)
        return EXIT_UNUSABLE_INPUT
    text = json_format.MessageToJson(decision, preserving_proto_field_name=True, sort_keys=True) + "\n"
    if fv.out:
        try:
            pathlib.Path(fv.out).write_text(text)
        except OSError as error:
            print(f"unusable input: cannot write --out {safe_io.escape(fv.out)} ({error.strerror})", file=err)
            return EXIT_UNUSABLE_INPUT
    out.write(render(decision))
    return EXIT_ROUTABLE if decision.routable else EXIT_REFUSED


def cli(argv: Sequence[str], out=sys.stdout, err=sys.stderr) -> int:
    """Parses argv (argv[0] is the program) and runs; any unexpected exception is exit 3 with one
    line, so a crash never reads as a refusal."""
    try:
        fv = define_flags()
        if any(a in ("--help", "-h", "--helpfull") for a in argv[1:]):
            out.write(__doc__ + "\n" + fv.get_help() + "\n")
            return EXIT_ROUTABLE
        try:
            rest = fv(list(argv))
        except flags.Error as error:
            print(f"usage: {safe_io.escape(error)}", file=err)
            return EXIT_UNUSABLE_INPUT
        if len(rest) > 1:
            print(f"usage: unexpected arguments {safe_io.escape(rest[1:])}", file=err)
            return EXIT_UNUSABLE_INPUT
        return run(fv, out, err)
    except Exception as error:  # noqa: BLE001 - the one place that turns a bug into exit 3
        print(f"internal-error: {type(error).__name__}: {safe_io.escape(error)} (a bug in admission, not a refusal)", file=err)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(cli(sys.argv))
