"""A lane's manifest (//lanes:<alias>.lane.json, lanes/private/manifest.bzl), read for tools outside Bazel's graph.

The manifest names where a lane's files are, from its LaneInfo: the lane directory and its build
evidence, as runfiles paths. Inside runfiles they resolve against the runfiles root; outside, against
bazel-bin. Building the manifest does not build the lane, so load() never requires the files it names
to exist: the consumer checks what it reads.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

from tools.core.errors import LanesError

SCHEMA_VERSION = 1
MAX_BYTES = 64 * 1024  # a manifest is a few hundred bytes; anything near this is not one
KEYS = frozenset({"alias", "lane_id", "lane_dir", "evidence", "evidence_json", "schema_version"})
_PATH_KEYS = ("lane_dir", "evidence", "evidence_json")
_PACKAGE = "lanes"  # the package that declares every lane's manifest (lanes/BUILD.bazel)


class LaneManifestError(LanesError):
    """A lane manifest is missing, too large, not JSON, of an unknown schema, or not of the expected shape."""

    code = "lane-manifest"


@dataclasses.dataclass(frozen=True)
class LaneManifest:
    """A lane's manifest with its paths made absolute against the root it was loaded with."""

    path: pathlib.Path  # the manifest file itself
    alias: str
    lane_id: str
    lane_dir: pathlib.Path
    evidence: pathlib.Path
    evidence_json: pathlib.Path


def label(alias: str) -> str:
    return f"//{_PACKAGE}:{alias}.lane.json"


def runfiles_path(alias: str) -> str:
    """The manifest target's own path below a runfiles root or bazel-bin: lanes/<alias>.lane.json."""
    return f"{_PACKAGE}/{alias}.lane.json"


def load(path: str | os.PathLike, root: str | os.PathLike) -> LaneManifest:
    """Reads one manifest; `path` is the file (relative paths are below `root`) and `root` is what its
    runfiles paths resolve against (the runfiles root, or bazel-bin). Raises LaneManifestError."""
    root = pathlib.Path(os.path.abspath(root))
    path = root / path
    target = f"//{_PACKAGE}:{path.name}"
    if not path.is_file():
        raise LaneManifestError(f"{path}: no lane manifest there; build {target} first")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as err:
        raise LaneManifestError(f"{path}: cannot read the lane manifest ({err.strerror}); rebuild {target}") from err
    if len(raw) > MAX_BYTES:
        raise LaneManifestError(f"{path}: over {MAX_BYTES} bytes, not a lane manifest; rebuild {target}")
    try:
        data: Any = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise LaneManifestError(f"{path}: not JSON ({err}); rebuild {target}") from err
    if not isinstance(data, dict):
        raise LaneManifestError(f"{path}: not a JSON object; rebuild {target}")
    version = data.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise LaneManifestError(f"{path}: schema_version {version!r} is not one this reader knows ({SCHEMA_VERSION}); "
                                f"rebuild {target} from this checkout, or update tools/evidence/lane_manifest.py")
    missing, extra = sorted(KEYS - data.keys()), sorted(data.keys() - KEYS)
    if missing or extra:
        said = "; ".join(part for part in (missing and f"missing {', '.join(missing)}",
                                           extra and f"unexpected {', '.join(extra)}") if part)
        raise LaneManifestError(f"{path}: not a schema_version {SCHEMA_VERSION} lane manifest ({said}); rebuild {target}")
    for key in sorted(KEYS - {"schema_version"}):
        if not isinstance(data[key], str) or not data[key]:
            raise LaneManifestError(f"{path}: {key} is {data[key]!r}, not a non-empty string; rebuild {target}")
    for key in _PATH_KEYS:
        rel = pathlib.PurePosixPath(data[key])
        if rel.is_absolute() or ".." in rel.parts:
            raise LaneManifestError(f"{path}: {key} {data[key]!r} is not a runfiles path (relative, without ..); "
                                    f"rebuild {target}")
    return LaneManifest(path=path, alias=data["alias"], lane_id=data["lane_id"],
                        **{key: root / data[key] for key in _PATH_KEYS})


def load_built(alias: str, bazel_bin: str | os.PathLike = "bazel-bin") -> LaneManifest:
    """The manifest `bazel build //lanes:<alias>.lane.json` left in bazel-bin, its paths below bazel-bin."""
    return load(runfiles_path(alias), bazel_bin)


def encode(alias: str, lane_id: str, lane_dir: str, evidence: str, evidence_json: str) -> str:
    """A manifest's text as manifest.bzl writes it (runfiles paths), for tests and stand-in lanes."""
    return json.dumps({"alias": alias, "evidence": evidence, "evidence_json": evidence_json, "lane_dir": lane_dir,
                       "lane_id": lane_id, "schema_version": SCHEMA_VERSION}, indent=2) + "\n"
