"""The Lanes runner: one program for every lane, one step per check, fail closed.

Steps: the checks of tools/runner/checks (REGISTRY), in order. Each writes <out_dir>/logs/<step>.log
and <step>.exit, digested into the RunnerReport (<report>.pb + .json twin). Exit 0 only when the
run is pass_recordable. The command line is tools/runner/cli.py (`python3 -m tools.runner.runner`).
"""

from __future__ import annotations

import math
import pathlib
import shutil
import time
import traceback

from proto import runner_report_pb2 as rpb
from tools.core import errors
from tools.evidence import build_evidence
from tools.model import model_store
from tools.runner import challenge as challenge_lib
from tools.runner import checks, lane_files, log_blocks, run_lock, strictness
from tools.runner import recipe as recipe_lib
from tools.runner import report as report_lib
from tools.runner.checks import cleanup, preflight
from tools.runner.checks.base import Check
from tools.runner.checks.graph_smoke import DEFAULT_KV_TYPES
from tools.runner.config import RunnerConfig
from tools.runner.context import RunContext
from tools.runner.lane_spec import LaneSpecError, load_lane
from tools.runner.steps import Step

CR = rpb.CheckResult
RUNNER_VERSION = "lanes-runner 0.7.1"

EXIT_OK = 0
EXIT_FAIL, EXIT_UNAVAILABLE = errors.EXIT_FAILURE, errors.EXIT_UNAVAILABLE
EXIT_REPORT_UNWRITABLE, EXIT_USAGE = errors.EXIT_UNWRITABLE, errors.EXIT_USAGE


class UsageError(errors.UsageError):
    """The run's configuration asks for something that cannot be done."""


def validate(config: RunnerConfig) -> None:
    known = checks.names()
    unknown = [s for s in config.skip if s not in known]
    if unknown:
        raise UsageError(f"--skip names unknown checks {unknown}; known: {', '.join(known)}")
    if "preflight" in config.skip:
        raise UsageError("preflight cannot be skipped: every other check depends on it")
    if not config.kv_types:
        raise UsageError("--kv_types is empty")
    if config.peer_lane_dir is not None and not config.peer_backend:
        raise UsageError("--peer_lane_dir needs --peer_backend (the peer lane's backend, e.g. cuda)")


def _not_run(name: str, why: str) -> CR:
    return CR(name=name, status=CR.SKIPPED, required=True, message=f"not run: {why}")


def _model_shards(mi) -> list[rpb.ModelShard]:
    """Every file of the model in split order: a GGUF split set is identified by all of them."""
    files = model_store.split_set(pathlib.Path(mi.path))
    if files == [pathlib.Path(mi.path)]:
        return [rpb.ModelShard(name=pathlib.Path(mi.path).name, sha256=mi.sha256, size=mi.size)]
    return model_store.shards(files)


def _finish_report(report: rpb.RunnerReport, ctx: RunContext | None, config: RunnerConfig,
                   non_recordable: list[str]) -> None:
    report.finished_unix = time.time()
    if config.evidence is not None and config.evidence.is_file():
        report.build_evidence_digest = build_evidence.evidence_digest(config.evidence)
    if ctx is not None:
        report.device_class.CopyFrom(ctx.device)
        # Preflight's host load, from its step config (what the audit re-derives it from).
        report.host.load.CopyFrom(preflight.host_load_from_logs(ctx.logs_dir))
        report.reference_lane_evidence_digest = ctx.reference_evidence_digest
        if ctx.evidence is not None:
            report.upstream_commit = ctx.evidence.upstream.commit
            report.patch_stack_digest = ctx.evidence.patch_stack_digest
        if ctx.model_info is not None:
            mi = ctx.model_info
            report.model.CopyFrom(rpb.Model(name=mi.name, sha256=mi.sha256, size=mi.size,
                                            source=config.model_source or str(mi.path)))
            report.model.shards.extend(_model_shards(mi))
        # What the checks really ran, read back from the `$ ...` lines of the step logs.
        report.recipe.CopyFrom(recipe_lib.recipe_from_logs(ctx.logs_dir, ctx.lane.is_accelerator,
                                                           str(config.lane_dir / "bin")))
        too_long = recipe_lib.sequence_problem(report.recipe)
        if too_long:
            non_recordable = [*non_recordable, too_long]
    report_lib.verdict(report, non_recordable)


