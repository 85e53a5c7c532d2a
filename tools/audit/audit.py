"""Audit of one run directory: every figure in the report re-derived from its digested raw files.

A run directory holds runner_report.pb (+ its .json twin), logs/ and the files the report digests,
build_evidence.pb (+ .json) bound by report.build_evidence_digest, and README.md generated from
those. audit_run() checks, failing closed:
  (a) every LogDigest (sha256 + size) re-hashes, and no file under the run dir is undigested;
  (b) each check's recompute(logs_dir) (its descriptor in tools/runner/checks) reproduces every count and metric of
      the report, and the report carries no figure recompute did not produce (nor the reverse);
      recompute sees a copy of the digested files only, so a figure cannot come from anything else;
  (c) the .json twin equals the .pb, and README.md equals what tools/evidence/run_readme.py renders;
  (d) every check's PASS/FAIL is its problems(logs_dir)'s, which checks are required comes from the
      lane spec and the policy (never from the report's `required`), and status and pass_recordable
      follow from those; every check of the registry is reported once;
  (e) the recipe, device class, host load, model and artifacts are recomputed from the raw files (and the
      artifact step's bindings from build_evidence.pb), and every raw file a step declares (its .log,
      .exit, the files its log names) is digested and present.
Anything that cannot be verified (no recompute or problems() for a check, one that raises, a lane
spec that cannot be read) is a named finding, never a pass and never left out.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import os
import pathlib
import re
import shutil
import tempfile
from collections.abc import Callable, Collection

from google.protobuf import json_format

from proto import build_evidence_pb2
from proto import runner_report_pb2 as rpb
from tools.core.digest import sha256_file
from tools.evidence import run_readme
from tools.runner import checks, lane_spec, log_blocks
from tools.runner import recipe as recipe_lib
from tools.runner.checks import artifact_integrity, preflight

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
    kind: str        # digest | undigested | raw-file | twin | build-evidence | recompute | figure | verdict |
                     # required | recipe | device-class | host-load | model | artifacts | readme | report
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
    figures_unverified: dict[str, int] = dataclasses.field(default_factory=dict)  # check -> figures not compared
    checks_recomputed: list[str] = dataclasses.field(default_factory=list)
    verdicts_rederived: list[str] = dataclasses.field(default_factory=list)  # checks whose PASS/FAIL re-derived

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        lines = [f"audit {self.run_dir}"]
        lines += [f"  {f}" for f in self.findings]
        unverified = ("; NOT VERIFIED (recompute did not run, see the findings): "
                      + ", ".join(f"{c} ({n} figure(s))" for c, n in self.figures_unverified.items())
                      if self.figures_unverified else "")
        lines.append(f"figures recomputed: {self.figures_recomputed} of {self.figures_in_report} in the report "
                     f"(checks: {', '.join(self.checks_recomputed) or 'none'}){unverified}; verdicts re-derived: "
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


def metric_rel_tol(check: str) -> float:
    """The relative tolerance for a recomputed metric of `check`: the registry's, else REL_TOL."""
    registered = checks.get(check)
    return max(REL_TOL, registered.metric_rel_tol) if registered is not None else REL_TOL


def _compare(check: str, kind: str, reported: dict, recomputed: dict, result: AuditResult) -> None:
    rel_tol = metric_rel_tol(check)
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
                ok = finite and math.isclose(w, g, rel_tol=rel_tol, abs_tol=ABS_TOL)
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
    if (run_dir / BUILD_EVIDENCE_PB).is_file():  # bound by report.build_evidence_digest (_check_twins)
        shutil.copyfile(run_dir / BUILD_EVIDENCE_PB, dest / BUILD_EVIDENCE_PB)
    return dest / "logs"


def _default_verdicts(check_name: str) -> Callable[[pathlib.Path], list[str]] | None:
    """The registered check's problems: its verdict from its raw files (None: not derivable)."""
    check = checks.get(check_name)
    return check.problems if check is not None else None


Verdicts = Callable[[str], Callable[[pathlib.Path], list[str]] | None]


def _scrub(err: BaseException, logs_dir: pathlib.Path) -> str:
    """An error's text without the audit's temporary directory: the same run audits to the same words."""
    return f"{type(err).__name__}: {err}".replace(str(logs_dir.parent) + os.sep, "")


