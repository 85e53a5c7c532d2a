"""The Lanes runner: one program for every lane, one step per check, fail closed.

  runner --lane=cpu --lane_dir=LANE --evidence=LANE.evidence.pb --spec=spec.json \
         --model=tiny.gguf --out_dir=OUT --report=OUT/runner_report.pb

Steps: preflight, artifact_integrity, fixture_parity, op_oracle, upstream_ctest, reference_parity,
graph_smoke, concurrency, cancellation, speed, cleanup. Each writes <out_dir>/logs/<step>.log and <step>.exit, digested
into the RunnerReport (<report>.pb + .json twin). Exit 0 only when the run is pass_recordable.
"""

from __future__ import annotations

import importlib
import math
import pathlib
import shutil
import sys
import time
import traceback

from absl import app, flags

from proto import runner_report_pb2 as rpb
from tools.evidence import build_evidence
from tools.model import model_store
from tools.runner import recipe as recipe_lib
from tools.runner import report as report_lib
from tools.runner import run_lock, speed_floors
from tools.runner.config import CHECKS, DEFAULT_KV_TYPES, RunnerConfig
from tools.runner.context import RunContext
from tools.runner.lane_spec import LaneSpecError, load_lane
from tools.runner.steps import Step

CR = rpb.CheckResult
RUNNER_VERSION = "lanes-runner 0.2.1"  # 0.2.0: the upstream_ctest step; 0.2.1: it logs the spec's exclusions

EXIT_OK, EXIT_FAIL, EXIT_UNAVAILABLE, EXIT_REPORT_UNWRITABLE, EXIT_USAGE = 0, 1, 2, 3, 4


def _check_functions():
    # Imported here so that `--help` and the unit tests of one parser do not import NumPy/gguf.
    from tools.runner import (
        artifact_integrity,
        cancellation,
        cleanup,
        concurrency,
        cpu_variants,
        fixture_parity,
        graph_smoke,
        op_oracle,
        preflight,
        reference_parity,
        speed,
        upstream_ctest,
    )
    return {
        "preflight": lambda ctx, step, rep: preflight.run_preflight(ctx, step),
        "artifact_integrity": artifact_integrity.run_artifact_integrity,
        "fixture_parity": lambda ctx, step, rep: fixture_parity.run_fixture_parity(ctx, step),
        "op_oracle": lambda ctx, step, rep: op_oracle.run_op_oracle(ctx, step),
        "cpu_variants": lambda ctx, step, rep: cpu_variants.run_cpu_variants(ctx, step),
        "upstream_ctest": lambda ctx, step, rep: upstream_ctest.run_upstream_ctest(ctx, step),
        "reference_parity": lambda ctx, step, rep: reference_parity.run_reference_parity(ctx, step),
        "graph_smoke": lambda ctx, step, rep: graph_smoke.run_graph_smoke(ctx, step),
        "concurrency": lambda ctx, step, rep: concurrency.run_concurrency(ctx, step),
        "cancellation": lambda ctx, step, rep: cancellation.run_cancellation(ctx, step),
        "cleanup": lambda ctx, step, rep: cleanup.run_cleanup(ctx, step),
        "speed": lambda ctx, step, rep: speed.run_speed(ctx, step),
    }


class UsageError(Exception):
    pass


