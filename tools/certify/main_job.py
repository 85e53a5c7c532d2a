"""The main job: `bazel run //tools:certify -- --lane=cpu`.

Bazel has built the lane and the embedded model (they are this binary's data). This runs every
runner check on this machine, keeps the report and raw logs under evidence/runs/, signs a
passing, recordable report into evidence/records/ with a key kept outside the repository,
verifies the record under the committed policy, and prints the capability matrix.
"""

from __future__ import annotations

import datetime as dt
import getpass
import os
import pathlib
import shutil
import socket
import sys
import tempfile

from absl import app, flags

from proto import runner_report_pb2
from tools.admission import policy as policy_lib
from tools.admission import policy_tool
from tools.certify import certify_cli, dsse, keys, records
from tools.certify.errors import CertifyError
from tools.evidence import build_evidence
from tools.matrix import matrix_view
from tools.runner import report as report_lib
from tools.runner import runner, speed_floors
from tools.runner.config import CHECKS, RunnerConfig

FLAGS = flags.FLAGS
flags.DEFINE_string("lane", "cpu", "Lane alias or id.")
flags.DEFINE_string("lane_dir", "", "Lane directory (bin/, lib/); default: the lane Bazel built for this job.")
flags.DEFINE_string("evidence", "", "The lane's <alias>.evidence.pb; default: beside the Bazel-built lane.")
flags.DEFINE_string("cpu_lane_dir", "", "CPU lane for accelerator parity and speed-up; default: the Bazel-built one.")
flags.DEFINE_string("model", "tools/model/tiny_llama_f32.gguf", "GGUF to run (default: the embedded model).")
flags.DEFINE_string("workspace", os.environ.get("BUILD_WORKSPACE_DIRECTORY", "."), "Workspace holding evidence/.")
flags.DEFINE_string("policy", "evidence/policy.json", "Admission policy (workspace-relative).")
flags.DEFINE_string("records", "evidence/records", "Where signed records go (workspace-relative).")
flags.DEFINE_string("runs", "evidence/runs", "Where reports and raw logs go (workspace-relative).")
flags.DEFINE_string("key", str(keys.default_key_dir() / "lanes-issuer.key"), "Ed25519 signing key (made if absent; never in a repo).")
flags.DEFINE_integer("validity_days", 90, "Lifetime of the certification record.")
flags.DEFINE_list("kv_types", ["f16", "q8_0", "q4_0"], "KV cache types exercised (K and V).")
flags.DEFINE_string("remote_run", "", "Sign a run made on another host (tools/device/certify_remote_cuda.sh): its run/ "
                    "directory (runner_report.pb + logs/). --evidence must be the build evidence that was carried there.")

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


def ensure_trusted(policy_path: pathlib.Path, key_path: pathlib.Path) -> None:
    """Enrols this machine's public key in the policy if it is not there (a reviewable diff)."""
    pub = key_path.with_suffix(".pub")
    raw = pub.read_bytes()
    keyid = dsse.keyid_for(dsse.raw_public_key(keys.public_key_from_bytes(raw)))
    if policy_path.exists() and any(k.keyid == keyid for k in policy_lib.load_policy(policy_path).trusted_keys):
        return
    policy_tool.update_policy_file(
        policy_path,
        policy_id="lanes-default",
        public_key=raw,
        owner=f"{getpass.getuser()}@{socket.gethostname()}",
        valid_days=365,
        required_checks=None if policy_path.exists() else list(CHECKS),
        max_record_age_days=None if policy_path.exists() else 90,
        supported_record_schema_versions=None if policy_path.exists() else [1],
    )
    print(f"certify: enrolled key {keyid[:16]}... in {policy_path}; review and commit it to trust this issuer")


def publish_run(staging: pathlib.Path, runs: pathlib.Path, report: runner_report_pb2.RunnerReport,
                evidence: pathlib.Path) -> pathlib.Path:
    """Moves a finished run to evidence/runs/<lane>.<device class>/, with the build evidence it names."""
    final = runs / f"{report.lane_id}.{records.device_class_slug(report.device_class)}"
    shutil.copy2(evidence, staging / "build_evidence.pb")
    json_twin = evidence.with_suffix(".json")
    if json_twin.exists():
        shutil.copy2(json_twin, staging / "build_evidence.json")
    if final.exists():
        shutil.rmtree(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(staging), final)
    return final


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
    staging = pathlib.Path(tempfile.mkdtemp(prefix="lanes-remote-run-")) / "run"
    shutil.copytree(run_dir, staging)
    return staging, report