def _check_verdict(check: rpb.CheckResult, logs_dir: pathlib.Path, result: AuditResult, verdicts: Verdicts,
                   lane: lane_spec.Lane | None = None) -> None:
    """A PASS or FAIL must be what the raw files say: admission trusts these statuses."""
    if check.status not in (rpb.CheckResult.PASS, rpb.CheckResult.FAIL):
        return
    try:
        fn = verdicts(check.name)
    except Exception as err:  # ImportError or an error inside the check module
        fn, why = None, f"cannot import its module ({err})"
    else:
        why = "the check has no problems()"
    if fn is None:  # a status nothing re-derives is a claim, not a result
        result.findings.append(Finding("verdict", check.name, detail=f"verdict not derivable: {why}"))
        return
    try:
        # The lane spec's entry, for a check that judges raw files of runs made before its step config
        # recorded what it judges them against (problems(logs_dir, lane=...)).
        takes_lane = "lane" in inspect.signature(fn).parameters
        problems = fn(logs_dir, lane=lane) if takes_lane else fn(logs_dir)
    except Exception as err:  # a verdict that cannot be derived verifies nothing
        result.findings.append(Finding("verdict", check.name, detail=f"verdict not derivable: {_scrub(err, logs_dir)}"))
        return
    result.verdicts_rederived.append(check.name)
    derived = rpb.CheckResult.PASS if not problems else rpb.CheckResult.FAIL
    if derived != check.status:
        said = rpb.CheckResult.Status.Name(check.status)
        why = "; ".join(problems)[:300] if problems else "no problem in its raw files"
        result.findings.append(Finding("verdict", check.name,
                                       detail=f"report says {said}, the raw files say {rpb.CheckResult.Status.Name(derived)} ({why})"))


# Checks the runner marks not required where they do not apply to the lane (each check's run() sets
# step.result.required = False on exactly these conditions); every other check is always required.
APPLIES: dict[str, Callable[[lane_spec.Lane], bool]] = {
    "op_oracle": lambda lane: not lane.is_accelerator,  # the float64 oracle certifies the CPU lane
    "cpu_variants": lambda lane: not lane.is_accelerator and bool(lane.cpu_variants),
    "upstream_ctest": lambda lane: lane.ctest_in_certification,
}


def required_checks(lane: lane_spec.Lane, policy_required: list[str]) -> dict[str, str]:
    """check -> why it is required of this lane: the lane spec (the registry, less the checks that do
    not apply to it, and those added after the runner that made the run being judged) and the
    policy's required_checks for the lane."""
    why = {c.name: f"the lane spec ({lane.lane_id})" for c in checks.REGISTRY
           if APPLIES.get(c.name, lambda _: True)(lane) and not (c.since and log_blocks.run_predates(c.since))}
    for n in policy_required:
        why.setdefault(n, f"the policy's required checks for {lane.lane_id}")
    return why


def _default_spec_path() -> pathlib.Path | None:
    """The repository's lane spec: $LANES_SPEC, lanes/spec.json (runfiles of the main job and the
    CLIs), else the workspace's bazel-bin/lanes/spec.json."""
    candidates = [os.environ.get("LANES_SPEC", ""), "lanes/spec.json"]
    if os.environ.get("BUILD_WORKSPACE_DIRECTORY"):
        candidates.append(os.path.join(os.environ["BUILD_WORKSPACE_DIRECTORY"], "bazel-bin/lanes/spec.json"))
    return next((pathlib.Path(c) for c in candidates if c and pathlib.Path(c).is_file()), None)


def _required(report: rpb.RunnerReport, spec: pathlib.Path | None, policy_required: Collection[str],
              result: AuditResult) -> tuple[set[str], lane_spec.Lane | None]:
    """The checks this report's lane requires, from the spec and policy; findings where the report
    marks one of them not required, lists a check twice, lacks one, or names one the registry lacks."""
    named = [c.name for c in report.checks]
    for name in sorted({n for n in named if named.count(n) > 1}):
        result.findings.append(Finding("report", name, detail="check reported more than once"))
    for name in [n for n in dict.fromkeys(named) if checks.get(n) is None]:
        result.findings.append(Finding("report", name, detail="not a check of the registry"))
    reported = {c.name for c in report.checks if c.required}
    spec = spec if spec is not None else _default_spec_path()
    if spec is None:
        result.findings += [Finding("required", n, detail="not in the report") for n in checks.names() if n not in named]
        result.findings.append(Finding("required", "lane spec", detail=f"no lane spec to derive which checks {report.lane_id} "
                                       "requires (pass --spec, or set LANES_SPEC)"))
        return reported | set(checks.names()), None
    try:
        lane = lane_spec.load_lane(spec, report.lane_id)
    except lane_spec.LaneSpecError as err:
        result.findings.append(Finding("required", "lane spec", detail=f"cannot derive which checks are required: {err}"))
        result.findings += [Finding("required", n, detail="not in the report") for n in checks.names() if n not in named]
        return reported | set(checks.names()), None
    why = required_checks(lane, list(policy_required))
    for c in report.checks:
        if c.name in why and not c.required:
            result.findings.append(Finding("required", c.name, detail=f"the report marks it not required; {why[c.name]} "
                                           f"requires it (status {rpb.CheckResult.Status.Name(c.status)})"))
    for name in [n for n in why if n not in named]:
        result.findings.append(Finding("required", name, detail=f"required by {why[name]}, not in the report"))
    # A check the runner itself required stays required (stricter, never looser).
    return set(why) | reported, lane