def validate(config: RunnerConfig) -> None:
    unknown = [s for s in config.skip if s not in CHECKS]
    if unknown:
        raise UsageError(f"--skip names unknown checks {unknown}; known: {', '.join(CHECKS)}")
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
        report.checks.extend(_not_run(n, "the report cannot be written") for n in CHECKS)
        _finish_report(report, None, config, non_recordable + [str(err)])
        return report
    try:
        lane = load_lane(config.spec, config.lane)
    except LaneSpecError as err:
        report.checks.append(CR(name="preflight", status=CR.FAIL, required=True, message=str(err)))
        report.checks.extend(_not_run(n, "preflight failed") for n in CHECKS[1:])
        _finish_report(report, None, config, non_recordable)
        _write(report, config)
        return report
    report.lane_id = lane.lane_id
    logs_dir = config.out_dir / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    ctx = RunContext(config=config, lane=lane, logs_dir=logs_dir,
                     scratch_dir=run_lock.make_staging_dir("lanes-runner-"))  # owner in the name: swept if we die

    def stop_everything() -> None:
        # Whatever happened (a skipped cleanup check, SIGTERM), leave nothing behind; the lock last.
        ctx.tracker.stop_all(grace_s=2.0)
        shutil.rmtree(ctx.scratch_dir, ignore_errors=True)
        ctx.tracker.release()

    try:
        with run_lock.stop_run_on_signal(stop_everything):
            _run_checks(ctx, report)
    finally:
        stop_everything()
    _finish_report(report, ctx, config, non_recordable + ctx.non_recordable)
    _write(report, config)
    return report


def _run_checks(ctx: RunContext, report: rpb.RunnerReport) -> None:
    from tools.runner import cleanup  # with the checks: imported only when a run starts
    funcs = _check_functions()
    blocked = ""
    report_dir = ctx.config.report.parent
    for name in CHECKS:
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
        try:
            status, message = funcs[name](ctx, step, report)
        except Exception as err:  # a crashed check is a failed check, with its traceback in the log
            step.log(traceback.format_exc())
            status, message = CR.FAIL, f"check crashed: {type(err).__name__}: {err}"
        step.result.seconds = time.monotonic() - t0
        # The report's figures are recompute(logs)'s, so an auditor re-derives exactly them.
        problem = _recompute_figures(name, ctx.logs_dir, step.result)
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
    steps_log = cleanup.steps_log_path(ctx.logs_dir)
    if steps_log.is_file() and not any(d.path.endswith(steps_log.name) for d in report.logs):
        report.logs.append(report_lib.log_digest(steps_log, report_dir))  # cleanup did not run: still digested


def _recompute_figures(name: str, logs_dir: pathlib.Path, result: CR) -> str:
    """Replaces the check's counts/metrics with recompute(logs_dir)'s; a problem if they differ or it fails.

    A check without recompute() keeps its figures (the audit reports it as unverifiable).
    """
    try:
        module = importlib.import_module(f"tools.runner.{name}")
    except ImportError:
        return ""
    fn = getattr(module, "recompute", None)
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
    if any("cannot write the report" in r for r in report.non_recordable_reasons):
        return EXIT_REPORT_UNWRITABLE
    if report.status == rpb.RunnerReport.UNAVAILABLE:
        return EXIT_UNAVAILABLE
    return EXIT_FAIL