def run_job() -> int:
    workspace = pathlib.Path(FLAGS.workspace).resolve()
    spec = build_evidence.load_json(SPEC)
    lane_id, alias = resolve_lane(spec, FLAGS.lane)
    lane_dir = pathlib.Path(FLAGS.lane_dir or f"lanes/{alias}").resolve()
    evidence = pathlib.Path(FLAGS.evidence or f"lanes/{alias}.evidence.pb").resolve()
    cpu_lane = pathlib.Path(FLAGS.cpu_lane_dir or "lanes/cpu").resolve()
    policy_path, runs, records_dir = workspace / FLAGS.policy, workspace / FLAGS.runs, workspace / FLAGS.records
    floor_tg, floor_pp = speed_floors.floors_for_lane(policy_path, lane_id) if policy_path.exists() else (0.0, 0.0)

    if FLAGS.remote_run:
        staging, report = load_remote_run(pathlib.Path(FLAGS.remote_run).resolve(), evidence, lane_id)
        print(report_lib.summary_table(report), flush=True)
        if not report.pass_recordable:
            print(f"certify: {FLAGS.remote_run} is not recordable; nothing signed", file=sys.stderr)
            return 1
        return sign_and_show(staging, report, evidence, workspace, spec, policy_path, runs, records_dir)

    staging = pathlib.Path(tempfile.mkdtemp(prefix=f"lanes-run-{alias}-"))
    config = RunnerConfig(
        lane=lane_id, lane_dir=lane_dir, evidence=evidence, spec=pathlib.Path(SPEC).resolve(),
        model=pathlib.Path(FLAGS.model).resolve(), model_source=f"embedded://{FLAGS.model}" if FLAGS.model.startswith("tools/model/") else FLAGS.model,
        out_dir=staging, report=staging / "runner_report.pb", cpu_lane_dir=cpu_lane if alias != "cpu" else None,
        kv_types=tuple(FLAGS.kv_types), speed_floor_tg=floor_tg, speed_floor_pp=floor_pp,
    )
    print(f"certify: running every check of {lane_id} on this machine (logs in {staging}/logs)", flush=True)
    report = runner.run(config)
    print(report_lib.summary_table(report), flush=True)
    code = runner.exit_code(report)
    if code != 0 or not report.pass_recordable:
        print(f"certify: the run is not recordable ({'; '.join(report.non_recordable_reasons) or 'a check failed'}); "
              f"nothing signed. Report and logs: {staging}", file=sys.stderr)
        return code or 1
    return sign_and_show(staging, report, evidence, workspace, spec, policy_path, runs, records_dir)


def sign_and_show(staging: pathlib.Path, report: runner_report_pb2.RunnerReport, evidence: pathlib.Path,
                  workspace: pathlib.Path, spec: dict, policy_path: pathlib.Path, runs: pathlib.Path,
                  records_dir: pathlib.Path) -> int:
    """Publishes a recordable run under evidence/runs, signs and verifies its record, prints the matrix."""
    run_dir = publish_run(staging, runs, report, evidence)
    key = ensure_key(pathlib.Path(FLAGS.key).expanduser())
    ensure_trusted(policy_path, key)
    record_path = certify_cli.certify_report(run_dir / "runner_report.pb", key, policy_path, records_dir, FLAGS.validity_days)
    record = certify_cli.verify(record_path, policy_path)
    certify_cli.export_intoto(record_path, policy_path, record_path.with_name(record_path.name.replace(".record.dsse.json", ".intoto.json")))
    print(f"certify: report {run_dir.relative_to(workspace)}/runner_report.json")
    print(f"certify: record {record_path.relative_to(workspace)} verified: scope {record.scope.lane_id}, "
          f"issuer {record.issuer[:16]}..., expires {record.expires_at}")
    print()
    print(matrix_view.render(workspace, spec, build_evidence.load_json(AVAILABILITY), policy=policy_path, records=records_dir,
                             html_out=workspace / "evidence" / "matrix.html"))
    return 0


def main(argv: list[str]) -> int:
    del argv
    try:
        return run_job()
    except (MainJobError, CertifyError) as err:
        print(f"certify: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    app.run(main)