def _check_report_verdict(report: rpb.RunnerReport, required: set[str], result: AuditResult) -> None:
    """status and pass_recordable follow from the required checks (fail closed), as report.verdict
    computes them, with `required` derived by the audit."""
    present = {c.name: c for c in report.checks}
    req = [present.get(n) for n in sorted(required)]
    if any(c is not None and c.status == rpb.CheckResult.UNAVAILABLE for c in req):
        want = rpb.RunnerReport.UNAVAILABLE
    elif req and all(c is not None and c.status == rpb.CheckResult.PASS for c in req):
        want = rpb.RunnerReport.PASS
    else:
        want = rpb.RunnerReport.FAIL
    if report.status != want:
        not_pass = [f"{n} {rpb.CheckResult.Status.Name(present[n].status) if n in present else 'absent'}"
                    for n in sorted(required) if n not in present or present[n].status != rpb.CheckResult.PASS]
        result.findings.append(Finding("verdict", "report", detail=f"status {rpb.RunnerReport.Status.Name(report.status)}, "
                                       f"but its required checks give {rpb.RunnerReport.Status.Name(want)}"
                                       + (f" ({', '.join(not_pass[:6])})" if not_pass else "")))
    recordable = want == rpb.RunnerReport.PASS and not report.non_recordable_reasons
    if report.pass_recordable != recordable:
        result.findings.append(Finding("verdict", "report", detail=f"pass_recordable {report.pass_recordable}, "
                                       f"but status and non_recordable_reasons give {recordable}"))


def _check_figures(run_dir: pathlib.Path, report: rpb.RunnerReport, logs_dir: pathlib.Path,
                   result: AuditResult, loader: Callable[[str], Recompute | None], verdicts: Verdicts,
                   lane: lane_spec.Lane | None = None) -> None:
    for check in report.checks:
        n_figures = len(check.counts) + len(check.metrics)
        result.figures_in_report += n_figures
        _check_verdict(check, logs_dir, result, verdicts, lane)
        if (check.status in (rpb.CheckResult.SKIPPED, rpb.CheckResult.UNAVAILABLE)
                and not check.counts and not check.metrics):
            continue  # nothing was claimed, so nothing to re-derive
        try:
            fn = loader(check.name)
        except Exception as err:  # ImportError or an error inside the check module
            fn, why = None, f"no recompute for check {check.name}: cannot import its module ({err})"
        else:
            why = f"no recompute for check {check.name}"
        if fn is None:
            result.findings.append(Finding("recompute", check.name, detail=why))
            result.figures_unverified[check.name] = n_figures
            continue
        try:
            counts, metrics = fn(logs_dir)
        except Exception as err:  # a recompute that cannot run verifies nothing: named, with what it lacked
            missing = getattr(err, "filename", None)
            hint = (f" (it needs {pathlib.Path(missing).name}, which the run does not hold as a digested file)"
                    if isinstance(err, FileNotFoundError) and missing else "")
            result.findings.append(Finding("recompute", check.name,
                                           detail=f"recompute cannot run: {_scrub(err, logs_dir)}{hint}; "
                                                  f"its {n_figures} figure(s) are not verified"))
            result.figures_unverified[check.name] = n_figures
            continue
        result.checks_recomputed.append(check.name)
        _compare(check.name, "counts", dict(check.counts), dict(counts), result)
        _compare(check.name, "metrics", dict(check.metrics), dict(metrics), result)


