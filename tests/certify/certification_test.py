"""Certification as a Bazel test: the runner against the Bazel-built lane and the embedded model.

//tests/certify:<device class> targets run this in the pool of their device class (see tests/certify/BUILD.bazel).
The runner's report (runner_report.pb/.json) and raw logs go to TEST_UNDECLARED_OUTPUTS_DIR, so Bazel
returns them from the farm as test outputs (bazel-testlogs/tests/certify/<name>/test.outputs/). The test
passes iff the runner passes. Signing is a separate, local step over those outputs
(`bazel run //tools:certify` / tools/certify): private keys never go to a farm.
"""

import json
import os
import pathlib
import subprocess
import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("lane_manifest", None, "Runfiles path of the lane's <alias>.lane.json (from its LaneInfo): "
                    "its alias, directory and build evidence.")
flags.DEFINE_string("spec", None, "Runfiles path of the lane spec.")
flags.DEFINE_string("model", None, "Runfiles path of the embedded GGUF model.")
flags.DEFINE_string("model_source", "embedded://tools/model:tiny_llama_f32", "Recorded model source.")
flags.DEFINE_string("cpu_lane_manifest", "", "Accelerator lanes: runfiles path of the CPU lane's cpu.lane.json.")
flags.DEFINE_string("policy", None, "Runfiles path of the admission policy the run is bound to (a run without one "
                    "is not recordable).")
flags.DEFINE_list("runner_args", [], "Extra runner flags, e.g. --threads=2.")
flags.mark_flags_as_required(["lane_manifest", "spec", "model", "policy"])


def read_manifest(root: pathlib.Path, path: str) -> dict:
    """A lane manifest (lanes/private/manifest.bzl): {alias, lane_id, lane_dir, evidence, ...}."""
    manifest = json.loads((root / path).read_text())
    if manifest.get("schema_version") != 1:
        sys.exit(f"certification_test: {path} is not a schema_version 1 lane manifest")
    return manifest


def runner_argv(root: pathlib.Path, out: pathlib.Path, lane: dict) -> list[str]:
    """The runner command line; paths resolved inside the runfiles tree."""
    argv = [sys.executable, "-m", "tools.runner.runner",
            f"--lane={lane['alias']}",
            f"--lane_dir={root / lane['lane_dir']}",
            f"--evidence={root / lane['evidence']}",
            f"--spec={root / FLAGS.spec}",
            f"--model={root / FLAGS.model}",
            f"--model_source={FLAGS.model_source}",
            f"--out_dir={out}",
            f"--report={out / 'runner_report.pb'}",
            f"--policy={root / FLAGS.policy}"]
    if FLAGS.cpu_lane_manifest:
        cpu_lane = read_manifest(root, FLAGS.cpu_lane_manifest)
        argv += [f"--cpu_lane_dir={root / cpu_lane['lane_dir']}", f"--cpu_lane_evidence={root / cpu_lane['evidence']}"]
    return argv + list(FLAGS.runner_args)


def main(argv: list[str]) -> None:
    del argv
    # Bazel runs tests in the runfiles tree of the main repository.
    root = pathlib.Path(os.environ.get("TEST_SRCDIR", "."), os.environ.get("TEST_WORKSPACE", "lanes"))
    outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if not outputs:
        sys.exit("certification_test: TEST_UNDECLARED_OUTPUTS_DIR is unset; run it with `bazel test`")
    lane = read_manifest(root, FLAGS.lane_manifest)
    out = pathlib.Path(outputs, lane["alias"])
    out.mkdir(parents=True, exist_ok=True)
    cmd = runner_argv(root, out, lane)
    print("certification_test:", " ".join(cmd), flush=True)
    # The py_test launcher exported PYTHONPATH with every dependency, so the child finds tools.runner.
    code = subprocess.run(cmd, cwd=root, check=False).returncode
    print(f"certification_test: runner exit {code}; report and logs in test.outputs/{lane['alias']}/", flush=True)
    sys.exit(code)


if __name__ == "__main__":
    app.run(main)
