"""Decides whether a route over the given nodes is admissible, writes the decision, exits 0 if routable.

  admission_cli --policy=policy.json --records_dir=records --node=node-a.json --node=node-b.json \\
                --model_sha256=<hex> --out=decision.json
Each --node is a NodeDescription in JSON. Exit status: 0 routable, 1 refused, 2 unusable input.
"""

from __future__ import annotations

import pathlib
import sys

from absl import app, flags
from google.protobuf import json_format

from proto import admission_pb2
from tools.admission import admission
from tools.admission import policy as policy_lib
from tools.certify.errors import CertifyError, UnreadableInputError

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defined only when run as a program: importing this module (the main job does) must not
    collide with the importer's own flags."""
    flags.DEFINE_string("policy", None, "AdmissionPolicy JSON.", required=True)
    flags.DEFINE_string("records_dir", None, "Directory of *.dsse.json certification and compatibility records.", required=True)
    flags.DEFINE_multi_string("node", [], "NodeDescription JSON, one per node of the route.")
    flags.DEFINE_string("model_sha256", "", "sha256 of the model the route serves.")
    flags.DEFINE_string("route_id", "", "Route id recorded in the decision.")
    flags.DEFINE_string("out", "", "Where to write the AdmissionDecision JSON.")


def load_node(path: pathlib.Path | str) -> admission_pb2.NodeDescription:
    node = admission_pb2.NodeDescription()
    try:
        json_format.Parse(pathlib.Path(path).read_text(), node)
    except (OSError, json_format.ParseError) as err:
        raise UnreadableInputError(f"{path}: not a NodeDescription JSON ({err})") from err
    if not node.node_id:
        node.node_id = pathlib.Path(path).stem
    return node


def decide_from_files(
    policy_path: pathlib.Path | str,
    records_dir: pathlib.Path | str,
    node_paths: list[str],
    model_sha256: str,
    route_id: str = "",
) -> tuple[admission_pb2.AdmissionDecision, list[str]]:
    """(decision, warnings about record files that could not be read)."""
    policy = policy_lib.load_policy(policy_path)
    certs, compats, problems = admission.load_records_dir(records_dir)
    route = admission.route_from_nodes([load_node(p) for p in node_paths], model_sha256, route_id)
    return admission.decide(policy, certs, compats, route), problems


def main(argv: list[str]) -> None:
    del argv
    try:
        decision, problems = decide_from_files(FLAGS.policy, FLAGS.records_dir, FLAGS.node, FLAGS.model_sha256, FLAGS.route_id)
    except CertifyError as err:
        print(f"{err.code}: {err}", file=sys.stderr)
        sys.exit(2)
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    text = json_format.MessageToJson(decision, preserving_proto_field_name=True, sort_keys=True) + "\n"
    if FLAGS.out:
        pathlib.Path(FLAGS.out).write_text(text)
    for lane in decision.lanes:
        print(f"{lane.node_id} ({lane.lane_id}): {'routable, record ' + lane.record_id[:16] if lane.routable else 'refused'}")
    for reason in decision.reasons:
        print(f"  {reason}")
    print(f"route {decision.route_id or '(unnamed)'}: {'ROUTABLE' if decision.routable else 'REFUSED'} "
          f"(policy {decision.policy_id} {decision.policy_digest[:19]})")
    sys.exit(0 if decision.routable else 1)


if __name__ == "__main__":
    define_flags()
    app.run(main)
