"""Runs a mixed-backend route over llama.cpp's RPC backend and measures it (tools/compat/rpc_route.py).

  python3 -m tools.compat.rpc_route_cli \
      --lane=linux-x86_64-cuda:/w/lanes/cuda \
      --lane=linux-x86_64-vulkan:/w/lanes/vulkan:Vulkan0 \
      --client=linux-x86_64-cuda --cpu_lane_dir=/w/lanes/cpu --cpu_evidence=/w/lanes/cpu.evidence.pb \
      --model=tiny.gguf --spec=spec.json --out_dir=OUT

Each --lane is LANE_ID:LANE_DIR[:DEVICE[:RUNNER_REPORT]]; its build evidence is LANE_DIR.evidence.pb.
Every party runs the recipe --kv_cache_type, --flash_attention, --context_size, --batch_size,
--ubatch_size give (default: the lanes' certified one), which the compatibility record then states.
Exit 0 only when every comparison is within tolerance (OUT/compat_report.json says why not).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

from absl import app, flags

from tools.compat import rpc_route

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("lane", [], "LANE_ID:LANE_DIR[:DEVICE[:RUNNER_REPORT]], one per node of the route.")
flags.DEFINE_string("client", None, "The lane whose llama-logits/llama-completion drive the route.")
flags.DEFINE_string("cpu_lane_dir", None, "The CPU lane (a comparison party).")
flags.DEFINE_string("cpu_evidence", None, "The CPU lane's build evidence (the `evidence` of its //lanes:cpu.lane.json): "
                    "the CPU lane is re-hashed against it, and the report names it by digest.")
flags.DEFINE_string("model", None, "GGUF model.")
flags.DEFINE_string("spec", None, "The lane spec (//lanes:spec.json): backends of the lanes.")
flags.DEFINE_string("out_dir", None, "Where logs/ and compat_report.json go.")
flags.DEFINE_string("tensor_split", "", "-ts weights for the route (default 1,2,...: every server gets a layer).")
_RECIPE = rpc_route.RecipeFlags()
flags.DEFINE_string("kv_cache_type", _RECIPE.kv_cache_type, "K and V cache type of every party (-ctk/-ctv).")
flags.DEFINE_enum("flash_attention", _RECIPE.flash_attention, ["on", "off"], "Flash attention of every party (-fa).")
flags.DEFINE_integer("context_size", _RECIPE.context_size, "llama-completion's -c.")
flags.DEFINE_integer("batch_size", _RECIPE.batch_size, "llama-completion's -b.")
flags.DEFINE_integer("ubatch_size", _RECIPE.ubatch_size, "llama-completion's -ub.")
flags.DEFINE_float("max_abs_delta_logit", rpc_route.Tolerances.max_abs_delta_logit, "Tolerance.")
flags.DEFINE_float("max_mean_kl", rpc_route.Tolerances.max_mean_kl, "Tolerance (nats).")
flags.DEFINE_float("min_top1_agreement", rpc_route.Tolerances.min_top1_agreement, "On decisive positions.")
flags.DEFINE_float("min_greedy_agreement", rpc_route.Tolerances.min_greedy_agreement, "Fraction of prompts.")
flags.mark_flags_as_required(["client", "cpu_lane_dir", "cpu_evidence", "model", "spec", "out_dir"])


def parse_lane(value: str, spec: dict) -> rpc_route.RouteLane:
    parts = value.split(":")
    if len(parts) < 2 or parts[0] not in spec["lanes"]:
        raise app.UsageError(f"--lane={value}: want LANE_ID:LANE_DIR[:DEVICE[:REPORT]] with a lane id of the spec")
    lane_dir = pathlib.Path(os.path.abspath(parts[1]))
    return rpc_route.RouteLane(
        lane_id=parts[0], backend=spec["lanes"][parts[0]]["backend"], lane_dir=lane_dir,
        evidence=lane_dir.parent / f"{lane_dir.name}.evidence.pb",
        device=parts[2] if len(parts) > 2 else "",
        report=pathlib.Path(parts[3]) if len(parts) > 3 and parts[3] else None)


def _excused(c: dict) -> str:
    if "greedy_near_tie_paths" in c:
        gaps = ", ".join(f"{g:.3g}" for g in c["greedy_path_gaps"]) or "none"
        return f"{c['greedy_near_tie_paths']} near-tie paths; largest gap per other continuation, nats: {gaps}"
    return f"{c['greedy_divergent_as_every_lane']} as every lane alone"


def main(argv: list[str]) -> int:
    del argv
    spec = json.loads(pathlib.Path(FLAGS.spec).read_text())
    lanes = [parse_lane(v, spec) for v in FLAGS.lane]
    tol = rpc_route.Tolerances(FLAGS.max_abs_delta_logit, FLAGS.max_mean_kl, FLAGS.min_top1_agreement,
                               FLAGS.min_greedy_agreement)
    try:
        report = rpc_route.measure(lanes, FLAGS.client, pathlib.Path(FLAGS.cpu_lane_dir).absolute(),
                                   pathlib.Path(FLAGS.model).absolute(), pathlib.Path(FLAGS.out_dir).absolute(), tol,
                                   threads=os.cpu_count() or 1, tensor_split=FLAGS.tensor_split,
                                   cpu_evidence=pathlib.Path(FLAGS.cpu_evidence).absolute(),
                                   flags=rpc_route.RecipeFlags(FLAGS.kv_cache_type, FLAGS.flash_attention,
                                                               FLAGS.context_size, FLAGS.batch_size, FLAGS.ubatch_size))
    except rpc_route.RouteError as err:
        print(f"rpc_route: {err}", file=sys.stderr)
        return 1
    for who, c in sorted(report["comparisons"].items()):
        print(f"route vs {who}: max|dlogit| {c.get('max_abs_delta_logit', float('nan')):.3g}, mean KL "
              f"{c.get('mean_kl', float('nan')):.3g}, top-1 {c.get('top1_agreement_decisive', float('nan')):.3f} "
              f"({c.get('n_decisive', 0)}/{c.get('n_tokens', 0)} decisive), greedy {c['greedy_agreement']:.2f} "
              f"of {c['greedy_prompts']} ({c['greedy_identical']} identical, {_excused(c)})")
    print(f"RPC protocol v{report['rpc_protocol_version']}; endpoints {', '.join(report['network']['endpoints'])}")
    print("compatible" if report["compatible"] else "NOT compatible: " + "; ".join(report["problems"]))
    return 0 if report["compatible"] else 1


if __name__ == "__main__":
    app.run(main)