# ---- command line -------------------------------------------------------------------------------

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("lane", None, "Lane id or alias (e.g. linux-x86_64-cpu or cpu).")
    flags.DEFINE_string("lane_dir", None, "The lane's artifacts (bin/, lib/).")
    flags.DEFINE_string("evidence", None, "<lane>.evidence.pb of the artifacts under test.")
    flags.DEFINE_string("spec", None, "The lane spec (//lanes:spec.json).")
    flags.DEFINE_string("model", None, "GGUF model (the main job passes the embedded tiny model).")
    flags.DEFINE_string("model_source", "", "Where the model came from, e.g. embedded://tools/model:tiny_llama_f32; default: the path.")
    flags.DEFINE_string("cpu_lane_dir", None, "Accelerator lanes: the CPU lane (parity oracle and speed baseline).")
    flags.DEFINE_string("out_dir", None, "Directory for logs/.")
    flags.DEFINE_string("report", None, "Report path (.pb; a .json twin is written beside it).")
    flags.DEFINE_list("kv_types", list(DEFAULT_KV_TYPES), "KV cache types (applied to K and V) for graph_smoke.")
    flags.DEFINE_integer("threads", None, "CPU threads for the lane binaries (default: all cores).")
    flags.DEFINE_list("skip", [], f"Checks to skip (bring-up only: non-recordable, exit != 0). One of {','.join(CHECKS)}.")
    flags.DEFINE_bool("allow_software_icd", False, "Vulkan: accept llvmpipe/lavapipe/SwiftShader (diagnostic, non-recordable).")
    flags.DEFINE_string("fixture_ops", "", "test-backend-ops -o filter (bring-up only, non-recordable).")
    flags.DEFINE_integer("fixture_jobs", 0, "Accelerator lanes: test-backend-ops -j worker threads (0: half the cores, at most 8).")
    flags.DEFINE_float("speed_floor_tg", 0.0, "Token-generation floor, tokens/s.")
    flags.DEFINE_float("speed_floor_pp", 0.0, "Prompt-processing floor, tokens/s.")
    flags.DEFINE_string("policy", "", "Admission policy JSON: its speed floors for this lane raise --speed_floor_*.")
    flags.DEFINE_float("timeout_s", 600.0, "Timeout of each command a step runs, seconds.")
    flags.DEFINE_float("parity_max_abs_delta", 0.05, "reference_parity: max |delta logit|.")
    flags.DEFINE_float("parity_max_mean_kl", 1e-4, "reference_parity: max mean KL (nats).")
    flags.DEFINE_float("parity_min_top1", 1.0, "reference_parity: min top-1 agreement on decisive positions.")
    flags.DEFINE_integer("bench_pp", 0, "llama-bench -p (0: 64 CPU, 512 accelerators).")
    flags.DEFINE_integer("bench_tg", 0, "llama-bench -n (0: 32 CPU, 128 accelerators).")
    flags.DEFINE_integer("bench_reps", 0, "llama-bench -r (0: 2 CPU, 3 accelerators).")
    flags.DEFINE_string("roofline_model", "", "GGUF large enough to be memory-bandwidth bound; speed reports tg's fraction of --hbm_bandwidth_gbs on it.")
    flags.DEFINE_float("hbm_bandwidth_gbs", 0.0, "Bring-up override (non-recordable) of the device memory bandwidth, GB/s, "
                       "that the speed step otherwise measures itself (tools/runner/cuda/membw.cu).")
    flags.DEFINE_float("min_speedup_roofline_pp", RunnerConfig.min_speedup_roofline_pp, "Accelerator lanes: min pp speed-up "
                       "over the CPU lane on --roofline_model on this host (policy speed.roofline_speedup_pp raises it; "
                       "lower = non-recordable).")
    flags.DEFINE_float("min_speedup_roofline_tg", RunnerConfig.min_speedup_roofline_tg, "Accelerator lanes: min tg speed-up "
                       "over the CPU lane on --roofline_model (policy speed.roofline_speedup_tg raises it; lower = non-recordable).")
    flags.DEFINE_float("memory_tolerance_mib", 64.0, "cleanup: allowed GPU memory growth, MiB.")
    flags.DEFINE_integer("gpu_index", 0, "GPU (nvidia-smi index) the run is about.")
    flags.DEFINE_string("peer_lane_dir", "", "Accelerator lanes: another accelerator lane on this host (e.g. the CUDA lane "
                        "when certifying Vulkan), benched side by side in the speed step (informational).")
    flags.DEFINE_string("peer_backend", "", "--peer_lane_dir's backend (cuda, vulkan, ...).")
    flags.DEFINE_string("upstream_dir", "", "An upstream-default build of the same tree on this host (bin/llama-bench; "
                        "//lanes:<alias>_upstream): the speed step reports the lane/upstream ratio.")
    flags.DEFINE_string("ctest_bundle", "", "The lane's llama.cpp CTest bundle (bazel-bin/lanes/<alias>_ctest) for the "
                        "upstream_ctest step; required where the lane spec runs the suite in certification.")
    flags.DEFINE_string("ctest", "ctest", "The ctest executable (CMake >= 3.20) for upstream_ctest.")
    flags.DEFINE_integer("ctest_jobs", 0, "upstream_ctest: ctest -j (0: half the cores, at most 8).")
    flags.DEFINE_string("build_provenance", "bazel", 'How the artifacts came to be: "bazel" or "rebuild-from-lane-spec on <host>".')
    flags.mark_flags_as_required(["lane", "lane_dir", "spec", "out_dir", "report"])