_EXIT_FILE = re.compile(r"^[01] (?P<status>PASS|FAIL|SKIPPED|UNAVAILABLE)\n?$")
# Files a step log names as its commands' own output (annotations) or in the runner's own lines.
_NAMED_FILE = r"\b{step}\.[\w+-]+(?:\.[\w+-]+)*\.(?:json|jsonl|log|npz|txt)\b"


def _check_raw_files(report: rpb.RunnerReport, verified: dict[str, rpb.LogDigest], logs_dir: pathlib.Path,
                     result: AuditResult) -> None:
    """Every raw file a step declares is digested (and so present): its .log and .exit wherever it
    ran or claims a result, and, for a PASS, every file its log names; its .exit says its status. A raw file deleted together with its digest
    is found here, not read as empty."""
    digested = {pathlib.PurePosixPath(p).name for p in verified if pathlib.PurePosixPath(p).parent.name == "logs"}
    for c in report.checks:
        ran = bool(c.logs) or c.status == rpb.CheckResult.PASS or bool(c.counts) or bool(c.metrics)
        if not ran:
            continue
        need = [f"{c.name}.log", f"{c.name}.exit"]
        if c.status == rpb.CheckResult.PASS:  # a failed step may name an output it never wrote
            text = log_blocks.read(logs_dir / f"{c.name}.log")
            for cmd in log_blocks.commands(text):
                need += cmd.files
            need += re.findall(_NAMED_FILE.format(step=re.escape(c.name)), log_blocks.runner_lines(text))
        for name in dict.fromkeys(need):
            if name not in digested:
                result.findings.append(Finding("raw-file", c.name, detail=f"logs/{name} is a raw file of this step "
                                               "but the report digests no such file (missing, or deleted with its digest)"))
        # The step's exit file is the status the runner wrote when the step finished.
        exit_file = logs_dir / f"{c.name}.exit"
        if f"{c.name}.exit" in digested:
            m = _EXIT_FILE.match(exit_file.read_text(errors="replace"))
            said = rpb.CheckResult.Status.Name(c.status)
            if m is None:
                result.findings.append(Finding("raw-file", c.name, detail=f"logs/{c.name}.exit is not `<0|1> <STATUS>`"))
            elif m["status"] != said:
                result.findings.append(Finding("raw-file", c.name, detail=f"logs/{c.name}.exit says {m['status']}, "
                                               f"the report {said}"))


def _check_run_facts(run_dir: pathlib.Path, report: rpb.RunnerReport, logs_dir: pathlib.Path,
                     lane: lane_spec.Lane | None, result: AuditResult) -> None:
    """Recipe, device class, model and artifacts are the raw files', and the artifact step's bindings
    are the run's build evidence."""
    accelerator = lane.is_accelerator if lane is not None else report.device_class.backend not in ("", "cpu")
    try:
        recipe = recipe_lib.recipe_from_logs(logs_dir, accelerator)
    except Exception as err:  # a recipe nobody can re-derive is not verified
        result.findings.append(Finding("recipe", "report.recipe", detail=f"cannot recompute: {_scrub(err, logs_dir)}"))
    else:
        too_long = recipe_lib.sequence_problem(recipe)
        if too_long and report.pass_recordable:
            result.findings.append(Finding("recipe", "report.recipe", detail=f"recordable, but {too_long}"))
        if recipe != report.recipe:
            result.findings.append(Finding("recipe", "report.recipe", detail=f"report {_one_line(report.recipe)}, "
                                           f"the step logs give {_one_line(recipe)}"))
    dc = preflight.device_class_from_logs(logs_dir) or rpb.DeviceClass()
    if dc != report.device_class:
        result.findings.append(Finding("device-class", "report.device_class", detail=f"report {_one_line(report.device_class)}, "
                                       f"preflight.log gives {_one_line(dc) or '(none)'}"))
    load = preflight.host_load_from_logs(logs_dir)
    if load != report.host.load:
        result.findings.append(Finding("host-load", "report.host.load", detail=f"report {_one_line(report.host.load) or '(none)'}, "
                                       f"preflight.config.json gives {_one_line(load) or '(none)'}"))
    model = preflight.model_from_logs(logs_dir)
    if report.HasField("model") and (model is None or model != (report.model.sha256, report.model.size)):
        result.findings.append(Finding("model", "report.model", detail=f"report sha256 {report.model.sha256} size "
                                       f"{report.model.size}, preflight.log gives {model or '(no model line)'}"))
    found = artifact_integrity.found_artifacts(logs_dir)
    if list(report.artifacts) != found:
        result.findings.append(Finding("artifacts", "report.artifacts", detail=f"report lists {len(report.artifacts)} "
                                       f"artifact(s), artifact_integrity.log hashed {len(found)}, or their sha256 differ"))
    if not (logs_dir / f"{artifact_integrity.STEP}.log").is_file():
        return  # the step did not run (the report's status says so; its artifacts were compared above)
    ev_path = run_dir / BUILD_EVIDENCE_PB
    try:
        ev = build_evidence_pb2.BuildEvidence.FromString(ev_path.read_bytes())
    except Exception as err:  # OSError, DecodeError: reported by _check_twins too, named here for the binding
        result.findings.append(Finding("artifacts", artifact_integrity.STEP, detail=f"cannot check its bindings: {err}"))
        return
    # The values the step judged against (runs made before its config held them: none to compare).
    config = log_blocks.step_config(logs_dir, artifact_integrity.STEP)
    want = {"build_evidence_digest": report.build_evidence_digest, "upstream_commit": ev.upstream.commit,
            "patch_stack_digest": ev.patch_stack_digest, "lane_id": report.lane_id}
    for key, value in want.items():
        if key in config and config[key] != value:
            result.findings.append(Finding("artifacts", artifact_integrity.STEP, detail=f"step config {key} "
                                           f"{config[key]!r}, the run's build evidence/report give {value!r}"))
    if ev.lane_id != report.lane_id:
        result.findings.append(Finding("artifacts", BUILD_EVIDENCE_PB, detail=f"is for lane {ev.lane_id}, the report for {report.lane_id}"))
    listed, _ = artifact_integrity.logged_hashes(logs_dir)
    if listed != {a.path: a.sha256 for a in ev.artifacts}:
        result.findings.append(Finding("artifacts", artifact_integrity.STEP, detail="the `evidence` hashes in its log are "
                                       f"not {BUILD_EVIDENCE_PB}'s artifacts"))
    for field, value in (("upstream_commit", ev.upstream.commit), ("patch_stack_digest", ev.patch_stack_digest)):
        if getattr(report, field) != value:
            result.findings.append(Finding("artifacts", f"report.{field}", detail=f"report {getattr(report, field)!r}, "
                                           f"{BUILD_EVIDENCE_PB} {value!r}"))


