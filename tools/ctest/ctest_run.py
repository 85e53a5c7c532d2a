"""Runs a lane's CTest bundle with ctest against the lane's libraries and writes the report.

One library for both places it runs: the Bazel action beside the build evidence
(//lanes:<lane>_ctest_report) and a GPU host without Bazel (run_bundle.py). The report's counts
are re-derived from the raw ctest log it keeps (ctest_log.recompute), never from exit codes alone.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import IO, Any

from google.protobuf import json_format

from proto import ctest_report_pb2 as pb
from tools.core.digest import sha256_file
from tools.core.errors import LanesError
from tools.ctest import bundle as bundle_lib
from tools.ctest import ctest_log

SCHEMA_VERSION = 1
LOG_NAME = "ctest.log"
REPORT_PB, REPORT_JSON = "ctest_report.pb", "ctest_report.json"
_STATUS = {
    ctest_log.PASSED: pb.CTestReport.PASSED,
    ctest_log.FAILED: pb.CTestReport.FAILED,
    ctest_log.SKIPPED: pb.CTestReport.SKIPPED,
    ctest_log.NOT_RUN: pb.CTestReport.NOT_RUN,
}


# Starts ctest and waits for it: (argv, env, cwd, log file) -> exit status. The runner passes one
# that tracks the process (its cleanup check proves nothing outlived the step).
Launch = Callable[[list[str], dict[str, str], pathlib.Path, IO[bytes]], int]


def _launch_plain(argv: list[str], env: dict[str, str], cwd: pathlib.Path, log: IO[bytes]) -> int:
    return subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, check=False).returncode


class RunError(LanesError):
    """The suite could not be run or read; the message says what to do."""

    code = "ctest-run"


@dataclasses.dataclass
class Options:
    bundle: pathlib.Path
    lane_dir: pathlib.Path
    out: pathlib.Path
    ctest: str = "ctest"
    model: pathlib.Path | None = None
    evidence: pathlib.Path | None = None
    jobs: int = 2
    # CTest's own default per-test timeout (DART_TESTING_TIMEOUT). test-save-load-state takes 145 s on
    # an idle 2-core machine and over 900 s when other builds share it.
    timeout_s: int = 1500
    log_name: str = LOG_NAME
    report_pb: str = REPORT_PB
    report_json: str = REPORT_JSON


def _utc(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def exclude_regex(names: list[str]) -> str:
    return "^(" + "|".join(re.escape(n) for n in sorted(names)) + ")$"


def _ctest_version(ctest: str) -> str:
    try:
        out = subprocess.run([ctest, "--version"], capture_output=True, text=True, check=False).stdout
    except OSError as err:
        raise RunError(f"cannot run {ctest} ({err}); install CMake's ctest or pass --ctest=PATH") from None
    return out.splitlines()[0].strip() if out else ""


def _evidence_facts(evidence: pathlib.Path | None) -> tuple[str, str, str]:
    """(sha256, upstream commit, patch stack digest) of the lane's build evidence JSON twin."""
    if evidence is None:
        return "", "", ""
    if not evidence.is_file():
        raise RunError(f"{evidence}: no such build evidence; pass the lane's <lane>.evidence.pb")
    twin = evidence.with_suffix(".json")
    commit = stack = ""
    if twin.is_file():
        try:
            data = json.loads(twin.read_text())
        except ValueError as err:
            raise RunError(f"{twin}: not JSON ({err}); rebuild the lane") from None
        commit = data.get("upstream", {}).get("commit", "")
        stack = data.get("patchStack", {}).get("digest", "") or data.get("patchStackDigest", "")
    return sha256_file(evidence), commit, stack


