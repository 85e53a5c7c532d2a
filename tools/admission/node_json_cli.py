"""Writes a node's node.json (NodeDescription) from the host it runs on, for admission.

    bazel run //tools/admission:node_json -- --lane=cpu --lane_dir=/opt/lanes/cpu \
        --evidence=/opt/lanes/cpu.evidence.pb --spec=/opt/lanes/spec.json --node_id=node-7 \
        --model=/srv/models/gemma-3-270m-q4_k_m.gguf --out=node.json [--gpus=2 --gpu_index=0]

The device class is read as the runner's preflight reads it (the CPU baseline, the backend's
device, driver and runtime, and for a CPU lane the ggml variant the lane's own binaries load; with
--gpus=N >= 2, every GPU the node splits its model over and their interconnect), the
artifacts are hashed as artifact_integrity hashes them, the build evidence is named by its digest,
and each --model by its sha256. Exit status 0: written; 1: this host cannot run the lane (the
reason, as preflight would give it); 2: bad input.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

from absl import app, flags
from google.protobuf import json_format

from proto import admission_pb2
from tools.core.digest import sha256_file
from tools.evidence import build_evidence
from tools.policy.safe_io import escape
from tools.runner import lane_spec
from tools.runner.checks import artifact_integrity, preflight
from tools.runner.checks.preflight_devices import Failed, Unavailable, detect_cpu_variant
from tools.runner.config import RunnerConfig
from tools.runner.context import RunContext
from tools.runner.steps import Step

flags.DEFINE_string("lane", None, "Lane id or alias (e.g. linux-x86_64-cpu or cpu).")
flags.DEFINE_string("lane_dir", None, "The lane's artifacts as deployed on this node (bin/, lib/).")
flags.DEFINE_string("evidence", None, "The lane's build evidence (<lane>.evidence.pb).")
flags.DEFINE_string("spec", None, "The lane spec (//lanes:spec.json).")
flags.DEFINE_string("node_id", None, "The node's id in routes.")
flags.DEFINE_multi_string("model", [], "A model file the node serves (hashed; repeatable).")
flags.DEFINE_string("out", None, "Where node.json is written.")
flags.DEFINE_integer("gpus", 1, "GPUs the node splits its model over (a record for N GPUs admits only N).", lower_bound=1)
flags.DEFINE_integer("gpu_index", 0, "The node's (first) GPU, as the runner's --gpu_index.", lower_bound=0)
for _name in ("lane", "lane_dir", "evidence", "spec", "node_id", "out"):
    flags.mark_flag_as_required(_name)
FLAGS = flags.FLAGS


def describe(lane_name: str, lane_dir: pathlib.Path, evidence: pathlib.Path, spec: pathlib.Path, node_id: str,
             models: list[pathlib.Path], scratch: pathlib.Path, gpus: int = 1,
             gpu_index: int = 0) -> admission_pb2.NodeDescription:
    """The node's description; raises Unavailable when this host cannot run the lane (on `gpus` GPUs)."""
    lane = lane_spec.load_lane(spec, lane_name)
    logs = scratch / "logs"
    logs.mkdir()
    cfg = RunnerConfig(lane=lane_name, lane_dir=lane_dir, evidence=evidence, spec=spec, model=None, out_dir=scratch,
                       report=scratch / "r.pb", timeout_s=60, gpus=gpus, gpu_index=gpu_index)
    ctx = RunContext(config=cfg, lane=lane, logs_dir=logs, scratch_dir=scratch)
    step = Step("preflight", logs, ctx.tracker)
    try:
        ctx.device.CopyFrom(preflight.host_device_class(ctx, step))
        if lane.cpu_variants:
            ctx.device.compute_capability = detect_cpu_variant(ctx, step)
    finally:
        ctx.tracker.stop_all()
    node = admission_pb2.NodeDescription(node_id=node_id, lane_id=lane.lane_id,
                                         build_evidence_digest=build_evidence.evidence_digest(evidence))
    node.device_class.CopyFrom(ctx.device)
    node.artifacts.extend(artifact_integrity.hash_artifacts(lane_dir))
    node.model_sha256.extend(sha256_file(m) for m in models)
    return node


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    for path in (FLAGS.lane_dir, FLAGS.evidence, FLAGS.spec, *FLAGS.model):
        if not pathlib.Path(path).exists():
            print(f"node_json: {escape(path)} does not exist", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="node-json-") as scratch:
        try:
            node = describe(FLAGS.lane, pathlib.Path(FLAGS.lane_dir), pathlib.Path(FLAGS.evidence),
                            pathlib.Path(FLAGS.spec), FLAGS.node_id, [pathlib.Path(m) for m in FLAGS.model],
                            pathlib.Path(scratch), FLAGS.gpus, FLAGS.gpu_index)
        except Unavailable as err:
            print(f"node_json: this host cannot run lane {FLAGS.lane}: {err}", file=sys.stderr)
            return 1
        except (lane_spec.LaneSpecError, build_evidence.EvidenceError, Failed, OSError) as err:
            print(f"node_json: {err}", file=sys.stderr)
            return 2
    out = pathlib.Path(FLAGS.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json_format.MessageToJson(node, sort_keys=True) + "\n")
    tmp.replace(out)
    print(out)
    return 0


if __name__ == "__main__":
    app.run(main)
