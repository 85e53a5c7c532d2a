"""Build evidence: make it from a lane build, write it, read it back and verify artifacts against it."""

from __future__ import annotations

import json
import os
import pathlib
import platform
import re
import shutil
from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format

from proto import build_evidence_pb2 as pb
from tools.core.digest import sha256_file
from tools.core.errors import LanesError

SCHEMA_VERSION = 1


class EvidenceError(LanesError):
    """Evidence is missing, unreadable, of an unknown schema, or does not match the artifacts."""

    code = "build-evidence"


def host_facts() -> pb.Host:
    uname = platform.uname()
    return pb.Host(os=uname.system.lower(), arch=uname.machine, kernel=uname.release)


_EXEC_ROOT = re.compile(r"/[^\s;:=]*?/execroot/[^/]+/")


def exec_root_relative(path: str) -> str:
    """A path inside the action's (sandboxed) exec root, as $EXT_BUILD_ROOT/...: stable across builds."""
    return _EXEC_ROOT.sub("$EXT_BUILD_ROOT/", path)


def stage_from_meta(meta: dict[str, Any]) -> pb.CMakeStage:
    stage = pb.CMakeStage(
        name=meta["name"],
        targets=meta.get("targets", []),
        cmake_version=meta.get("cmake_version", ""),
        ninja_version=meta.get("ninja_version", ""),
        jobs=meta.get("jobs", 0),
    )
    stage.cache_entries.update(meta["cache_entries"])
    for cmd in meta.get("commands", []):
        stage.commands.add(step=cmd["step"], argv=[exec_root_relative(a) for a in cmd["argv"]],
                           seconds=cmd["seconds"], exit_code=cmd["exit_code"])
    return stage


def stage_metas(stage_logs: Iterable[str]) -> list[dict[str, Any]]:
    """One entry per cmake() stage, from the files of its CMake_logs output group.

    The offline stand-in writes meta.json (command lines, compilers, timings). The real
    rules_foreign_cc writes only plain logs in <name>_foreign_cc/; such a stage is recorded by name
    with nothing else, so the evidence says less (no compilers or command lines) but never more.
    """
    by_stage: dict[str, list[pathlib.Path]] = {}
    for p in map(pathlib.Path, stage_logs):
        by_stage.setdefault(p.parent.name.removesuffix("_foreign_cc"), []).append(p)
    if not by_stage:
        raise ValueError("no cmake() stage logs given (the stages' CMake_logs output groups are empty)")
    metas = []
    for name, files in sorted(by_stage.items()):
        meta = [f for f in files if f.name == "meta.json"]
        metas.append(load_json(meta[0]) if meta else
                     {"name": name, "cache_entries": {}, "started": 0.0, "finished": 0.0, "commands": [], "compilers": {}})
    return metas


def compilers_from_meta(metas: Iterable[dict[str, Any]]) -> list[pb.Compiler]:
    seen: dict[tuple[str, str, str], pb.Compiler] = {}
    for meta in metas:
        for lang, fields in sorted(meta.get("compilers", {}).items()):
            key = (lang, fields.get("compiler_id", ""), fields.get("compiler_version", ""))
            seen.setdefault(key, pb.Compiler(language=lang, id=key[1], version=key[2],
                                             path=exec_root_relative(fields.get("compiler", ""))))
    return list(seen.values())


def artifact(lane_dir: pathlib.Path, path: pathlib.Path) -> pb.Artifact:
    return pb.Artifact(path=str(path.relative_to(lane_dir)), sha256=sha256_file(path), size=path.stat().st_size)


def make_evidence(
    *,
    lane_id: str,
    lane_dir: pathlib.Path,
    pin: dict[str, Any],
    sdk: dict[str, Any],
    stage_metas: list[dict[str, Any]],
    targets: list[str],
    bazel_version: str,
) -> pb.BuildEvidence:
    """Evidence for a lane whose artifacts are already under lane_dir (bin/, lib/)."""
    ev = pb.BuildEvidence(
        schema_version=SCHEMA_VERSION,
        lane_id=lane_id,
        status=pb.BuildEvidence.BUILT,
        upstream=pb.Upstream(
            source_uri=pin["source_uri"],
            archive_sha256=pin["archive_sha256"],
            commit=pin["commit"],
            strip_prefix=pin.get("strip_prefix", ""),
        ),
        patch_stack_digest=pin["patch_stack_digest"],
        targets=targets,
        host=host_facts(),
        bazel_version=bazel_version,
        started_unix=min(m["started"] for m in stage_metas),
        finished_unix=max(m["finished"] for m in stage_metas),
    )
    for p in pin["patches"]:
        ev.patches.add(name=p["name"], sha256=p["sha256"])
    ev.sdk.name = sdk.get("name", "")
    ev.sdk.version = sdk.get("version", "")
    ev.sdk.path = sdk.get("path", "")
    ev.sdk.mode = sdk.get("mode", "local")
    for key, value in sorted(sdk.items()):
        if key not in {"name", "version", "path", "mode", "status", "reason"} and isinstance(value, str):
            ev.sdk.details[key] = value
    # Downloaded SDK parts (e.g. the CUDA wheels), each by exact version and sha256.
    for archive in sdk.get("archives", []):
        ev.sdk.archives.add(path=f"{archive['name']}=={archive['version']}", sha256=archive["sha256"])
    ev.compilers.extend(compilers_from_meta(stage_metas))
    ev.stages.extend(stage_from_meta(m) for m in stage_metas)
    files = sorted(p for p in lane_dir.rglob("*") if p.is_file())
    ev.artifacts.extend(artifact(lane_dir, p) for p in files)
    return ev


def write_evidence(ev: pb.BuildEvidence, out_pb: pathlib.Path, out_json: pathlib.Path) -> None:
    out_pb.write_bytes(ev.SerializeToString(deterministic=True))
    out_json.write_text(json_format.MessageToJson(ev, sort_keys=True) + "\n")


def read_evidence(path: pathlib.Path) -> pb.BuildEvidence:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise EvidenceError(f"{path}: cannot read build evidence ({err.strerror}); build the lane first") from err
    ev = pb.BuildEvidence()
    try:
        ev.ParseFromString(data)
    except Exception as err:  # protobuf raises DecodeError, a bare Exception subclass
        raise EvidenceError(f"{path}: not a BuildEvidence protobuf ({err}); rebuild the lane") from err
    if ev.schema_version != SCHEMA_VERSION:
        raise EvidenceError(f"{path}: schema_version {ev.schema_version}, this tool reads {SCHEMA_VERSION}")
    return ev


def evidence_digest(path: pathlib.Path) -> str:
    return "sha256:" + sha256_file(path)


def verify_artifacts(ev: pb.BuildEvidence, lane_dir: pathlib.Path) -> list[str]:
    """Problems found re-hashing every artifact the evidence lists; empty when all match."""
    problems = []
    if not ev.artifacts:
        problems.append("the evidence lists no artifacts")
    for a in ev.artifacts:
        path = lane_dir / a.path
        if not path.is_file():
            problems.append(f"{a.path}: missing")
            continue
        got = sha256_file(path)
        if got != a.sha256:
            problems.append(f"{a.path}: sha256 {got[:12]}.. != evidence {a.sha256[:12]}..")
    return problems


def copy_into(lane_dir: pathlib.Path, sub: str, files: Iterable[str]) -> None:
    dest = lane_dir / sub
    dest.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy2(f, dest / os.path.basename(f))


def load_json(path: str | os.PathLike) -> Any:
    with open(path) as f:
        return json.load(f)
