"""Audit of one run directory: every figure in the report re-derived from its digested raw files.

A run directory holds runner_report.pb (+ its .json twin), logs/ and the files the report digests,
build_evidence.pb (+ .json) bound by report.build_evidence_digest, and README.md generated from
those. audit_run() checks, failing closed:
  (a) every LogDigest (sha256 + size) re-hashes, and no file under the run dir is undigested;
  (b) each check's recompute(logs_dir) (its descriptor in tools/runner/checks) reproduces every count and metric of
      the report, and the report carries no figure recompute did not produce (nor the reverse);
      recompute sees a copy of the digested files only, so a figure cannot come from anything else;
  (c) the .json twin equals the .pb, and README.md equals what tools/evidence/run_readme.py renders.
Anything that cannot be verified (no recompute for a check, a recompute that raises) is a finding,
never a pass.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable

from google.protobuf import json_format

from proto import build_evidence_pb2
from proto import runner_report_pb2 as rpb
from tools.core.digest import sha256_file
from tools.evidence import run_readme
from tools.runner import checks

REPORT_PB = "runner_report.pb"
REPORT_JSON = "runner_report.json"
BUILD_EVIDENCE_PB = "build_evidence.pb"
BUILD_EVIDENCE_JSON = "build_evidence.json"
# Metrics are compared as recomputed doubles: equal up to float summation order, nothing looser.
REL_TOL = 1e-9
ABS_TOL = 1e-12
Recompute = Callable[[pathlib.Path], tuple[dict[str, int], dict[str, float]]]


@dataclasses.dataclass(frozen=True)
class Finding:
    kind: str        # digest | undigested | twin | build-evidence | recompute | figure | verdict | readme | report
    where: str       # check name or file path
    key: str = ""    # figure key, for kind "figure"
    reported: str = ""
    recomputed: str = ""
    detail: str = ""

    def __str__(self) -> str:
        if self.kind == "figure":
            return f"[figure] {self.where}.{self.key}: report {self.reported}, recomputed {self.recomputed}" + (
                f" ({self.detail})" if self.detail else "")
        return f"[{self.kind}] {self.where}: {self.detail}"


@dataclasses.dataclass
class AuditResult:
    run_dir: pathlib.Path
    findings: list[Finding] = dataclasses.field(default_factory=list)
    figures_recomputed: int = 0     # report figures recompute reproduced
    figures_in_report: int = 0
    checks_recomputed: list[str] = dataclasses.field(default_factory=list)
    verdicts_rederived: list[str] = dataclasses.field(default_factory=list)  # checks whose PASS/FAIL re-derived

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        lines = [f"audit {self.run_dir}"]
        lines += [f"  {f}" for f in self.findings]
        lines.append(f"figures recomputed: {self.figures_recomputed} of {self.figures_in_report} in the report "
                     f"(checks: {', '.join(self.checks_recomputed) or 'none'}); verdicts re-derived: "
                     f"{', '.join(self.verdicts_rederived) or 'none'}; mismatches: {len(self.findings)}")
        return "\n".join(lines)


def _default_loader(check_name: str) -> Recompute | None:
    """The registered check's recompute (a check not in the registry has none: a finding)."""
    check = checks.get(check_name)
    return check.recompute if check is not None else None


def _inside(run_dir: pathlib.Path, rel: str) -> pathlib.Path | None:
    """run_dir/rel when it stays inside run_dir (a digest must not point elsewhere), else None.

    Judged on the path as written, not on where symlinks lead: Bazel runfiles are symlinks.
    """
    norm = os.path.normpath(rel) if rel else ""
    if not norm or os.path.isabs(norm) or norm == "." or norm.split(os.sep)[0] == "..":
        return None
    return run_dir / norm


