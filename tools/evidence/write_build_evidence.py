"""Bundles a lane's artifacts into <lane>/{bin,lib} and writes its BuildEvidence (.pb and .json)."""

import pathlib

from absl import app, flags

from tools.evidence import build_evidence

FLAGS = flags.FLAGS
flags.DEFINE_string("lane_id", None, "Lane id, a key of the lane spec.", required=True)
flags.DEFINE_string("lane_dir", None, "Where bin/ and lib/ are assembled.", required=True)
flags.DEFINE_string("spec", None, "lanes/spec.json", required=True)
flags.DEFINE_string("pin", None, "@llama_cpp//:pin.json", required=True)
flags.DEFINE_string("sdk", None, "@lane_sdks//:sdks.json", required=True)
flags.DEFINE_string("sdk_name", None, "Key of the SDK in sdks.json.", required=True)
flags.DEFINE_multi_string(
    "stage_log", [], "Files of each cmake() stage's CMake_logs output group; its meta.json (the "
    "offline rule's command lines, compilers, timings) is what the evidence is made from.")
flags.DEFINE_multi_string("binary", [], "Executables to ship in bin/.")
flags.DEFINE_multi_string("library", [], "Shared libraries to ship in lib/.")
flags.DEFINE_string("patches_dir", "", "Unused; the patches are inputs so a patch edit reruns this.")
flags.DEFINE_string("bazel_version", "", "Bazel version that ran the build.")
flags.DEFINE_string("out_pb", None, "Evidence output (binary proto).", required=True)
flags.DEFINE_string("out_json", None, "Evidence output (JSON).", required=True)


def main(argv: list[str]) -> None:
    del argv
    lane_dir = pathlib.Path(FLAGS.lane_dir)
    build_evidence.copy_into(lane_dir, "bin", FLAGS.binary)
    build_evidence.copy_into(lane_dir, "lib", FLAGS.library)
    spec = build_evidence.load_json(FLAGS.spec)["lanes"][FLAGS.lane_id]
    sdks = build_evidence.load_json(FLAGS.sdk)["sdks"]
    sdk = dict(sdks.get(FLAGS.sdk_name, {"name": FLAGS.sdk_name}))
    ev = build_evidence.make_evidence(
        lane_id=FLAGS.lane_id,
        lane_dir=lane_dir,
        pin=build_evidence.load_json(FLAGS.pin),
        sdk=sdk,
        stage_metas=build_evidence.stage_metas(FLAGS.stage_log),
        targets=spec["targets"],
        bazel_version=FLAGS.bazel_version,
    )
    build_evidence.write_evidence(ev, pathlib.Path(FLAGS.out_pb), pathlib.Path(FLAGS.out_json))


if __name__ == "__main__":
    app.run(main)
