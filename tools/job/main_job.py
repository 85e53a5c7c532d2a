"""The main job behind `bazel run //tools:certify -- --lane=cpu` (flags: main_job_cli.py).

Bazel has built the lane and the embedded model (they are the binary's data). This runs every
runner check on this machine, keeps the report and raw logs under evidence/runs/, signs a
passing, recordable report into evidence/records/ with a key kept outside the repository,
verifies the record under the committed policy, and prints the capability matrix.

It sits above every stage (design.md section 2) and only calls down: runner, audit, policy,
certify, admission (enrolling the key), matrix. Nothing imports it but its CLI and tests.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import pathlib
import shutil
import socket
import sys

from proto import runner_report_pb2
from tools.admission import policy_edit
from tools.audit import audit
from tools.certify import certify, records, schema_versions
from tools.core import atomic_files
from tools.evidence import build_evidence, lane_manifest, run_readme
from tools.matrix import matrix_view
from tools.model import model_lock, model_store
from tools.policy import dsse, keys
from tools.policy import policy as policy_lib
from tools.policy.errors import TrustError
from tools.runner import report as report_lib
from tools.runner import run_lock, runner, speed_floors
from tools.runner.checks import op_oracle
from tools.runner.config import CHECKS, DEFAULT_KV_TYPES, RunnerConfig

EMBEDDED_MODEL = "tools/model/tiny_llama_f32.gguf"
# The CPU lane's speed step also measures tg on this bandwidth-bound model against the host's memory.
CPU_ROOFLINE_MODEL = "tools/model/cpu_roofline_f16.gguf"


def default_key_path() -> str:
    return str(keys.default_key_dir() / "lanes-issuer.key")


@dataclasses.dataclass(frozen=True)
class JobOptions:
    """What the job does; main_job_cli.py documents each field as a flag of the same name."""

    lane: str = "cpu"
    lane_dir: str = ""
    evidence: str = ""
    cpu_lane_dir: str = ""
    cpu_lane_evidence: str = ""
    ctest_bundle: str = ""
    model: str = EMBEDDED_MODEL
    model_store: str = ""
    workspace: str = "."
    publish: bool = False
    policy: str = ""
    records: str = ""
    runs: str = ""
    key: str = dataclasses.field(default_factory=default_key_path)
    validity_days: int = 90
    kv_types: tuple[str, ...] = DEFAULT_KV_TYPES  # graph_smoke's option default
    remote_run: str = ""


SPEC = "lanes/spec.json"
AVAILABILITY = "lanes/availability.json"


class MainJobError(Exception):
    """The job cannot go on; the message says what to do."""


def resolve_lane(spec: dict, lane: str) -> tuple[str, str]:
    for lane_id, entry in spec["lanes"].items():
        if lane in (lane_id, entry["alias"]) and lane:
            return lane_id, entry["alias"]
    raise MainJobError(f"unknown lane {lane!r}; known: {', '.join(spec['lanes'])}")


def ensure_key(key_path: pathlib.Path) -> pathlib.Path:
    if key_path.exists():
        return key_path
    made = keys.generate(key_path.stem, key_path.parent)
    print(f"certify: made signing key {made.private_key} (keyid {made.keyid[:16]}...)")
    return made.private_key


def ensure_trusted(policy_path: pathlib.Path, key_path: pathlib.Path) -> bool:
    """Enrols this machine's public key in the policy if it is not there (a reviewable diff).
    Called on a staged copy of the policy; returns whether it changed."""
    pub = key_path.with_suffix(".pub")
    raw = pub.read_bytes()
    keyid = dsse.keyid_for(dsse.raw_public_key(keys.public_key_from_bytes(raw)))
    if policy_path.exists() and any(k.keyid == keyid for k in policy_lib.load_policy(policy_path).trusted_keys):
        return False
    fresh = not policy_path.exists()
    # A new policy requires every check; llama.cpp's CTest suite of the lanes whose certification
    # runs it (the CPU lane's gates in CI instead).
    in_certification = sorted(lane_id for lane_id, lane in build_evidence.load_json(SPEC)["lanes"].items()
                              if lane.get("ctest", {}).get("in_certification")) if fresh else []
    policy_edit.update_policy_file(
        policy_path,
        policy_id="lanes-default",
        public_key=raw,
        owner=f"{getpass.getuser()}@{socket.gethostname()}",
        valid_days=365,
        required_checks=[c for c in CHECKS if c != "upstream_ctest"] if fresh else None,
        lane_required_checks=[(lane_id, "upstream_ctest") for lane_id in in_certification],
        max_record_age_days=None if policy_path.exists() else 90,
        # A fresh policy accepts every record version this verifier knows.
        supported_record_schema_versions=None if policy_path.exists() else schema_versions.known_versions(),
    )
    print(f"certify: enrolled key {keyid[:16]}... in the policy; review and commit it to trust this issuer")
    return True


def publish_run(staging: pathlib.Path, runs: pathlib.Path, report: runner_report_pb2.RunnerReport,
                evidence: pathlib.Path) -> pathlib.Path:
    """Makes a finished run evidence/runs/<lane>.<device class>[.<model sha256 prefix>]/ (records.run_name),
    with the build evidence it names:
    completed in the staging dir, then copied into a temporary sibling and renamed into place (an
    earlier run of the same lane and device class is replaced only once the new one is complete)."""
    final = runs / records.run_name(report.lane_id, report.device_class, report.model)
    shutil.copy2(evidence, staging / "build_evidence.pb")
    json_twin = evidence.with_suffix(".json")
    if json_twin.exists():
        shutil.copy2(json_twin, staging / "build_evidence.json")
    (staging.parent / run_lock.KEPT_MARKER).unlink(missing_ok=True)
    return atomic_files.publish_dir(staging, final)


def load_remote_run(run_dir: pathlib.Path, evidence: pathlib.Path, lane_id: str) -> tuple[pathlib.Path, runner_report_pb2.RunnerReport]:
    """A run from another host, checked to be for this lane and bound to this build evidence."""
    report_path = run_dir / "runner_report.pb"
    try:
        report = runner_report_pb2.RunnerReport.FromString(report_path.read_bytes())
    except Exception as err:  # OSError, or protobuf's DecodeError (a bare Exception subclass)
        raise MainJobError(f"{report_path}: not a readable runner report ({err})") from err
    if report.lane_id != lane_id:
        raise MainJobError(f"{report_path} is for lane {report.lane_id}, not {lane_id}")
    if report.build_evidence_digest != build_evidence.evidence_digest(evidence):
        raise MainJobError(f"{report_path} names build evidence {report.build_evidence_digest}, but {evidence} is "
                           f"{build_evidence.evidence_digest(evidence)}: pass the evidence that was carried to that host")
    staging = run_lock.make_staging_dir("lanes-remote-run-") / "run"
    shutil.copytree(run_dir, staging)
    return staging, report


def sweep_leftovers(workspace: pathlib.Path) -> None:
    """What a killed earlier job left: temporary files under evidence/ and staging dirs (issue 15)."""
    swept = [line for d in (workspace / "evidence", workspace / LOCAL_ROOT) if d.is_dir()
             for line in atomic_files.sweep_leftovers(d)]
    for line in swept + run_lock.sweep_stale_staging():
        print(f"certify: {line}", flush=True)


COMMITTED_POLICY = "evidence/policy.json"
LOCAL_ROOT = ".lanes/local"  # git-ignored


def output_root(workspace: pathlib.Path, publish: bool) -> pathlib.Path:
    """evidence/ with --publish (maintainers commit it), else the git-ignored local root."""
    root = workspace / ("evidence" if publish else LOCAL_ROOT)
    if not publish:
        print(f"certify: writing to {root} (git-ignored); --publish writes the committed evidence/", flush=True)
    return root


def bazel_lane(alias: str) -> lane_manifest.LaneManifest:
    """The lane Bazel built for this job: its manifest in the job's runfiles (the working directory of
    `bazel run`), which //tools:certify carries for the CPU lane."""
    path = lane_manifest.runfiles_path(alias)
    if not pathlib.Path(path).is_file():
        raise MainJobError(f"no {lane_manifest.label(alias)} in this job's runfiles (it carries the CPU lane's); "
                           "pass --lane_dir and --evidence for a lane built elsewhere")
    return lane_manifest.load(path, ".")