def run(config: RunnerConfig) -> rpb.RunnerReport:
    """Runs every check for one lane and writes the report; returns it (see exit_code())."""
    config = config.normalized()
    validate(config)
    report = rpb.RunnerReport(schema_version=report_lib.SCHEMA_VERSION, runner_version=RUNNER_VERSION,
                              started_unix=time.time(), host=report_lib.host_info(),
                              build_provenance=config.build_provenance, lane_id=config.lane)
    non_recordable = [f"--skip={','.join(config.skip)} (bring-up only)"] if config.skip else []
    try:
        report_lib.check_writable(config.report)
    except report_lib.ReportWriteError as err:
        report.checks.extend(_not_run(n, "the report cannot be written") for n in checks.names())
        _finish_report(report, None, config, non_recordable + [str(err)])
        return report
    try:
        lane = load_lane(config.spec, config.lane)
    except LaneSpecError as err:
        report.checks.append(CR(name="preflight", status=CR.FAIL, required=True, message=str(err)))
        report.checks.extend(_not_run(n, "preflight failed") for n in checks.names()[1:])
        _finish_report(report, None, config, non_recordable)
        _write(report, config)
        return report
    report.lane_id = lane.lane_id
    # Loosened bounds and a missing policy are known before anything runs; the policy binds the run.
    non_recordable += strictness.apply(config, lane.lane_id, DEFAULT_KV_TYPES)
    logs_dir = config.out_dir / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    ctx = RunContext(config=config, lane=lane, logs_dir=logs_dir,
                     scratch_dir=run_lock.make_staging_dir("lanes-runner-"))  # owner in the name: swept if we die
    # Fresh prompts and seed for this run, recorded before anything runs (a replay cannot know them).
    ctx.challenge = challenge_lib.draw(config.parity_prompt, config.seed)
    config.parity_prompt, config.seed = ctx.challenge.parity_prompt, ctx.challenge.seed
    if ctx.challenge.fixed:
        ctx.non_recordable.append("--parity_prompt or --seed fixed on the command line (bring-up only): "
                                  "a recordable run draws its challenge fresh")
    report.logs.append(report_lib.log_digest(challenge_lib.write(ctx.challenge, logs_dir), config.report.parent))

    def stop_everything() -> None:
        # Whatever happened (a skipped cleanup check, SIGTERM), leave nothing behind; the lock last.
        ctx.tracker.stop_all(grace_s=2.0)
        shutil.rmtree(ctx.scratch_dir, ignore_errors=True)
        ctx.tracker.release()

    try:
        with run_lock.stop_run_on_signal(stop_everything), log_blocks.legacy_config_allowed(False):
            _run_checks(ctx, report)
    finally:
        stop_everything()
    _finish_report(report, ctx, config, non_recordable + ctx.non_recordable)
    _write(report, config)
    return report


def _run_checks(ctx: RunContext, report: rpb.RunnerReport) -> None:
    blocked = ""
    report_dir = ctx.config.report.parent
    for check in list(checks.REGISTRY):
        name = check.name
        if blocked:
            report.checks.append(_not_run(name, blocked))
            continue
        if name in ctx.config.skip:
            report.checks.append(CR(name=name, status=CR.SKIPPED, required=True,
                                    message="skipped by --skip (bring-up only; the run is not recordable)"))
            continue
        pids_before = len(ctx.tracker.pids)
        step = Step(name, ctx.logs_dir, ctx.tracker)
        print(f"[runner] {name} ...", flush=True)
        t0 = time.monotonic()
        changed = _changed_since_hashed(ctx, report, step)
        if changed:  # what would run is not what was hashed: nothing of this step runs
            status, message = CR.FAIL, changed
        else:
            try:
                status, message = check.run(ctx, step, report)
            except Exception as err:  # a crashed check is a failed check, with its traceback in the log
                step.log(traceback.format_exc())
                status, message = CR.FAIL, f"check crashed: {type(err).__name__}: {err}"
        step.result.seconds = time.monotonic() - t0
        tampered = _config_file_changed(step)
        if tampered:  # the step's configuration is the runner's; a lane process rewrote or removed it
            step.log(f"# {tampered}")
            status, message = CR.FAIL, tampered
        # The report's figures are recompute(logs)'s, so an auditor re-derives exactly them.
        problem = _recompute_figures(check, ctx.logs_dir, step.result)
        if problem:
            step.log(f"# {problem}")
            status, message = CR.FAIL, f"{message}; {problem}" if message else problem
        missing = [p.name for p in step.extra_logs if not p.is_file()]
        if missing:  # fail closed: a figure's raw file that is not there cannot be digested or audited
            step.extra_logs = [p for p in step.extra_logs if p.is_file()]
            status, message = CR.FAIL, f"{message}; raw file(s) not written: {', '.join(missing)}"
        result = step.finish(status, message)
        for path in [step.log_path, step.exit_path, *step.extra_logs]:
            digest = report_lib.log_digest(path, report_dir)
            result.logs.append(digest)
            report.logs.append(digest)
        report.checks.append(result)
        print(f"[runner] {name}: {CR.Status.Name(status)} ({result.seconds:.1f}s) {message}", flush=True)
        if name == "preflight" and status != CR.PASS:
            blocked = f"preflight {CR.Status.Name(status)}"
        if name != "cleanup":
            # Every process this step started must be gone now (the cleanup check aggregates these).
            cleanup.after_step(ctx, name, ctx.tracker.pids[pids_before:])
    changed = _changed_since_hashed(ctx, report, None)
    if changed:
        ctx.non_recordable.append(f"after the last step: {changed}")
    steps_log = cleanup.steps_log_path(ctx.logs_dir)
    if steps_log.is_file() and not any(d.path.endswith(steps_log.name) for d in report.logs):
        report.logs.append(report_lib.log_digest(steps_log, report_dir))  # cleanup did not run: still digested


