"""Makes a lane's relocatable CTest bundle from its CTest stage (the Bazel action of lanes/ctest.bzl)."""

import json
import pathlib
import sys

from absl import app, flags

from tools.ctest import bundle

FLAGS = flags.FLAGS
flags.DEFINE_string("lane_id", None, "Lane id, a key of the lane spec.", required=True)
flags.DEFINE_string("spec", None, "lanes/spec.json", required=True)
flags.DEFINE_string("build_tree", None, "The CTest stage's output directory (the lane's llama stage, <lane>_llama).", required=True)
flags.DEFINE_multi_string("binary", [], "Test executables the stage built.")
flags.DEFINE_string("source_root", None, "The patched llama.cpp tree (with models/).", required=True)
flags.DEFINE_string("ctest", "ctest", "The ctest executable.")
flags.DEFINE_string("out", None, "The bundle directory to write.", required=True)


def main(argv: list[str]) -> int:
    del argv
    spec = json.loads(pathlib.Path(FLAGS.spec).read_text())["lanes"][FLAGS.lane_id]["ctest"]
    try:
        manifest = bundle.make(
            FLAGS.lane_id, spec, pathlib.Path(FLAGS.build_tree), [pathlib.Path(b) for b in FLAGS.binary],
            pathlib.Path(FLAGS.source_root), pathlib.Path(FLAGS.out), ctest=FLAGS.ctest,
        )
    except bundle.BundleError as err:
        print(f"make_bundle: {err}", file=sys.stderr)
        return 1
    excluded = sum(1 for t in manifest["tests"] if t["excluded_reason"])
    print(f"{FLAGS.lane_id}: {len(manifest['tests'])} CTest tests registered, {excluded} excluded by the lane spec")
    return 0


if __name__ == "__main__":
    app.run(main)