def lane_file(given: str, alias: str, field: str) -> pathlib.Path:
    """A flag's path (--lane_dir, --evidence, --cpu_lane_dir) where given, else `field` of the lane's
    manifest (bazel_lane): the flags win, and without them nothing guesses a file name."""
    return pathlib.Path(given).resolve() if given else getattr(bazel_lane(alias), field).resolve()


def run_job(opts: JobOptions) -> int:
    workspace = pathlib.Path(opts.workspace).resolve()
    sweep_leftovers(workspace)
    spec = build_evidence.load_json(SPEC)
    lane_id, alias = resolve_lane(spec, opts.lane)
    evidence = lane_file(opts.evidence, alias, "evidence")
    root = output_root(workspace, opts.publish)
    policy_path = workspace / opts.policy if opts.policy else root / "policy.json"
    runs = workspace / opts.runs if opts.runs else root / "runs"
    records_dir = workspace / opts.records if opts.records else root / "records"
    if not opts.publish and not opts.policy and not policy_path.exists() and (workspace / COMMITTED_POLICY).exists():
        # A local run starts from the committed trust; enrolling this user's key changes only the copy.
        atomic_files.copy_file_atomic(workspace / COMMITTED_POLICY, policy_path)

    if opts.remote_run:
        # A CPU run made elsewhere names the embedded model by a path of that host: the audit finds
        # it here by its digest (op_oracle re-derives every node from the model).
        embedded = pathlib.Path(EMBEDDED_MODEL).resolve()
        if embedded.is_file():
            known = os.environ.get(op_oracle.MODELS_ENV, "")
            os.environ[op_oracle.MODELS_ENV] = os.pathsep.join(p for p in (known, str(embedded)) if p)
        staging, report = load_remote_run(pathlib.Path(opts.remote_run).resolve(), evidence, lane_id)
        try:
            print(report_lib.summary_table(report), flush=True)
            if not report.pass_recordable:
                print(f"certify: {opts.remote_run} is not recordable; nothing signed", file=sys.stderr)
                return 1
            return sign_and_show(opts, staging, report, evidence, workspace, spec, policy_path, runs, records_dir)
        finally:
            shutil.rmtree(staging.parent, ignore_errors=True)

    lane_dir = lane_file(opts.lane_dir, alias, "lane_dir")
    cpu_lane = lane_file(opts.cpu_lane_dir, "cpu", "lane_dir") if alias != "cpu" else None
    cpu_lane_evidence = lane_file(opts.cpu_lane_evidence, "cpu", "evidence") if alias != "cpu" else None
    # The run happens outside the repository; evidence/ is touched only once it is complete. The
    # dir's name carries this process's pid and start time: if we are killed, the next run removes it.
    # The run dir is a subdirectory: the staging dir's own lock file is not part of the run.
    staging_root = run_lock.make_staging_dir(f"lanes-run-{alias}-")
    staging = staging_root / "run"
    staging.mkdir()
    try:
        with run_lock.stop_run_on_signal(lambda: None):  # SIGTERM: unwind through the finally below
            return _run_and_sign(opts, staging, lane_id, alias, lane_dir, evidence, (cpu_lane, cpu_lane_evidence),
                                 workspace, spec, policy_path, runs, records_dir)
    finally:
        if not (staging_root / run_lock.KEPT_MARKER).exists():
            shutil.rmtree(staging_root, ignore_errors=True)


