"""`bazel run //tools:certify -- --lane=cpu`: the main job's flags; the job is tools/job/main_job.py."""

from __future__ import annotations

import os

from absl import app, flags

from tools.job import main_job
from tools.model import model_store

_DEFAULTS = main_job.JobOptions()

FLAGS = flags.FLAGS
flags.DEFINE_string("lane", _DEFAULTS.lane, "Lane alias or id.")
flags.DEFINE_string("lane_dir", "", "Lane directory (bin/, lib/); default: the lane_dir of the lane's manifest "
                    "(//lanes:<alias>.lane.json) in this job's runfiles.")
flags.DEFINE_string("evidence", "", "The lane's build evidence (binary proto); default: the evidence of the lane's manifest "
                    "(//lanes:<alias>.lane.json) in this job's runfiles.")
flags.DEFINE_string("cpu_lane_dir", "", "CPU lane for accelerator parity and speed-up; default: the lane_dir of "
                    "//lanes:cpu.lane.json in this job's runfiles.")
flags.DEFINE_string("cpu_lane_evidence", "", "--cpu_lane_dir's build evidence; default: the evidence of "
                    "//lanes:cpu.lane.json in this job's runfiles.")
flags.DEFINE_string("ctest_bundle", "", "The lane's llama.cpp CTest bundle for the runner's upstream_ctest step; default, where "
                    "the lane spec runs the suite in certification: bazel-bin/lanes/<alias>_ctest (bazel build //lanes:<alias>_ctest).")
flags.DEFINE_string("model", main_job.EMBEDDED_MODEL, "GGUF to certify: the embedded model (default), or a model in the "
                    "model store (a path relative to it; for GGUF splits name any split). Never from /home.")
flags.DEFINE_string("model_store", os.environ.get(model_store.ENV_VAR, ""),
                    f"Directory operators keep production models in (default ${model_store.ENV_VAR}).")
flags.DEFINE_string("workspace", os.environ.get("BUILD_WORKSPACE_DIRECTORY", "."), "Workspace holding evidence/.")
flags.DEFINE_bool("publish", False, "Write the run, record, matrix and key enrolment into the committed evidence/ "
                  "(maintainers). Default: into the git-ignored .lanes/local/, leaving the checkout clean.")
flags.DEFINE_string("policy", "", "Admission policy (workspace-relative); default <output root>/policy.json.")
flags.DEFINE_string("records", "", "Where signed records go (workspace-relative); default <output root>/records.")
flags.DEFINE_string("runs", "", "Where reports and raw logs go (workspace-relative); default <output root>/runs.")
flags.DEFINE_string("key", _DEFAULTS.key, "Ed25519 signing key (made if absent; never in a repo).")
flags.DEFINE_integer("validity_days", _DEFAULTS.validity_days, "Lifetime of the certification record.")
flags.DEFINE_list("kv_types", list(_DEFAULTS.kv_types), "KV cache types exercised (K and V).")
flags.DEFINE_string("remote_run", "", "Sign a run made on another host (tools/device/certify_remote_cuda.sh): its run/ "
                    "directory (runner_report.pb + logs/). --evidence must be the build evidence that was carried there.")


def main(argv: list[str]) -> int:
    del argv
    return main_job.main(main_job.JobOptions(
        lane=FLAGS.lane, lane_dir=FLAGS.lane_dir, evidence=FLAGS.evidence, cpu_lane_dir=FLAGS.cpu_lane_dir,
        cpu_lane_evidence=FLAGS.cpu_lane_evidence,
        ctest_bundle=FLAGS.ctest_bundle,
        model=FLAGS.model, model_store=FLAGS.model_store, workspace=FLAGS.workspace, publish=FLAGS.publish,
        policy=FLAGS.policy, records=FLAGS.records, runs=FLAGS.runs, key=FLAGS.key,
        validity_days=FLAGS.validity_days, kv_types=tuple(FLAGS.kv_types), remote_run=FLAGS.remote_run,
    ))


if __name__ == "__main__":
    app.run(main)