def config_from_flags() -> RunnerConfig:
    def path(v):
        return pathlib.Path(v) if v else None
    cfg = RunnerConfig(
        lane=FLAGS.lane, lane_dir=path(FLAGS.lane_dir), evidence=path(FLAGS.evidence), spec=path(FLAGS.spec),
        model=path(FLAGS.model), model_source=FLAGS.model_source, cpu_lane_dir=path(FLAGS.cpu_lane_dir),
        out_dir=path(FLAGS.out_dir), report=path(FLAGS.report), kv_types=tuple(FLAGS.kv_types),
        skip=tuple(FLAGS.skip), allow_software_icd=FLAGS.allow_software_icd, fixture_ops=FLAGS.fixture_ops, fixture_jobs=FLAGS.fixture_jobs,
        speed_floor_tg=FLAGS.speed_floor_tg, speed_floor_pp=FLAGS.speed_floor_pp, timeout_s=FLAGS.timeout_s,
        parity_max_abs_delta=FLAGS.parity_max_abs_delta, parity_max_mean_kl=FLAGS.parity_max_mean_kl,
        parity_min_top1=FLAGS.parity_min_top1, bench_pp=FLAGS.bench_pp, bench_tg=FLAGS.bench_tg,
        bench_reps=FLAGS.bench_reps, roofline_model=path(FLAGS.roofline_model), hbm_bandwidth_gbs=FLAGS.hbm_bandwidth_gbs,
        memory_tolerance_mib=FLAGS.memory_tolerance_mib, gpu_index=FLAGS.gpu_index,
        build_provenance=FLAGS.build_provenance, min_speedup_roofline_pp=FLAGS.min_speedup_roofline_pp,
        min_speedup_roofline_tg=FLAGS.min_speedup_roofline_tg, peer_lane_dir=path(FLAGS.peer_lane_dir),
        peer_backend=FLAGS.peer_backend, upstream_dir=path(FLAGS.upstream_dir),
        ctest_bundle=path(FLAGS.ctest_bundle), ctest=FLAGS.ctest, ctest_jobs=FLAGS.ctest_jobs,
    )
    if FLAGS.threads:
        cfg.threads = FLAGS.threads
    if FLAGS.policy:
        apply_policy(cfg, pathlib.Path(FLAGS.policy), load_lane(cfg.spec, cfg.lane).lane_id)
    return cfg


def apply_policy(cfg: RunnerConfig, policy_path: pathlib.Path, lane_id: str) -> None:
    """The policy's floors raise the run's; its ceilings are the run's bounds (admission re-checks
    both against the record, so a run held to looser bounds than the policy is refused anyway)."""
    tg, pp = speed_floors.floors_for_lane(policy_path, lane_id)
    cfg.speed_floor_tg, cfg.speed_floor_pp = max(cfg.speed_floor_tg, tg), max(cfg.speed_floor_pp, pp)
    rel_pp, rel_tg = speed_floors.relative_floors_for_lane(policy_path, lane_id)
    cfg.min_speedup_roofline_pp = max(cfg.min_speedup_roofline_pp, rel_pp)
    cfg.min_speedup_roofline_tg = max(cfg.min_speedup_roofline_tg, rel_tg)
    cancel = speed_floors.ceiling_for_lane(policy_path, lane_id, speed_floors.CANCEL_CEILING)
    if cancel is not None:
        cfg.cancel_bound_s = cancel


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        report = run(config_from_flags())
    except (UsageError, LaneSpecError, speed_floors.PolicyFloorsError) as err:
        print(f"runner: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(report_lib.summary_table(report))
    code = exit_code(report)
    if code == EXIT_REPORT_UNWRITABLE:
        print(f"runner: {report.non_recordable_reasons[-1]}", file=sys.stderr)
    elif code == EXIT_OK:
        print(f"runner: report {FLAGS.report} (+ .json)")
    return code


if __name__ == "__main__":
    define_flags()
    app.run(main)