def _one_line(message) -> str:
    return str(message).replace("\n", " ").strip()


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


# The first runner that wrote <step>.config.json for every step.
_STEP_CONFIG_FILES_SINCE = (0, 2, 1)


def _predates_step_config_files(runner_version: str) -> bool:
    """True for a report of a runner older than the step config files (an unparseable version gets
    the strict reading)."""
    version = log_blocks.parse_runner_version(runner_version)
    return version is not None and version < _STEP_CONFIG_FILES_SINCE


def audit_run(run_dir: pathlib.Path, *, loader: Callable[[str], Recompute | None] = _default_loader,
              require_readme: bool = True, verdicts: Verdicts | None = None,
              spec: pathlib.Path | None = None, policy_required: Collection[str] = (),
              whole_run: bool = True) -> AuditResult:
    """Audits one run directory; result.findings is empty only when everything re-derives.

    spec: the lane spec that says which checks the lane requires (default: _default_spec_path());
    policy_required: the admission policy's required checks for the report's lane, required too
    (certify passes them: the policy is read above this stage, tools/policy). whole_run=False audits only
    the checks the report lists (digests, figures, verdicts): unit tests of those parts over partial
    synthetic runs; certify and the CLI always audit the whole run.
    """
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
    # In-log config lines (which a lane can print) count only for runs made before the step config
    # files existed; a current run is judged on its runner-written config files alone.
    with tempfile.TemporaryDirectory(prefix="lanes-audit-") as tmp, \
            log_blocks.legacy_config_allowed(_predates_step_config_files(report.runner_version)), \
            log_blocks.judging_run_of(report.runner_version):
        # Recompute sees a copy of the verified digested files only.
        logs_dir = _digested_copy(run_dir, verified, pathlib.Path(tmp))
        if whole_run:
            required, lane = _required(report, spec, policy_required, result)
        else:
            required, lane = {c.name for c in report.checks if c.required}, None
        _check_figures(run_dir, report, logs_dir, result, loader, verdicts, lane)
        if whole_run:
            _check_raw_files(report, verified, logs_dir, result)
            _check_run_facts(run_dir, report, logs_dir, lane, result)
    _check_report_verdict(report, required, result)
    _check_readme(run_dir, result, require_readme)
    return result
