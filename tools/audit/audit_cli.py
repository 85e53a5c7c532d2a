"""`bazel run //tools:audit -- <run dir> [<run dir> ...]`: re-derive every figure of committed runs.

Exits 0 only when every run has 0 mismatches (see tools/audit/audit.py for what is checked).
"""

from __future__ import annotations

import os
import pathlib
import sys

from absl import app, flags

from tools.audit import audit

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("model", [], "Model files a recompute may need (found by sha256), e.g. the embedded model "
                          "bazel-bin/tools/model/tiny_llama_f32.gguf for a CPU run's op_oracle.")
flags.DEFINE_string("spec", "", "The lane spec the required checks are derived from (default: lanes/spec.json in the "
                    "runfiles, $LANES_SPEC, the workspace's bazel-bin/lanes/spec.json). The policy's required "
                    "checks are added by certify, which runs this audit before it signs.")
flags.DEFINE_bool("require_readme", True, "A run without a generated README.md is a finding (off for runs not yet published).")


def _resolve(arg: str) -> pathlib.Path:
    # `bazel run` starts in the runfiles tree; relative paths mean the user's workspace.
    base = os.environ.get("BUILD_WORKING_DIRECTORY") or os.environ.get("BUILD_WORKSPACE_DIRECTORY") or "."
    return pathlib.Path(base, arg) if not os.path.isabs(arg) else pathlib.Path(arg)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: bazel run //tools:audit -- <run dir> [<run dir> ...]", file=sys.stderr)
        return 2
    if FLAGS.model:
        from tools.runner.checks import op_oracle  # its recompute re-runs the float64 reference on the model
        os.environ[op_oracle.MODELS_ENV] = os.pathsep.join(
            [str(_resolve(m)) for m in FLAGS.model] + [os.environ.get(op_oracle.MODELS_ENV, "")])
    failed = 0
    for arg in argv[1:]:
        result = audit.audit_run(_resolve(arg), require_readme=FLAGS.require_readme,
                                 spec=_resolve(FLAGS.spec) if FLAGS.spec else None)
        print(result.summary(), flush=True)
        failed += not result.ok
    return 1 if failed else 0


if __name__ == "__main__":
    app.run(main)
