"""Certification as a Bazel test: the runner against the Bazel-built lane and the embedded model.

//tests/certify:<device class> targets run this in the pool of their device class (see tests/certify/BUILD.bazel).
The runner's report (runner_report.pb/.json) and raw logs go to TEST_UNDECLARED_OUTPUTS_DIR, so Bazel
returns them from the farm as test outputs (bazel-testlogs/tests/certify/<name>/test.outputs/). The test
passes iff the runner passes. Signing is a separate, local step over those outputs
(`bazel run //tools:certify` / tools/certify): private keys never go to a farm.
"""

import os
import pathlib
import subprocess
import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("lane", None, "Lane alias, e.g. cpu or cuda.")
flags.DEFINE_string("lane_dir", None, "Runfiles path of the lane's directory (bin/, lib/).")
flags.DEFINE_string("evidence", None, "Runfiles path of <lane>.evidence.pb.")
flags.DEFINE_string("spec", None, "Runfiles path of the lane spec.")
flags.DEFINE_string("model", None, "Runfiles path of the embedded GGUF model.")
flags.DEFINE_string("model_source", "embedded://tools/model:tiny_llama_f32", "Recorded model source.")
flags.DEFINE_string("cpu_lane_dir", "", "Accelerator lanes: runfiles path of the CPU lane.")
flags.DEFINE_list("runner_args", [], "Extra runner flags, e.g. --threads=2.")
flags.mark_flags_as_required(["lane", "lane_dir", "evidence", "spec", "model"])


def runner_argv(root: pathlib.Path, out: pathlib.Path) -> list[str]:
    """The runner command line; paths resolved inside the runfiles tree."""
    argv = [sys.executable, "-m", "tools.runner.runner",
            f"--lane={FLAGS.lane}",
            f"--lane_dir={root / FLAGS.lane_dir}",
            f"--evidence={root / FLAGS.evidence}",
            f"--spec={root / FLAGS.spec}",
            f"--model={root / FLAGS.model}",
            f"--model_source={FLAGS.model_source}",
            f"--out_dir={out}",
            f"--report={out / 'runner_report.pb'}"]
    if FLAGS.cpu_lane_dir:
        argv.append(f"--cpu_lane_dir={root / FLAGS.cpu_lane_dir}")
    return argv + list(FLAGS.runner_args)


def main(argv: list[str]) -> None:
    del argv
    # Bazel runs tests in the runfiles tree of the main repository.
    root = pathlib.Path(os.environ.get("TEST_SRCDIR", "."), os.environ.get("TEST_WORKSPACE", "lanes"))
    outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if not outputs:
        sys.exit("certification_test: TEST_UNDECLARED_OUTPUTS_DIR is unset; run it with `bazel test`")
    out = pathlib.Path(outputs, FLAGS.lane)
    out.mkdir(parents=True, exist_ok=True)
    cmd = runner_argv(root, out)
    print("certification_test:", " ".join(cmd), flush=True)
    # The py_test launcher exported PYTHONPATH with every dependency, so the child finds tools.runner.
    code = subprocess.run(cmd, cwd=root, check=False).returncode
    print(f"certification_test: runner exit {code}; report and logs in test.outputs/{FLAGS.lane}/", flush=True)
    sys.exit(code)


if __name__ == "__main__":
    app.run(main)