def _config_file_changed(step: Step) -> str:
    """Why <step>.config.json is not what the runner wrote ("" when it is)."""
    written = dict(step._config)  # noqa: SLF001 (the runner owns the step's configuration)
    path = step.config_path
    if not written:
        return f"{path.name} appeared during the step, written by a lane process" if path.exists() else ""
    try:
        on_disk = log_blocks.load_config(path)
    except log_blocks.StepConfigError as err:
        return f"{path.name} was damaged during the step ({err})"
    if on_disk != written:
        changed = sorted(k for k in set(on_disk) | set(written) if on_disk.get(k) != written.get(k))
        return f"{path.name} was changed during the step (keys {', '.join(changed[:5])}): not the runner's configuration"
    return ""


def _changed_since_hashed(ctx: RunContext, report: rpb.RunnerReport, step: Step | None) -> str:
    """Why the lane (or the reference CPU lane) differs from what was hashed; "" when unchanged.

    From the first step after artifact_integrity passed: a lane binary may rewrite a sibling.
    """
    if not any(c.name == "artifact_integrity" and c.status == CR.PASS for c in report.checks):
        return ""
    lanes = [("the lane", ctx.evidence, ctx.config.lane_dir)]
    if ctx.reference_evidence is not None:
        lanes.append(("the reference CPU lane", ctx.reference_evidence, ctx.config.cpu_lane_dir))
    problems = [f"{what}: {p}" for what, ev, lane_dir in lanes for p in lane_files.differences(ev, lane_dir)]
    if step is not None:
        step.log(f"# lanes re-hashed before this step: {len(problems)} difference(s) from their build evidence")
    if not problems:
        return ""
    return ("artifacts changed after artifact_integrity hashed them: " + "; ".join(problems[:5])
            + (f" (+{len(problems) - 5})" if len(problems) > 5 else ""))


def _recompute_figures(check: Check, logs_dir: pathlib.Path, result: CR) -> str:
    """Replaces the check's counts/metrics with recompute(logs_dir)'s; a problem if they differ or it fails.

    A check without recompute() keeps its figures (the audit reports it as unverifiable).
    """
    fn = check.recompute
    if fn is None:
        return ""
    try:
        counts, metrics = fn(logs_dir)
    except Exception as err:  # fail closed: figures nobody can re-derive are not reported as measured
        return f"recompute(logs) failed: {type(err).__name__}: {err}"
    diffs = [f"{k} {dict(result.counts).get(k)} != {counts.get(k)}"
             for k in sorted(set(result.counts) | set(counts)) if dict(result.counts).get(k) != counts.get(k)]
    for k in sorted(set(result.metrics) | set(metrics)):
        a, b = dict(result.metrics).get(k), metrics.get(k)
        same = a is not None and b is not None and (a == b or (math.isnan(a) and math.isnan(b)) or
                                                    math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12))
        if not same:
            diffs.append(f"{k} {a} != {b}")
    result.counts.clear()
    result.counts.update({k: int(v) for k, v in counts.items()})
    result.metrics.clear()
    result.metrics.update({k: float(v) for k, v in metrics.items()})
    if diffs:
        return f"figures differ from recompute(logs): {'; '.join(diffs[:5])}" + (f" (+{len(diffs) - 5})" if len(diffs) > 5 else "")
    return ""


def _write(report: rpb.RunnerReport, config: RunnerConfig) -> None:
    try:
        report_lib.write_report(report, config.report)
    except report_lib.ReportWriteError as err:
        report.pass_recordable = False
        report.non_recordable_reasons.append(str(err))


def exit_code(report: rpb.RunnerReport) -> int:
    if report.pass_recordable:
        return EXIT_OK
    if report_lib.unwritable(report):
        return EXIT_REPORT_UNWRITABLE
    if report.status == rpb.RunnerReport.UNAVAILABLE:
        return EXIT_UNAVAILABLE
    return EXIT_FAIL


if __name__ == "__main__":
    from tools.runner import cli
    cli.start()
