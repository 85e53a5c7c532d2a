"""Runs a lane's llama.cpp CTest bundle without Bazel and writes the CTest report.

On a GPU host (accelerator lanes) or anywhere else:
  python3 -m tools.ctest.run_bundle --bundle=cuda_ctest --lane_dir=cuda \
      --evidence=cuda.evidence.pb --model=tiny_llama_f32.gguf --out=ctest-cuda
writes OUT/ctest.log (ctest's raw output), OUT/ctest_report.pb and its JSON twin. Exit status: 0
when every test the lane spec does not exclude ran and passed, 1 when not (each failing test is
named with its output), 2 when the suite could not be run or read.
"""

import pathlib
import sys

from absl import app, flags

from tools.ctest import bundle, ctest_run

FLAGS = flags.FLAGS
flags.DEFINE_string("bundle", None, "The lane's CTest bundle (bazel-bin/lanes/<lane>_ctest).", required=True)
flags.DEFINE_string("lane_dir", None, "The lane whose libraries the tests load (bazel-bin/lanes/<lane>).", required=True)
flags.DEFINE_string("out", None, "Directory for ctest.log and the report.", required=True)
flags.DEFINE_string("evidence", None, "The lane's build evidence (.pb), digested into the report.")
flags.DEFINE_string("model", None, "GGUF for upstream's 'model' tests (LLAMACPP_TEST_MODELFILE); without it they are SKIPPED, which fails the suite.")
flags.DEFINE_string("ctest", "ctest", "The ctest executable (CMake >= 3.20).")
flags.DEFINE_integer("jobs", 2, "Tests run in parallel (ctest -j).")
flags.DEFINE_integer("timeout_s", ctest_run.Options.timeout_s, "Per-test timeout (ctest --timeout).")
flags.DEFINE_bool("report_only", False, "Exit 0 once the report is written, passed or not (the Bazel action; the gate test judges the report).")
flags.DEFINE_string("log_name", ctest_run.LOG_NAME, "File name of the raw log in --out.")
flags.DEFINE_string("report_pb", ctest_run.REPORT_PB, "File name of the report in --out.")
flags.DEFINE_string("report_json", ctest_run.REPORT_JSON, "File name of the JSON twin in --out.")


def main(argv: list[str]) -> int:
    del argv
    opts = ctest_run.Options(
        bundle=pathlib.Path(FLAGS.bundle),
        lane_dir=pathlib.Path(FLAGS.lane_dir),
        out=pathlib.Path(FLAGS.out),
        ctest=FLAGS.ctest,
        model=pathlib.Path(FLAGS.model) if FLAGS.model else None,
        evidence=pathlib.Path(FLAGS.evidence) if FLAGS.evidence else None,
        jobs=FLAGS.jobs,
        timeout_s=FLAGS.timeout_s,
        log_name=FLAGS.log_name,
        report_pb=FLAGS.report_pb,
        report_json=FLAGS.report_json,
    )
    try:
        report = ctest_run.run(opts)
    except (bundle.BundleError, ctest_run.RunError) as err:
        print(f"run_bundle: {err}", file=sys.stderr)
        return 2
    print(ctest_run.summary_text(report))
    if not report.passed:
        print(ctest_run.failure_text(report), file=sys.stderr)
        return 0 if FLAGS.report_only else 1
    return 0


if __name__ == "__main__":
    app.run(main)