def resolve_model(model: str, store: str) -> tuple[pathlib.Path, str]:
    """(file the runner loads, source recorded in the report): the embedded model, or a model from the
    store (a split set is loaded by its first split; the runner digests every split)."""
    if model == EMBEDDED_MODEL:
        return pathlib.Path(model).resolve(), f"embedded://{model}"
    files = model_store.resolve(model, model_store.store_dir(store or None))
    return files[0], f"model-store:{files[0]}"


def _upstream_build(workspace: pathlib.Path, alias: str) -> pathlib.Path | None:
    """//lanes:<alias>_upstream when it was built (`bazel build //lanes:cpu_upstream`): the speed
    step then reports the lane/upstream ratio. Not a dependency of the job: it compiles for this
    host's CPU and is never cached, so it is built only on request."""
    ref = workspace / "bazel-bin" / "lanes" / f"{alias}_upstream"
    if (ref / "bin" / "llama-bench").is_file():
        print(f"certify: benching against the upstream-default build {ref}", flush=True)
        return ref
    print(f"certify: no upstream-default build (bazel build //lanes:{alias}_upstream for the lane/upstream ratio)", flush=True)
    return None


def _ctest_bundle(workspace: pathlib.Path, spec: dict, lane_id: str, alias: str, given: str) -> pathlib.Path | None:
    """The lane's llama.cpp CTest bundle for the runner's upstream_ctest step: --ctest_bundle, else
    bazel-bin/lanes/<alias>_ctest where the lane spec runs the suite in certification (built on
    request like the lane's other heavy targets; without it that step fails and says how to build it)."""
    if given:
        return pathlib.Path(given).resolve()
    if not spec["lanes"][lane_id].get("ctest", {}).get("in_certification"):
        return None
    built = workspace / "bazel-bin" / "lanes" / f"{alias}_ctest"
    return built if (built / "manifest.json").is_file() else None


