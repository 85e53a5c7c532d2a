"""bazel run //tools:matrix [-- --json | --html=out.html] [--as_of=...]: the capability matrix of this
workspace; --html also writes the operator dashboard (evidence/matrix.html is one)."""

import datetime as dt
import os
import pathlib
import sys

from absl import app, flags

from tools.evidence import build_evidence
from tools.matrix import matrix_view
from tools.model import model_lock
from tools.policy import timestamps

FLAGS = flags.FLAGS
flags.DEFINE_bool("json", False, "Print JSON instead of a table.")
flags.DEFINE_string("html", "", "Also write a static HTML page here (workspace-relative).")
flags.DEFINE_string("spec", "lanes/spec.json", "Lane spec JSON (runfiles path).")
flags.DEFINE_string("availability", "lanes/availability.json", "Lane availability JSON (runfiles path).")
flags.DEFINE_string("workspace", os.environ.get("BUILD_WORKSPACE_DIRECTORY", "."), "Workspace whose bazel-bin and evidence/ are read.")
flags.DEFINE_string("policy", "evidence/policy.json", "Admission policy (workspace-relative).")
flags.DEFINE_string("records", "evidence/records", "Signed certification records (workspace-relative).")
flags.DEFINE_string("revocations", "evidence/revocations",
                    "Signed revocations (workspace-relative; a copy of a record repository's revocations/). "
                    "A revoked record's lane shows 'revoked: <reason>'. Missing directory: none.")
flags.DEFINE_string("as_of", "", "Judge admission and expiry at this RFC 3339 UTC instant, or 'now'; default the "
                    "newest record's issue time, so the same evidence renders the same page.")
flags.DEFINE_string("model_lock", model_lock.LOCK_PATH, "Model lock naming the certified models (runfiles path).")


def _as_of(value: str) -> dt.datetime | None:
    if not value:
        return None
    return timestamps.now() if value == "now" else timestamps.parse_utc(value)


def main(argv: list[str]) -> None:
    del argv
    workspace = pathlib.Path(FLAGS.workspace)
    html_out = None
    if FLAGS.html:
        html_out = pathlib.Path(FLAGS.html)
        html_out = html_out if html_out.is_absolute() else workspace / html_out
    print(matrix_view.render(workspace, build_evidence.load_json(FLAGS.spec), build_evidence.load_json(FLAGS.availability),
                             policy=workspace / FLAGS.policy, records=workspace / FLAGS.records,
                             revocations=workspace / FLAGS.revocations,
                             as_json=FLAGS.json, html_out=html_out, as_of=_as_of(FLAGS.as_of),
                             model_lock=pathlib.Path(FLAGS.model_lock)))
    if html_out:
        print(f"wrote {html_out}", file=sys.stderr)


if __name__ == "__main__":
    app.run(main)
