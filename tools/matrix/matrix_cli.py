"""bazel run //tools:matrix [-- --json | --html=out.html]: the capability matrix of this workspace."""

import os
import pathlib
import sys

from absl import app, flags

from tools.evidence import build_evidence
from tools.matrix import capability_matrix

FLAGS = flags.FLAGS
flags.DEFINE_bool("json", False, "Print JSON instead of a table.")
flags.DEFINE_string("html", "", "Also write a static HTML page here.")
flags.DEFINE_string("spec", "lanes/spec.json", "Lane spec JSON (runfiles path).")
flags.DEFINE_string("availability", "lanes/availability.json", "Lane availability JSON (runfiles path).")
flags.DEFINE_string("workspace", os.environ.get("BUILD_WORKSPACE_DIRECTORY", "."), "Workspace whose bazel-bin and evidence/ are read.")


def main(argv: list[str]) -> None:
    del argv
    workspace = pathlib.Path(FLAGS.workspace)
    spec = build_evidence.load_json(FLAGS.spec)
    availability = build_evidence.load_json(FLAGS.availability)
    rows = capability_matrix.matrix(spec, availability, workspace / "bazel-bin")
    if FLAGS.html:
        out = pathlib.Path(FLAGS.html)
        out = out if out.is_absolute() else workspace / out
        out.write_text(capability_matrix.render_html(rows, availability["host"]))
        print(f"wrote {out}", file=sys.stderr)
    if FLAGS.json:
        print(capability_matrix.render_json(rows, availability["host"]))
    else:
        print(capability_matrix.render_text(rows))


if __name__ == "__main__":
    app.run(main)