def _check_digests(run_dir: pathlib.Path, report: rpb.RunnerReport, result: AuditResult) -> dict[str, rpb.LogDigest]:
    """Verifies every LogDigest; returns the verified ones by path."""
    named: dict[str, rpb.LogDigest] = {}
    for owner, log in [("report", l) for l in report.logs] + [(c.name, l) for c in report.checks for l in c.logs]:
        prior = named.get(log.path)
        if prior is not None:
            if (prior.sha256, prior.size) != (log.sha256, log.size):
                result.findings.append(Finding("digest", log.path, detail=f"{owner} names sha256 {log.sha256[:16]}.. "
                                               f"size {log.size}, elsewhere sha256 {prior.sha256[:16]}.. size {prior.size}"))
            continue
        named[log.path] = log
    verified: dict[str, rpb.LogDigest] = {}
    for rel, log in sorted(named.items()):
        path = _inside(run_dir, rel)
        if path is None:
            result.findings.append(Finding("digest", rel, detail="path is absolute or leaves the run directory"))
            continue
        if not path.is_file():
            result.findings.append(Finding("digest", rel, detail="digested file is missing"))
            continue
        size, sha = path.stat().st_size, sha256_file(path)
        if size != log.size or sha != log.sha256:
            result.findings.append(Finding("digest", rel, detail=f"report sha256 {log.sha256} size {log.size}, "
                                           f"file sha256 {sha} size {size}"))
            continue
        verified[os.path.normpath(rel)] = log
    for c in report.checks:
        if c.logs and not any(l.path.endswith(".log") for l in c.logs):
            result.findings.append(Finding("digest", c.name, detail="check digests no <step>.log"))
    # Files the report does not digest carry no weight and must not sit beside the evidence.
    exempt = {REPORT_PB, REPORT_JSON, run_readme.README_NAME, BUILD_EVIDENCE_PB, BUILD_EVIDENCE_JSON}
    digested = {os.path.normpath(p) for p in named}
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(run_dir).as_posix()
        if rel in exempt:
            continue
        if rel not in digested:
            result.findings.append(Finding("undigested", rel, detail="file is not digested by the report"))
    return verified


def _check_twins(run_dir: pathlib.Path, report: rpb.RunnerReport, result: AuditResult) -> None:
    twin = run_dir / REPORT_JSON
    if not twin.is_file():
        result.findings.append(Finding("twin", REPORT_JSON, detail="missing"))
    else:
        try:
            parsed = json_format.Parse(twin.read_text(), rpb.RunnerReport())
        except (json_format.ParseError, ValueError) as err:
            result.findings.append(Finding("twin", REPORT_JSON, detail=f"not a RunnerReport ({err})"))
        else:
            if parsed != report:
                result.findings.append(Finding("twin", REPORT_JSON, detail=f"differs from {REPORT_PB}"))
    ev_pb = run_dir / BUILD_EVIDENCE_PB
    if not ev_pb.is_file():
        result.findings.append(Finding("build-evidence", BUILD_EVIDENCE_PB, detail="missing; the report names "
                                       f"{report.build_evidence_digest or 'no build evidence'}"))
        return
    digest = "sha256:" + sha256_file(ev_pb)
    if digest != report.build_evidence_digest:
        result.findings.append(Finding("build-evidence", BUILD_EVIDENCE_PB, detail=f"is {digest}, the report names "
                                       f"{report.build_evidence_digest or 'none'}"))
    ev_json = run_dir / BUILD_EVIDENCE_JSON
    if ev_json.is_file():
        try:
            same = json_format.Parse(ev_json.read_text(), build_evidence_pb2.BuildEvidence()) == \
                build_evidence_pb2.BuildEvidence.FromString(ev_pb.read_bytes())
        except Exception as err:  # ParseError, DecodeError
            result.findings.append(Finding("twin", BUILD_EVIDENCE_JSON, detail=f"unreadable ({err})"))
        else:
            if not same:
                result.findings.append(Finding("twin", BUILD_EVIDENCE_JSON, detail=f"differs from {BUILD_EVIDENCE_PB}"))


def _fmt(value: object) -> str:
    return repr(value)