def _run_and_sign(opts: JobOptions, staging, lane_id, alias, lane_dir, evidence, cpu_lane, workspace, spec,
                  policy_path, runs, records_dir) -> int:
    model, source = resolve_model(opts.model, opts.model_store)
    config = RunnerConfig(
        lane=lane_id, lane_dir=lane_dir, evidence=evidence, spec=pathlib.Path(SPEC).resolve(),
        model=model, model_source=source,
        out_dir=staging, report=staging / "runner_report.pb", cpu_lane_dir=cpu_lane[0], cpu_lane_evidence=cpu_lane[1],
        kv_types=tuple(opts.kv_types),
        roofline_model=pathlib.Path(CPU_ROOFLINE_MODEL).resolve() if alias == "cpu" else None,
        upstream_dir=_upstream_build(workspace, alias),
        ctest_bundle=_ctest_bundle(workspace, spec, lane_id, alias, opts.ctest_bundle),
        # Floors, speed-up ratios and bounds, as admission will apply them (none: not recordable).
        policy=policy_path if policy_path.exists() else None,
    )
    print(f"certify: running every check of {lane_id} on this machine (logs in {staging}/logs)", flush=True)
    report = runner.run(config)
    print(report_lib.summary_table(report), flush=True)
    code = runner.exit_code(report)
    if code != 0 or not report.pass_recordable:
        (staging.parent / run_lock.KEPT_MARKER).write_text("kept for inspection: a finished, non-recordable run\n")
        print(f"certify: the run is not recordable ({'; '.join(report.non_recordable_reasons) or 'a check failed'}); "
              f"nothing signed. Report and logs: {staging}", file=sys.stderr)
        return code or 1
    return sign_and_show(opts, staging, report, evidence, workspace, spec, policy_path, runs, records_dir)


def audit_before_signing(staging: pathlib.Path, evidence: pathlib.Path) -> None:
    """Nothing is signed that the audit cannot re-derive: every digest, figure and verdict (a run carried
    from another host included, whose files could have changed on the way)."""
    shutil.copy2(evidence, staging / "build_evidence.pb")
    if evidence.with_suffix(".json").exists():
        shutil.copy2(evidence.with_suffix(".json"), staging / "build_evidence.json")
    result = audit.audit_run(staging, require_readme=False)
    print(result.summary().splitlines()[-1], flush=True)
    if not result.ok:
        raise MainJobError(f"the run in {staging} does not audit ({len(result.findings)} finding(s): "
                           + "; ".join(str(f) for f in result.findings[:5]) + "); nothing signed")


def sign_and_show(opts: JobOptions, staging: pathlib.Path, report: runner_report_pb2.RunnerReport,
                  evidence: pathlib.Path, workspace: pathlib.Path, spec: dict, policy_path: pathlib.Path, runs: pathlib.Path,
                  records_dir: pathlib.Path) -> int:
    """Signs and verifies a recordable run, then publishes it: policy (if this key was enrolled), the
    run dir, the in-toto statement, and the record last, so a record never names a run that is not
    all there. Everything is prepared outside the repository first; each file is written atomically."""
    audit_before_signing(staging, evidence)
    key = ensure_key(pathlib.Path(opts.key).expanduser())
    pub = run_lock.make_staging_dir(f"lanes-run-{report.lane_id}.publish-")
    try:
        staged_policy = pub / "policy.json"
        if policy_path.exists():
            shutil.copy2(policy_path, staged_policy)
        policy_changed = ensure_trusted(staged_policy, key)
        staged_record = certify.certify_report(staging / "runner_report.pb", key, staged_policy, pub / "records",
                                               opts.validity_days)
        certify.verify(staged_record, staged_policy)
        statement_name = staged_record.name.replace(".record.dsse.json", ".intoto.json")
        certify.export_intoto(staged_record, staged_policy, pub / "records" / statement_name)
        # The hand-off a person reads, generated from the report and the record (never edited).
        run_readme.write_readme(staging, staged_record)
        if policy_changed:
            atomic_files.copy_file_atomic(staged_policy, policy_path)
        run_dir = publish_run(staging, runs, report, evidence)
        atomic_files.copy_file_atomic(pub / "records" / statement_name, records_dir / statement_name)
        record_path = atomic_files.copy_file_atomic(staged_record, records_dir / staged_record.name)
    finally:
        shutil.rmtree(pub, ignore_errors=True)
    record = certify.verify(record_path, policy_path)
    print(f"certify: report {run_dir.relative_to(workspace)}/runner_report.json")
    print(f"certify: record {record_path.relative_to(workspace)} verified: scope {record.scope.lane_id}, "
          f"issuer {record.issuer[:16]}..., expires {record.expires_at}")
    print()
    print(matrix_view.render(workspace, spec, build_evidence.load_json(AVAILABILITY), policy=policy_path, records=records_dir,
                             html_out=runs.parent / "matrix.html", model_lock=workspace / model_lock.LOCK_PATH))
    return 0


def main(opts: JobOptions) -> int:
    """The job's exit status: 0 signed and published, 1 not recordable, 2 cannot go on (the message
    says why), 3 a write under evidence/ failed (nothing was published partially)."""
    try:
        return run_job(opts)
    except (MainJobError, TrustError, model_store.ModelStoreError, speed_floors.PolicyFloorsError,
            lane_manifest.LaneManifestError) as err:
        print(f"certify: {err}", file=sys.stderr)
        return 2
    except atomic_files.AtomicWriteError as err:
        print(f"certify: {err}; nothing was published partially (each file under evidence/ is old or new, "
              "never half-written)", file=sys.stderr)
        return 3
