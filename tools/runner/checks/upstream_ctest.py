"""upstream_ctest: llama.cpp's own CTest suite over the lane's build, on the host under test (issue 14).

The lane's CTest bundle (//lanes:<alias>_ctest: upstream's test executables built from the lane's
own configuration, its CTest files and the source data they read) runs against the lane's own
libraries with the run's model for upstream's "model" tests, so on an accelerator host the tests
that load a model run through the lane's backend on the device. The lane spec says whether a
lane's certification needs the step (ctest.in_certification); the CPU lane's suite gates every
change in CI instead (//tests:cpu_ctest_test), and its step is then recorded as not applicable,
never as a pass.

Raw files, all digested: upstream_ctest.log (the step), upstream_ctest.ctest.log (ctest's own
output), upstream_ctest.manifest.json (the bundle's manifest: tests, labels, exclusions with
their reasons, each test executable's sha256) and the CTest report (.pb and .json). recompute() and
problems() re-derive the counts and the verdict from the raw ctest log, the manifest and the step's
configuration (the lane spec's CTest targets and exclusions, each executable's sha256 as run).

The suite must be the lane spec's: every test executable the spec names (lanes.bzl CTEST_TARGETS)
runs in a test that passed, unless the spec excludes every test of it; a test that runs anything
else (`/bin/echo ok`) is refused. The lane's build evidence lists the lane's own files, not the
test executables, so their digests come from the bundle's manifest (written when the bundle is
made from the lane's llama stage): the step checks bin/ against them before running and logs them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import time
from typing import IO

from google.protobuf import json_format

from proto import ctest_report_pb2 as ctest_pb
from proto import runner_report_pb2 as rpb
from tools.core.digest import sha256_file
from tools.ctest import bundle as bundle_lib
from tools.ctest import ctest_run
from tools.runner import log_blocks
from tools.runner.checks.base import Check, option
from tools.runner.context import RunContext
from tools.runner.steps import Step, without_inherited_llama_args

CR = rpb.CheckResult
STEP = "upstream_ctest"
CTEST_LOG = f"{STEP}.ctest.log"
MANIFEST = f"{STEP}.manifest.json"
REPORT_PB, REPORT_JSON = f"{STEP}.report.pb", f"{STEP}.report.json"
_CONFIG = "# lanes-config "  # runs made before the step's configuration file


def _config(logs_dir: pathlib.Path, step_log: str) -> tuple[dict[str, str], list[str]]:
    """The step's configuration file, or for older runs its log's config lines (and conflicts)."""
    if log_blocks.config_path(logs_dir, STEP).is_file():
        return log_blocks.step_config(logs_dir, STEP), []
    return _config_lines(step_log)


def _config_lines(text: str) -> tuple[dict[str, str], list[str]]:
    """The step log's config lines, and a problem for each key logged twice with different values
    (the log also carries test output: a repeated key is refused, never resolved by order)."""
    out: dict[str, str] = {}
    conflicts: list[str] = []
    for line in text.splitlines():
        if line.startswith(_CONFIG) and "=" in line:
            key, _, value = line[len(_CONFIG):].partition("=")
            key, value = key.strip(), value.strip()
            if key in out and out[key] != value:
                conflicts.append(f"{STEP}.log: {key} logged as {out[key]!r} and as {value!r}")
            out.setdefault(key, value)
    return out, conflicts


def _read_raw(logs_dir: pathlib.Path) -> tuple[str, dict, str]:
    """(step log, manifest, ctest log) of a run that ran the suite."""
    step_log = (logs_dir / f"{STEP}.log").read_text(errors="replace")
    try:
        manifest = bundle_lib.load_manifest_file(logs_dir / MANIFEST)
    except bundle_lib.BundleError as err:
        raise ctest_run.RunError(str(err)) from None
    return step_log, manifest, (logs_dir / CTEST_LOG).read_text(errors="replace")


def _spec_exclusions_problem(manifest: dict, excluded: dict[str, str]) -> str:
    """Empty when the bundle excludes exactly the tests the lane spec excludes, for its reasons."""
    bundled = bundle_lib.exclusions(manifest)
    if bundled == excluded:
        return ""
    differ = sorted(n for n in set(bundled) | set(excluded) if bundled.get(n) != excluded.get(n))
    return (f"the bundle's exclusions are not the lane spec's ({', '.join(differ[:5])}"
            f"{' ...' if len(differ) > 5 else ''}): a stale or foreign bundle; rebuild //lanes:<lane>_ctest")


def spec_targets(spec_path: pathlib.Path, lane_id: str) -> list[str]:
    """The test executables the lane spec's ctest entry names (lanes.bzl CTEST_TARGETS for the lane):
    what the pinned tree registers as CTest tests in the lane's configuration. Empty when the spec
    has none (or cannot be read)."""
    try:
        ctest = json.loads(pathlib.Path(spec_path).read_text())["lanes"][lane_id].get("ctest") or {}
    except (OSError, ValueError, KeyError, AttributeError):
        return []
    targets = ctest.get("targets") if isinstance(ctest, dict) else None
    return sorted(str(t) for t in targets) if isinstance(targets, list) else []


def _suite_problems(config: dict[str, str], manifest: dict, report: ctest_pb.CTestReport) -> list[str]:
    """The suite that ran is the lane spec's: every test executable the spec names ran in a test that
    passed (or only in tests the spec excludes), every test that ran is one of those executables,
    and each executable is the one whose digest the bundle recorded (the digests the step logged)."""
    out: list[str] = []
    targets = json.loads(config["spec_targets"])
    digests = bundle_lib.binary_digests(manifest)
    if digests is None:
        out.append(f"{MANIFEST}: no 'binaries' digests: the test executables cannot be bound to the bundle")
        digests = {}
    logged = {k[len("test_binary."):]: v for k, v in config.items() if k.startswith("test_binary.")}
    for name in sorted(set(logged) | set(digests)):
        want = f"sha256:{digests[name]}" if name in digests else "(not in the manifest)"
        if logged.get(name) != want:
            out.append(f"test binary {name}: ran as {logged.get(name, '(not logged)')}, the bundle recorded {want}")
    passed = {row.name for row in report.tests if row.status == ctest_pb.CTestReport.PASSED}
    runs_in: dict[str, list[dict]] = {}
    for t in manifest["tests"]:
        exe = t["command"][0] if t.get("command") else ""
        target = exe[len(bundle_lib.BIN) + 1:] if exe.startswith(bundle_lib.BIN + "/") else ""
        runs_in.setdefault(target, []).append(t)
        if t["excluded_reason"]:
            continue
        if target not in targets:
            out.append(f"test {t['name']} runs {exe or '(no command)'!r}, not a test executable the lane spec names")
        elif target not in digests:
            out.append(f"test {t['name']} runs {target}, which the bundle's binaries do not list")
    missing = []
    for target in targets:
        tests = runs_in.get(target, [])
        if any(not t["excluded_reason"] and t["name"] in passed for t in tests):
            continue
        if tests and all(t["excluded_reason"] for t in tests):
            continue  # every test of it is excluded by the spec, with its reason
        missing.append(target)
    if missing:
        out.append(f"{len(missing)} test executable(s) the lane spec names ran in no passed test: "
                   f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
    return out


def _figures(report: ctest_pb.CTestReport) -> tuple[dict[str, int], dict[str, float]]:
    t = report.totals
    counts = {"tests_registered": t.total, "tests_passed": t.passed, "tests_failed": t.failed,
              "tests_skipped": t.skipped, "tests_excluded": t.excluded, "tests_not_run": t.not_run}
    return counts, {"test_seconds": t.test_seconds, "wall_seconds": t.wall_seconds}


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    """Per-status test counts and times from ctest's raw log and the bundle's manifest; none where
    the suite never ran to an exit status (not applicable, refused bundle, timed out)."""
    step_log = (logs_dir / f"{STEP}.log").read_text(errors="replace")
    config = _config(logs_dir, step_log)[0]
    if config.get(STEP) == "not_applicable" or "ctest_exit" not in config:
        return {}, {}
    _, manifest, ctest_text = _read_raw(logs_dir)
    return _figures(ctest_run.build_report(manifest, ctest_text, CTEST_LOG))


def problems(logs_dir: pathlib.Path) -> list[str]:
    """The verdict from the raw files: every test the spec does not exclude ran and passed, ctest
    exited 0, the bundle is the lane's, the suite is the lane spec's (every test executable it names
    ran and passed, each with the digest the bundle recorded), and the kept CTest report says what
    the raw log says."""
    step_log, manifest, ctest_text = _read_raw(logs_dir)
    config, out = _config(logs_dir, step_log)
    built = ctest_run.build_report(manifest, ctest_text, CTEST_LOG)
    out += list(built.problems)
    if "spec_targets" in config:  # logged since the runner binds the suite to the spec (issue 23)
        out += _suite_problems(config, manifest, built)
    if not config.get("lane") or config.get("lane") != manifest["lane_id"]:
        out.append(f"the bundle is for {manifest['lane_id']!r}, the run for {config.get('lane')!r}")
    if config.get("ctest_exit") != "0":
        out.append(f"ctest exited {config.get('ctest_exit', '(no exit status logged)')}")
    if "spec_excluded" in config:  # logged since runner 0.2.1
        excluded = json.loads(config["spec_excluded"])
        if problem := _spec_exclusions_problem(manifest, excluded):
            out.append(problem)
    report = json_format.Parse((logs_dir / REPORT_JSON).read_text(), ctest_pb.CTestReport())
    kept_pb = ctest_pb.CTestReport.FromString((logs_dir / REPORT_PB).read_bytes())
    if kept_pb != report:
        out.append(f"{REPORT_PB} and {REPORT_JSON} are not the same report")
    out += [f"{REPORT_JSON}: {p}" for p in ctest_run.audit(
        report, ctest_text, sha256_file(logs_dir / CTEST_LOG), manifest,
        sha256_file(logs_dir / MANIFEST))]
    return out


def _tracked_launch(step: Step, limit_s: float):
    """ctest_run's launcher through the runner's process tracker, bounded by limit_s overall."""
    def launch(argv: list[str], env: dict[str, str], cwd: pathlib.Path, log: IO[bytes]) -> int:
        step.log(f"$ {shlex.join(argv)}")
        start = time.monotonic()
        proc = step.tracker.popen(argv, env=without_inherited_llama_args(env), cwd=cwd,
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            step.tracker.stop(proc)
            code = 124
        step.log(f"# exit {code} after {time.monotonic() - start:.2f}s" + (f" (timed out at {limit_s:.0f}s)" if code == 124 else ""))
        return code
    return launch


def run_upstream_ctest(ctx: RunContext, step: Step, report: rpb.RunnerReport | None = None) -> tuple[int, str]:
    cfg = ctx.config
    if cfg.ctest_bundle is None:
        if not ctx.lane.ctest_in_certification:
            step.result.required = False
            step.config(STEP, "not_applicable")
            return CR.SKIPPED, (f"not required: the lane spec runs {ctx.lane.lane_id}'s CTest suite in CI "
                                f"(//tests:{ctx.lane.alias}_ctest_test), not in certification")
        return CR.FAIL, (f"no --ctest_bundle: the lane spec requires llama.cpp's CTest suite in {ctx.lane.lane_id}'s "
                         f"certification; build //lanes:{ctx.lane.alias}_ctest and pass bazel-bin/lanes/{ctx.lane.alias}_ctest")
    bundle = cfg.ctest_bundle
    try:
        manifest = bundle_lib.load_manifest(bundle)
    except bundle_lib.BundleError as err:
        return CR.FAIL, str(err)
    if manifest.get("lane_id") != ctx.lane.lane_id:
        return CR.FAIL, (f"{bundle}: a CTest bundle for {manifest.get('lane_id')!r}, not {ctx.lane.lane_id}; "
                         f"pass bazel-bin/lanes/{ctx.lane.alias}_ctest")
    if problem := _spec_exclusions_problem(manifest, ctx.lane.ctest_excluded):
        return CR.FAIL, f"{bundle}: {problem.replace('<lane>', ctx.lane.alias)}"
    targets = spec_targets(cfg.spec, ctx.lane.lane_id)
    if not targets:
        return CR.FAIL, (f"the lane spec {cfg.spec} names no CTest targets for {ctx.lane.lane_id}: nothing says which "
                         "tests must run")
    if found := bundle_lib.binary_problems(bundle, manifest):
        return CR.FAIL, f"{bundle}: the test executables are not the bundle's: " + "; ".join(found[:5])
    step.config("lane", f"{ctx.lane.lane_id}")
    step.config("spec_targets", json.dumps(targets))
    step.config("spec_excluded", f"{json.dumps(ctx.lane.ctest_excluded, sort_keys=True)}")
    step.config("bundle", f"{bundle}")
    step.config("manifest_sha256", f"{sha256_file(bundle / 'manifest.json')}")
    for exe in sorted((bundle / "bin").iterdir()):
        step.config(f"test_binary.{exe.name}", f"sha256:{sha256_file(exe)}")
    shutil.copyfile(bundle / "manifest.json", ctx.logs_dir / MANIFEST)
    opts = ctest_run.Options(
        bundle=bundle, lane_dir=cfg.lane_dir, out=ctx.logs_dir, ctest=cfg.ctest, model=cfg.model,
        evidence=cfg.evidence, jobs=resolved_ctest_jobs(cfg), timeout_s=int(cfg.timeout_s),
        log_name=CTEST_LOG, report_pb=REPORT_PB, report_json=REPORT_JSON)
    try:
        report = ctest_run.run(opts, launch=_tracked_launch(step, cfg.ctest_timeout_s))
    except (bundle_lib.BundleError, ctest_run.RunError) as err:
        return CR.FAIL, str(err)
    finally:
        # Every raw file the suite left is digested with the step; one a failed run never wrote
        # (a timed-out suite has a log but no report) is simply not there.
        step.extra_logs += [p for p in (ctx.logs_dir / n for n in (CTEST_LOG, MANIFEST, REPORT_PB, REPORT_JSON))
                            if p.is_file()]
    step.config("ctest_exit", f"{report.ctest_exit_code}")
    step.config("ctest_version", f"{report.ctest_version}")
    step.log(ctest_run.summary_text(report))
    counts, metrics = _figures(report)
    step.result.counts.update(counts)
    step.result.metrics.update(metrics)
    found = problems(ctx.logs_dir)
    t = report.totals
    summary = (f"llama.cpp CTest: {t.passed} passed, {t.failed} failed, {t.skipped} skipped, {t.not_run} not run, "
               f"{t.excluded} excluded (reasons in the lane spec) of {t.total} registered; {t.wall_seconds:.1f} s")
    if found:
        step.log(ctest_run.failure_text(report))
        return CR.FAIL, f"{summary}; " + "; ".join(found[:5]) + (f" (+{len(found) - 5})" if len(found) > 5 else "")
    return CR.PASS, summary


@dataclasses.dataclass(frozen=True)
class Options:
    # The lane's CTest bundle (//lanes:<alias>_ctest), the ctest executable, its -j (0: half the
    # host's cores, at most 8) and a bound on the whole suite, seconds.
    ctest_bundle: pathlib.Path | None = option(None, "The lane's llama.cpp CTest bundle (bazel-bin/lanes/<alias>_ctest) for the "
                                               "upstream_ctest step; required where the lane spec runs the suite in certification.",
                                               path=True)
    ctest: str = option("ctest", "The ctest executable (CMake >= 3.20) for upstream_ctest.")
    ctest_jobs: int = option(0, "upstream_ctest: ctest -j (0: half the cores, at most 8).")
    ctest_timeout_s: float = option(1800.0)


def resolved_ctest_jobs(cfg) -> int:
    return cfg.ctest_jobs if cfg.ctest_jobs > 0 else max(1, min(8, (os.cpu_count() or 2) // 2))


CHECK = Check(name="upstream_ctest", run=run_upstream_ctest, recompute=recompute, problems=problems,
              figures=("tests_registered", "tests_passed", "tests_failed", "tests_excluded"), options=Options)
