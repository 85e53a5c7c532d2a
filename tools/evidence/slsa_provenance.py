"""A lane build's BuildEvidence as SLSA Provenance v1 in an in-toto Statement v1.

Subjects are the lane's artifacts by sha256. buildDefinition: the build type (a Bazel cmake() lane
build of the pinned llama.cpp tree), the external parameters an operator chose (the lane and the
-D entries of each cmake() stage), and the resolved dependencies (the upstream archive, each patch,
the SDK's archives). runDetails: the builder (Bazel with its version) and the build's start and end.
Built and validated with in-toto-attestation's Provenance and Statement protos; nothing here reads a
lane's output, only the evidence Bazel wrote.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement

from proto import build_evidence_pb2

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://lanes.dev/build/bazel-cmake-lane/v1"
BUILDER_ID = "https://lanes.dev/builder/bazel"


def _hex(digest: str) -> str:
    return digest.split(":", 1)[1] if ":" in digest else digest


def _timestamp(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def statement(ev: build_evidence_pb2.BuildEvidence) -> dict[str, Any]:
    if ev.status != build_evidence_pb2.BuildEvidence.BUILT or not ev.artifacts:
        raise ValueError(f"lane {ev.lane_id}: build evidence of status "
                         f"{build_evidence_pb2.BuildEvidence.Status.Name(ev.status)} with {len(ev.artifacts)} artifacts: "
                         "only a build that produced artifacts has provenance")
    subjects = [ResourceDescriptor(name=a.path, digest={"sha256": _hex(a.sha256)}).pb for a in ev.artifacts]
    deps = [ResourceDescriptor(name=ev.upstream.source_uri or "llama.cpp", uri=ev.upstream.source_uri,
                               digest={"sha256": _hex(ev.upstream.archive_sha256), "gitCommit": ev.upstream.commit}).pb]
    deps += [ResourceDescriptor(name=f"patch:{p.name}", digest={"sha256": _hex(p.sha256)}).pb for p in ev.patches]
    deps += [ResourceDescriptor(name=f"sdk:{ev.sdk.name}:{a.path}", digest={"sha256": _hex(a.sha256)}).pb
             for a in ev.sdk.archives]
    provenance = provenance_pb2.Provenance()
    bd = provenance.build_definition
    bd.build_type = BUILD_TYPE
    json_format.ParseDict({
        "lane_id": ev.lane_id, "targets": list(ev.targets),
        "cmake_stages": {s.name: dict(sorted(s.cache_entries.items())) for s in ev.stages},
    }, bd.external_parameters)
    json_format.ParseDict({"patch_stack_digest": ev.patch_stack_digest, "sdk_mode": ev.sdk.mode,
                           "compilers": [f"{c.language} {c.id} {c.version}" for c in ev.compilers]},
                          bd.internal_parameters)
    bd.resolved_dependencies.extend(deps)
    rd = provenance.run_details
    rd.builder.id = BUILDER_ID
    rd.builder.version["bazel"] = ev.bazel_version or "unknown"
    if ev.started_unix:
        rd.metadata.started_on.FromJsonString(_timestamp(ev.started_unix))
    if ev.finished_unix:
        rd.metadata.finished_on.FromJsonString(_timestamp(ev.finished_unix))
    predicate = json_format.MessageToDict(provenance)
    st = Statement(subjects, PREDICATE_TYPE, predicate)
    st.validate()
    return json_format.MessageToDict(st.pb)


def statement_json(ev: build_evidence_pb2.BuildEvidence) -> str:
    return json.dumps(statement(ev), sort_keys=True, indent=2) + "\n"