def _compare(check: str, kind: str, reported: dict, recomputed: dict, result: AuditResult) -> None:
    for key in sorted(set(reported) | set(recomputed)):
        if key not in recomputed:
            result.findings.append(Finding("figure", check, f"{kind}.{key}", _fmt(reported[key]), "absent",
                                           "figure in the report that recompute did not produce"))
            continue
        if key not in reported:
            result.findings.append(Finding("figure", check, f"{kind}.{key}", "absent", _fmt(recomputed[key]),
                                           "recomputed figure missing from the report"))
            continue
        want, got = reported[key], recomputed[key]
        if kind == "counts":
            integral = isinstance(got, numbers.Integral) and not isinstance(got, bool)
            ok = integral and int(got) == want
            why = "" if integral else "recomputed count is not an integer"
        else:
            try:
                w, g = float(want), float(got)
            except (TypeError, ValueError):
                ok, why = False, "recomputed metric is not a number"
            else:
                finite = math.isfinite(w) and math.isfinite(g)
                ok = finite and math.isclose(w, g, rel_tol=REL_TOL, abs_tol=ABS_TOL)
                why = "" if finite else "NaN/Inf is never a valid figure"
        if ok:
            result.figures_recomputed += 1
        else:
            result.findings.append(Finding("figure", check, f"{kind}.{key}", _fmt(want), _fmt(got), why))


def _digested_copy(run_dir: pathlib.Path, verified: dict[str, rpb.LogDigest], dest: pathlib.Path) -> pathlib.Path:
    """Copies only the verified digested files into dest (same relative paths); returns dest/logs."""
    for rel in verified:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run_dir / rel, target)
    (dest / "logs").mkdir(exist_ok=True)
    return dest / "logs"


def _default_verdicts(check_name: str) -> Callable[[pathlib.Path], list[str]] | None:
    """The registered check's problems: its verdict from its raw files (None: not derivable)."""
    check = checks.get(check_name)
    return check.problems if check is not None else None


def _check_verdict(check: rpb.CheckResult, logs_dir: pathlib.Path, result: AuditResult,
                   verdicts: Callable[[str], Callable[[pathlib.Path], list[str]] | None]) -> None:
    """A PASS or FAIL must be what the raw files say: admission trusts these statuses."""
    if check.status not in (rpb.CheckResult.PASS, rpb.CheckResult.FAIL):
        return
    fn = verdicts(check.name)
    if fn is None:
        return  # checks without a derivable verdict are held by their figures and the report's consistency
    try:
        problems = fn(logs_dir)
    except Exception as err:  # a verdict that cannot be derived verifies nothing
        result.findings.append(Finding("verdict", check.name, detail=f"verdict not derivable: {type(err).__name__}: {err}"))
        return
    result.verdicts_rederived.append(check.name)
    derived = rpb.CheckResult.PASS if not problems else rpb.CheckResult.FAIL
    if derived != check.status:
        said = rpb.CheckResult.Status.Name(check.status)
        why = "; ".join(problems)[:300] if problems else "no problem in its raw files"
        result.findings.append(Finding("verdict", check.name,
                                       detail=f"report says {said}, the raw files say {rpb.CheckResult.Status.Name(derived)} ({why})"))


def _check_report_verdict(report: rpb.RunnerReport, result: AuditResult) -> None:
    """status and pass_recordable follow from the checks (fail closed), as the runner computes them."""
    required = [c for c in report.checks if c.required]
    if any(c.status == rpb.CheckResult.UNAVAILABLE for c in required):
        want = rpb.RunnerReport.UNAVAILABLE
    elif required and all(c.status == rpb.CheckResult.PASS for c in required):
        want = rpb.RunnerReport.PASS
    else:
        want = rpb.RunnerReport.FAIL
    if report.status != want:
        result.findings.append(Finding("verdict", "report", detail=f"status {rpb.RunnerReport.Status.Name(report.status)}, "
                                       f"but its required checks give {rpb.RunnerReport.Status.Name(want)}"))
    recordable = want == rpb.RunnerReport.PASS and not report.non_recordable_reasons
    if report.pass_recordable != recordable:
        result.findings.append(Finding("verdict", "report", detail=f"pass_recordable {report.pass_recordable}, "
                                       f"but status and non_recordable_reasons give {recordable}"))


