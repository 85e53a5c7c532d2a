"""A small, complete run directory for tests (testonly): raw logs, a report whose figures come from
this module's recompute functions (as the runner fills them), build evidence, optionally a record
(signed by the caller's `sign`, so this package stays below certify) and a generated README, laid out as evidence/runs/<name>/ and evidence/records/<name>.record.dsse.json.
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Callable

from proto import build_evidence_pb2
from proto import runner_report_pb2 as rpb
from tools.core.digest import sha256_file
from tools.evidence import run_readme
from tools.runner import report as report_lib
from tools.runner.runner import RUNNER_VERSION

RUN_NAME = "linux-x86_64-cpu.cpu-genuineintel-intel-r-xeon-r-processor-x86-64-v3"

FIXTURE_LOG = """\
$ /lanes/cpu/bin/test-backend-ops test -b CPU -o ADD,MUL_MAT
# lanes-config nmse_threshold=0.0005
  ADD(type=f32,ne=[10,5,4,3]): OK
  ADD(type=f32,ne=[16,5,4,3]): OK
  MUL_MAT(type_a=f32,type_b=f32,m=16,n=1,k=256): OK
  MUL_MAT(type_a=f16,type_b=f32,m=16,n=1,k=256): not supported [CPU]
# exit 0 after 0.20s
"""
SPEED_LOG = """\
$ /lanes/cpu/bin/llama-bench -m /model.gguf -p 64 -n 32 -r 2 -o json
# llama-bench JSON in speed.bench.json
# exit 0 after 1.00s
"""
SPEED_JSON = [{"n_prompt": 64, "n_gen": 0, "avg_ts": 81623.647194}, {"n_prompt": 0, "n_gen": 32, "avg_ts": 4416.671938}]


def recompute_fixture_parity(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    counts: dict[str, int] = {}
    metrics: dict[str, float] = {}
    for line in (logs_dir / "fixture_parity.log").read_text().splitlines():
        if m := re.match(r"# lanes-config (\w+)=(\S+)$", line):
            metrics[m[1]] = float(m[2])
        elif m := re.match(r"\s+([A-Z_]+)\(.*\): (OK|FAIL|not supported)", line):
            field = {"OK": "passed", "FAIL": "failed", "not supported": "not_supported"}[m[2]]
            counts[f"op.{m[1]}.{field}"] = counts.get(f"op.{m[1]}.{field}", 0) + 1
            if m[2] != "not supported":
                counts[f"op.{m[1]}.evaluated"] = counts.get(f"op.{m[1]}.evaluated", 0) + 1
    counts["tests_passed"] = sum(v for k, v in counts.items() if k.endswith(".passed"))
    return counts, metrics


def recompute_speed(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    rows = json.loads((logs_dir / "speed.bench.json").read_text())
    pp = next(r for r in rows if r["n_prompt"])
    tg = next(r for r in rows if r["n_gen"])
    return {"n_prompt": pp["n_prompt"], "n_gen": tg["n_gen"]}, {"pp_tokens_per_s": pp["avg_ts"], "tg_tokens_per_s": tg["avg_ts"]}


RECOMPUTE = {"fixture_parity": recompute_fixture_parity, "speed": recompute_speed}


def problems_fixture_parity(logs_dir: pathlib.Path) -> list[str]:
    failed = sum(v for k, v in recompute_fixture_parity(logs_dir)[0].items() if k.endswith(".failed"))
    return [f"{failed} test(s) failed"] if failed else []


def problems_speed(logs_dir: pathlib.Path) -> list[str]:
    return [] if recompute_speed(logs_dir)[1]["tg_tokens_per_s"] > 0 else ["no tg speed"]


PROBLEMS = {"fixture_parity": problems_fixture_parity, "speed": problems_speed}


def loader(check_name: str):
    """The audit's loader for this synthetic run (stands in for tools.runner.<check>)."""
    return RECOMPUTE.get(check_name)


def verdicts(check_name: str):
    """The audit's problems() for this synthetic run's checks."""
    return PROBLEMS.get(check_name)


def write_report_files(run_dir: pathlib.Path, report: rpb.RunnerReport) -> None:
    report_lib.write_report(report, run_dir / "runner_report.pb")


# sign(report, report_bytes) -> the record's DSSE envelope as JSON text.
RecordSigner = Callable[[rpb.RunnerReport, bytes], str]


def _base_report() -> rpb.RunnerReport:
    return rpb.RunnerReport(schema_version=1, lane_id="linux-x86_64-cpu", status=rpb.RunnerReport.PASS,
                            pass_recordable=True, runner_version=RUNNER_VERSION, build_provenance="bazel")


def make_run(root: pathlib.Path, *, base: rpb.RunnerReport | None = None, sign: RecordSigner | None = None,
             readme: bool = True) -> pathlib.Path:
    """root/evidence/runs/<RUN_NAME>/ (+ root/evidence/records/ when `sign` is given); returns the run dir.

    `base` is the report the run's checks are added to (a signer needs its device class, model, ...).
    """
    run_dir = root / "evidence" / "runs" / RUN_NAME
    logs = run_dir / "logs"
    logs.mkdir(parents=True)
    (logs / "fixture_parity.log").write_text(FIXTURE_LOG)
    (logs / "speed.log").write_text(SPEED_LOG)
    (logs / "speed.bench.json").write_text(json.dumps(SPEED_JSON))
    for step in ("fixture_parity", "speed"):
        (logs / f"{step}.exit").write_text("exit 0\n")

    ev = build_evidence_pb2.BuildEvidence(schema_version=1, lane_id="linux-x86_64-cpu")
    (run_dir / "build_evidence.pb").write_bytes(ev.SerializeToString(deterministic=True))

    report = rpb.RunnerReport()
    report.CopyFrom(base if base is not None else _base_report())
    del report.checks[:]
    report.build_evidence_digest = "sha256:" + sha256_file(run_dir / "build_evidence.pb")
    report.started_unix, report.finished_unix = 1795992058.0, 1795992287.0
    for name, files in (("fixture_parity", ["fixture_parity.log", "fixture_parity.exit"]),
                        ("speed", ["speed.log", "speed.exit", "speed.bench.json"])):
        check = report.checks.add(name=name, status=rpb.CheckResult.PASS, required=True, message=f"{name} ok", seconds=1.0)
        counts, metrics = RECOMPUTE[name](logs)
        check.counts.update(counts)
        check.metrics.update(metrics)
        for f in files:
            check.logs.append(report_lib.log_digest(logs / f, run_dir))
        report.logs.extend(check.logs)
    report.checks.add(name="cancellation", status=rpb.CheckResult.SKIPPED, required=False,
                      message="skipped with --skip=cancellation (bring-up only)")
    write_report_files(run_dir, report)

    if sign is not None:
        records_dir = root / "evidence" / "records"
        records_dir.mkdir(parents=True, exist_ok=True)
        envelope = sign(report, (run_dir / "runner_report.pb").read_bytes())
        (records_dir / f"{RUN_NAME}.record.dsse.json").write_text(envelope)
    if readme:
        run_readme.write_readme(run_dir)
    return run_dir


def rewrite_report(run_dir: pathlib.Path, edit) -> None:
    """Applies edit(report) and rewrites the .pb and its .json twin consistently."""
    report = rpb.RunnerReport.FromString((run_dir / "runner_report.pb").read_bytes())
    edit(report)
    write_report_files(run_dir, report)