def _test_bin_dir(bundle_bin: pathlib.Path, lane_bin: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """The test executables beside the lane's runtime-loaded ggml backends (GGML_BACKEND_DL:
    libggml-cpu-<variant>.so, ...), which ggml looks for in the executable's own directory. The
    executables are copied (ggml resolves /proc/self/exe, so a symlink would point back into the
    bundle); the backends are linked, so the tests load exactly the lane's files."""
    dest.mkdir(parents=True)
    for f in sorted(bundle_bin.iterdir()):
        shutil.copy2(f, dest / f.name)
    if lane_bin.is_dir():
        for module in sorted(lane_bin.glob("libggml-*.so")):
            (dest / module.name).symlink_to(module.resolve())
    return dest


def run(opts: Options, launch: Launch = _launch_plain) -> pb.CTestReport:
    """Runs the bundle's suite and writes log, report .pb and .json into opts.out."""
    manifest = bundle_lib.load_manifest(opts.bundle)
    lib = opts.lane_dir / "lib"
    if not lib.is_dir() or not any(lib.iterdir()):
        raise RunError(f"{lib}: no lane libraries; --lane_dir must be a built lane (bazel-bin/lanes/<lane>)")
    if opts.model is not None and not opts.model.is_file():
        raise RunError(f"{opts.model}: no such model; pass a GGUF with --model or leave it out")
    evidence_sha, commit, stack = _evidence_facts(opts.evidence)
    version = _ctest_version(opts.ctest)
    opts.out.mkdir(parents=True, exist_ok=True)
    log_path = opts.out / opts.log_name
    excluded = bundle_lib.exclusions(manifest)

    work = pathlib.Path(tempfile.mkdtemp(prefix="lanes-ctest-"))
    try:
        bin_dir = _test_bin_dir(opts.bundle / "bin", opts.lane_dir / "bin", work / "bin")
        bundle_lib.instantiate_tree(
            opts.bundle, work,
            bin_dir=str(bin_dir),
            source_dir=str((opts.bundle / "source").resolve()),
            extra_properties=f'SKIP_REGULAR_EXPRESSION "{bundle_lib.MODEL_SKIP_REGEX}"',
        )
        for d in bundle_lib.work_dirs(manifest, work):
            d.mkdir(parents=True, exist_ok=True)
        cmd = [opts.ctest, "--test-dir", str(work), "--output-on-failure", "--no-tests=error",
               "-j", str(opts.jobs), "--timeout", str(opts.timeout_s)]
        if excluded:
            cmd += ["-E", exclude_regex(list(excluded))]
        env = dict(os.environ)
        # The lane's own libraries first: the tests exercise what the lane ships.
        env["LD_LIBRARY_PATH"] = str(lib.resolve()) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env.pop("LLAMACPP_TEST_MODELFILE", None)
        if opts.model is not None:
            env["LLAMACPP_TEST_MODELFILE"] = str(opts.model.resolve())
        started = time.time()
        with open(log_path, "wb") as log:
            exit_code = launch(cmd, env, work, log)
        finished = time.time()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    report = build_report(manifest, log_path.read_text(errors="replace"), str(log_path))
    report.lane_id = manifest["lane_id"]
    report.build_evidence_sha256 = evidence_sha
    report.upstream_commit = commit
    report.patch_stack_digest = stack
    report.manifest_sha256 = sha256_file(opts.bundle / "manifest.json")
    report.ctest_version = version
    # The command as one would retype it: the work directory is a temporary one.
    report.command.extend([c if c != str(work) else "<work dir>" for c in cmd])
    report.ctest_exit_code = exit_code
    report.log_path = opts.log_name
    report.log_sha256 = sha256_file(log_path)
    report.model_sha256 = sha256_file(opts.model) if opts.model else ""
    report.started, report.finished = _utc(started), _utc(finished)
    if report.passed and exit_code != 0:
        report.passed = False
        report.problems.append(f"ctest exited {exit_code} although every result line passed; see {opts.log_name}")
    write(report, opts.out / opts.report_pb, opts.out / opts.report_json)
    return report


def build_report(manifest: dict[str, Any], log_text: str, source: str) -> pb.CTestReport:
    """Per-test results and totals from the raw log and the manifest (no process needed)."""
    tests = manifest["tests"]
    names = [t["name"] for t in tests]
    excluded = bundle_lib.exclusions(manifest)
    try:
        parsed = ctest_log.parse(log_text, source)
        totals = ctest_log.recompute(log_text, names, excluded, source)
    except ctest_log.CTestLogError as err:
        raise RunError(str(err)) from None
    report = pb.CTestReport(schema_version=SCHEMA_VERSION)
    for t in tests:
        row = report.tests.add(name=t["name"], labels=t["labels"])
        if t["name"] in excluded:
            row.status, row.reason = pb.CTestReport.EXCLUDED, excluded[t["name"]]
            continue
        result = parsed.results.get(t["name"])
        if result is None:
            row.status, row.reason = pb.CTestReport.NOT_RUN, "no result line in the ctest log"
            continue
        row.status, row.seconds = _STATUS[result.status], result.seconds
        if result.status != ctest_log.PASSED:
            row.reason, row.output = result.status_text, result.output
    report.totals.CopyFrom(pb.CTestReport.Totals(**dataclasses.asdict(totals)))
    for name, reason in sorted(manifest.get("covered_elsewhere", {}).items()):
        report.covered_elsewhere.add(name=name, reason=reason)
    report.problems.extend(problems(report))
    report.passed = not report.problems
    return report


def problems(report: pb.CTestReport) -> list[str]:
    """Why the suite did not pass: every non-excluded test must have run and passed."""
    out = []
    for row in report.tests:
        if row.status in (pb.CTestReport.PASSED, pb.CTestReport.EXCLUDED):
            continue
        out.append(f"{row.name}: {pb.CTestReport.Status.Name(row.status)} ({row.reason})")
    if report.totals.passed == 0:
        out.append("no test passed: nothing was evaluated")
    return out


def write(report: pb.CTestReport, out_pb: pathlib.Path, out_json: pathlib.Path) -> None:
    out_pb.write_bytes(report.SerializeToString(deterministic=True))
    out_json.write_text(json_format.MessageToJson(report, sort_keys=True) + "\n")


def read(path: pathlib.Path) -> pb.CTestReport:
    report = pb.CTestReport()
    try:
        report.ParseFromString(path.read_bytes())
    except FileNotFoundError:
        raise RunError(f"{path}: no CTest report; build //lanes:<lane>_ctest_report or run run_bundle") from None
    except Exception as err:  # protobuf's DecodeError and friends
        raise RunError(f"{path}: not a CTestReport ({err}); regenerate it") from None
    if report.schema_version != SCHEMA_VERSION:
        raise RunError(f"{path}: schema_version {report.schema_version} is not {SCHEMA_VERSION}; regenerate it")
    return report


def failure_text(report: pb.CTestReport) -> str:
    """What a person reads when the suite fails: each failing test by name, with its output."""
    lines = [f"llama.cpp CTest suite FAILED for {report.lane_id}:"]
    lines += [f"  - {p}" for p in report.problems]
    for row in report.tests:
        if row.status in (pb.CTestReport.PASSED, pb.CTestReport.EXCLUDED):
            continue
        lines.append(f"\n===== {row.name}: {row.reason} ({row.seconds:.2f} s) =====")
        lines.append(row.output or "(no output)")
    return "\n".join(lines)


def summary_text(report: pb.CTestReport) -> str:
    t = report.totals
    lines = [
        f"{report.lane_id}: {t.passed} passed, {t.failed} failed, {t.skipped} skipped, {t.not_run} not run, "
        f"{t.excluded} excluded of {t.total} registered; {t.test_seconds:.1f} s in tests, {t.wall_seconds:.1f} s wall",
    ]
    for row in report.tests:
        if row.status == pb.CTestReport.EXCLUDED:
            lines.append(f"  excluded {row.name}: {row.reason}")
    for c in report.covered_elsewhere:
        lines.append(f"  covered elsewhere {c.name}: {c.reason}")
    return "\n".join(lines)


def audit(report: pb.CTestReport, log_text: str, log_sha256: str, manifest: dict[str, Any],
          manifest_sha256: str) -> list[str]:
    """Mismatches between a report and what its raw log and manifest say (empty: consistent)."""
    out = []
    if report.log_sha256 != log_sha256:
        out.append(f"log sha256 {log_sha256} is not the report's {report.log_sha256}")
    if report.manifest_sha256 != manifest_sha256:
        out.append(f"manifest sha256 {manifest_sha256} is not the report's {report.manifest_sha256}")
    if report.lane_id != manifest["lane_id"]:
        out.append(f"report lane {report.lane_id} is not the manifest's {manifest['lane_id']}")
    try:
        again = build_report(manifest, log_text, report.log_path or "ctest log")
    except RunError as err:
        return out + [str(err)]
    for field in pb.CTestReport.Totals.DESCRIPTOR.fields:
        got, want = getattr(report.totals, field.name), getattr(again.totals, field.name)
        if got != want:
            out.append(f"totals.{field.name}: report says {got}, the raw log gives {want}")
    mine = {(t.name, t.status, t.seconds) for t in report.tests}
    theirs = {(t.name, t.status, t.seconds) for t in again.tests}
    for name, status, _ in sorted(mine ^ theirs):
        out.append(f"test {name} ({pb.CTestReport.Status.Name(status)}) differs between the report and the raw log")
    if report.passed != again.passed:
        out.append(f"passed: report says {report.passed}, the raw log gives {again.passed}")
    return out