def _check_figures(run_dir: pathlib.Path, report: rpb.RunnerReport, verified: dict[str, rpb.LogDigest],
                   result: AuditResult, loader: Callable[[str], Recompute | None],
                   verdicts: Callable[[str], Callable[[pathlib.Path], list[str]] | None] = _default_verdicts) -> None:
    with tempfile.TemporaryDirectory(prefix="lanes-audit-") as tmp:
        logs_dir = _digested_copy(run_dir, verified, pathlib.Path(tmp))
        for check in report.checks:
            result.figures_in_report += len(check.counts) + len(check.metrics)
            if (check.status in (rpb.CheckResult.SKIPPED, rpb.CheckResult.UNAVAILABLE)
                    and not check.counts and not check.metrics):
                continue  # nothing was claimed, so nothing to re-derive
            try:
                fn = loader(check.name)
            except Exception as err:  # ImportError or an error inside the check module
                result.findings.append(Finding("recompute", check.name,
                                               detail=f"no recompute for check {check.name}: cannot import its module ({err})"))
                continue
            if fn is None:
                result.findings.append(Finding("recompute", check.name, detail=f"no recompute for check {check.name}"))
                continue
            try:
                counts, metrics = fn(logs_dir)
            except Exception as err:  # a recompute that cannot run verifies nothing
                result.findings.append(Finding("recompute", check.name,
                                               detail=f"recompute raised {type(err).__name__}: {err}"))
                continue
            result.checks_recomputed.append(check.name)
            _compare(check.name, "counts", dict(check.counts), dict(counts), result)
            _compare(check.name, "metrics", dict(check.metrics), dict(metrics), result)
            _check_verdict(check, logs_dir, result, verdicts)


def _check_readme(run_dir: pathlib.Path, result: AuditResult, require_readme: bool) -> None:
    path = run_dir / run_readme.README_NAME
    if not path.is_file():
        if require_readme:
            result.findings.append(Finding("readme", run_readme.README_NAME,
                                           detail="missing; generate it with tools/evidence/run_readme.write_readme"))
        return
    try:
        want = run_readme.expected_readme(run_dir)
    except run_readme.ReadmeError as err:
        result.findings.append(Finding("readme", run_readme.README_NAME, detail=f"cannot regenerate: {err}"))
        return
    if path.read_text(errors="replace") != want:
        result.findings.append(Finding("readme", run_readme.README_NAME,
                                       detail="differs from the one generated from the report, logs and record "
                                              "(edited by hand or stale); regenerate it"))


def audit_run(run_dir: pathlib.Path, *, loader: Callable[[str], Recompute | None] = _default_loader,
              require_readme: bool = True,
              verdicts: Callable[[str], Callable[[pathlib.Path], list[str]] | None] | None = None) -> AuditResult:
    """Audits one run directory; result.findings is empty only when every figure re-derives."""
    run_dir = pathlib.Path(run_dir)
    result = AuditResult(run_dir=run_dir)
    try:
        report = rpb.RunnerReport.FromString((run_dir / REPORT_PB).read_bytes())
    except Exception as err:  # OSError or DecodeError
        result.findings.append(Finding("report", REPORT_PB, detail=f"not a readable runner report ({err})"))
        return result
    if not report.checks:
        result.findings.append(Finding("report", REPORT_PB, detail="lists no checks"))
    verified = _check_digests(run_dir, report, result)
    _check_twins(run_dir, report, result)
    if verdicts is None:  # with a custom loader (tests), verdicts come only from what the test gives
        verdicts = _default_verdicts if loader is _default_loader else (lambda name: None)
    _check_figures(run_dir, report, verified, result, loader, verdicts)
    _check_report_verdict(report, result)
    _check_readme(run_dir, result, require_readme)
    return result
