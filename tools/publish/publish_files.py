"""What `bazel run //tools:publish` does, over files: keys from disk, records from a directory,
revocations from flags; the repository logic is in repository.py. Paths are resolved against the
directory `bazel run` was started from.
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from collections.abc import Sequence

from proto import runner_report_pb2
from tools.policy import dsse, keys, safe_io, timestamps
from tools.publish import repository, revocations
from tools.publish.distribution_errors import PublishError


def resolve(path: str) -> pathlib.Path:
    base = os.environ.get("BUILD_WORKING_DIRECTORY") or "."
    p = pathlib.Path(path).expanduser()
    return p if p.is_absolute() else pathlib.Path(base) / p


def load_keys(paths: Sequence[str]) -> list:
    return [keys.load_private_key(resolve(p)) for p in paths]


def signers(root: Sequence[str] = (), targets: Sequence[str] = (), snapshot: str = "", timestamp: str = "") -> repository.Signers:
    return repository.Signers(root=load_keys(root), targets=load_keys(targets), snapshot=load_keys([snapshot] if snapshot else []),
                              timestamp=load_keys([timestamp] if timestamp else []))


def record_inputs(record_paths: Sequence[str], records_dir: str) -> list[tuple[str, bytes]]:
    """(name, bytes) of every record file given, each read strictly (regular file, size limit)."""
    paths = [resolve(p) for p in record_paths]
    if records_dir:
        d = resolve(records_dir)
        if not d.is_dir():
            raise PublishError(f"--records_dir {d} is not a directory")
        paths += sorted(p for p in d.iterdir() if p.name.endswith(".dsse.json"))
    if not paths:
        raise PublishError("nothing to publish: give --record=<file> or --records_dir=<dir>")
    return [(p.name, safe_io.read_regular_file(p)) for p in paths]


def revocation_from_flags(*, reason: str, record_digest: str = "", record_file: str = "", lane_id: str = "",
                          device_fields: dict[str, str] | None = None, issuer_public_key: str = "",
                          effective_from: str = "", now: dt.datetime | None = None):
    """A Revocation from the revoke flags; exactly one kind (validate() refuses anything else)."""
    now = now or timestamps.now()
    if record_file:
        if record_digest:
            raise PublishError("give --record_digest or --record, not both")
        record_digest = revocations.record_digest_of_file(safe_io.read_regular_file(resolve(record_file)))
    device = {k: v for k, v in (device_fields or {}).items() if v}
    dc = runner_report_pb2.DeviceClass(**device) if device else None
    raw = (keys.public_key_from_bytes(safe_io.read_regular_file(resolve(issuer_public_key)), issuer_public_key)
           if issuer_public_key else None)
    return revocations.make(
        reason=reason, now=now, record_digest=record_digest, lane_id=lane_id, device_class=dc,
        issuer_public_key=dsse.raw_public_key(raw) if raw else b"",
        effective_from=timestamps.parse_utc(effective_from, "--effective_from") if effective_from else None)
