"""bazel run //tools:bench -- --lane=cpu: the lane against its upstream-default build, side by side.

Builds (as data) //lanes:cpu and //lanes:cpu_upstream, benches both alternately on the embedded
tiny model and a synthetic model large enough to matter, prints the ratio table and writes
bench_report.pb/.json beside the raw llama-bench JSON files. On a GPU host without Bazel:
python3 -m tools.bench.bench_cli --lane=linux-x86_64-cuda --lane_dir=... --reference_dir=... --n_gpu_layers=99
"""

from __future__ import annotations

import os
import pathlib
import re

from absl import app, flags
from google.protobuf import json_format

from tools.bench import bench
from tools.model import make_tiny_model

FLAGS = flags.FLAGS
flags.DEFINE_string("lane", "cpu", "Lane alias (its dirs default to bazel-bin/lanes/<alias> and <alias>_upstream) or lane id.")
flags.DEFINE_string("lane_dir", "", "The lane's artifacts (bin/, lib/); default bazel-bin/lanes/<alias>.")
flags.DEFINE_string("reference_dir", "", "The upstream-default build; default bazel-bin/lanes/<alias>_upstream.")
flags.DEFINE_string("workspace", os.environ.get("BUILD_WORKSPACE_DIRECTORY", "."), "Workspace whose bazel-bin is read.")
flags.DEFINE_string("model", "", "The embedded tiny model (bench label 'tiny').")
flags.DEFINE_string("vocab", "", "Vocab GGUF for the synthetic large model.")
flags.DEFINE_string("large_model", "", "A larger GGUF (label 'large'); default: a synthetic F16 llama made here.")
flags.DEFINE_multi_string("bench_model", [], "LABEL=PATH: another GGUF to bench under LABEL (letters, digits, '_'), "
                          "e.g. a trained model from the model lock or a 7B-shaped Q4_0 model; repeatable.")
flags.DEFINE_integer("large_n_layer", 4, "Synthetic large model: layers.")
flags.DEFINE_integer("large_n_embd", 2048, "Synthetic large model: embedding width (F16; 4 layers x 2048 is ~0.7 GB).")
flags.DEFINE_integer("rounds", 4, "ABBA rounds (each build runs first in half of them).")
flags.DEFINE_integer("pp", 128, "llama-bench -p.")
flags.DEFINE_integer("tg", 32, "llama-bench -n.")
flags.DEFINE_integer("reps", 2, "llama-bench -r.")
flags.DEFINE_integer("threads", 0, "llama-bench -t (0: every core).")
flags.DEFINE_integer("n_gpu_layers", 0, "llama-bench -ngl (accelerator lanes: 99).")
flags.DEFINE_string("out_dir", "", "Where logs/ and bench_report.pb go (default <workspace>/bench-out/<lane>).")

_ALIASES = {"cpu": "linux-x86_64-cpu", "cuda": "linux-x86_64-cuda", "vulkan": "linux-x86_64-vulkan"}


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    alias = next((a for a, lane_id in _ALIASES.items() if FLAGS.lane in (a, lane_id)), FLAGS.lane)
    ws = pathlib.Path(FLAGS.workspace)
    lane_dir = pathlib.Path(FLAGS.lane_dir or ws / "bazel-bin" / "lanes" / alias).absolute()
    reference_dir = pathlib.Path(FLAGS.reference_dir or ws / "bazel-bin" / "lanes" / f"{alias}_upstream").absolute()
    out_dir = pathlib.Path(FLAGS.out_dir or ws / "bench-out" / alias).absolute()
    models = {}
    if FLAGS.model:
        models["tiny"] = pathlib.Path(FLAGS.model).absolute()
    if FLAGS.large_model:
        models["large"] = pathlib.Path(FLAGS.large_model).absolute()
    elif FLAGS.vocab:
        large = out_dir / "models" / f"synthetic_f16_{FLAGS.large_n_layer}x{FLAGS.large_n_embd}.gguf"
        if not large.is_file():
            cfg = make_tiny_model.TinyConfig(n_layer=FLAGS.large_n_layer, n_embd=FLAGS.large_n_embd,
                                             n_head=FLAGS.large_n_embd // 128, n_head_kv=FLAGS.large_n_embd // 128,
                                             n_ff=FLAGS.large_n_embd * 11 // 4)
            make_tiny_model.make_tiny_model(pathlib.Path(FLAGS.vocab), large, "f16", 1234, cfg)
        models["large"] = large
    for spec in FLAGS.bench_model:
        label, sep, path = spec.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_]+", label) or not path:
            raise app.UsageError(f"--bench_model={spec!r}: expected LABEL=PATH with a label of letters, digits and '_'")
        if label in models:
            raise app.UsageError(f"--bench_model={spec!r}: the label {label!r} is given twice")
        models[label] = pathlib.Path(path).absolute()
    if not models:
        raise app.UsageError("give --model and/or --large_model (or --vocab to make a synthetic large model)")
    try:
        report = bench.run(bench.BenchConfig(
            lane_id=_ALIASES.get(alias, FLAGS.lane), lane_dir=lane_dir, reference_dir=reference_dir, models=models,
            out_dir=out_dir, rounds=FLAGS.rounds, pp=FLAGS.pp, tg=FLAGS.tg, reps=FLAGS.reps,
            threads=FLAGS.threads or (os.cpu_count() or 1), n_gpu_layers=FLAGS.n_gpu_layers))
    except bench.BenchError as err:
        raise SystemExit(f"bench: {err}") from err
    (out_dir / "bench_report.pb").write_bytes(report.SerializeToString(deterministic=True))
    (out_dir / "bench_report.json").write_text(json_format.MessageToJson(report, preserving_proto_field_name=True))
    print(bench.table(report))
    print(f"report: {out_dir / 'bench_report.json'} (raw llama-bench JSON in {out_dir / 'logs'})")
    return 0


if __name__ == "__main__":
    app.run(main)
