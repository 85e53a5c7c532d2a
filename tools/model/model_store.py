"""Resolving a user's model (`--model=`) from the configured model store, identified by every file.

The store is a directory given by flag or by LANES_MODEL_STORE. A model is named relative to it (or
by an absolute path inside it); anything resolving outside the store, or anywhere under /home
(operators require that production models never come from home directories; symlinks are
resolved first, so a link into /home is refused too) is a ModelStoreError.

A GGUF model in splits (`name-00001-of-00003.gguf`, ...) is one model: naming any split selects the
set, every split must be present, and the model is identified by each split's sha256 and size in
split order (runner_report.Model.shards; Model.sha256 is the first split's).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import stat

from proto import runner_report_pb2
from tools.core.errors import LanesError

ENV_VAR = "LANES_MODEL_STORE"
FORBIDDEN_ROOTS = (pathlib.Path("/home"),)

class ModelStoreError(LanesError):
    """A --model cannot be taken from the model store: no store configured, a path outside it or under
    /home, a missing GGUF split, or an unreadable file. Defined here, not in tools/certify: the model
    stage comes before certification and imports nothing from it."""

    code = "model-store"

    code = "model-store"


_SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<index>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf$")


def _under(path: pathlib.Path, root: pathlib.Path) -> bool:
    return path == root or root in path.parents


def _refuse_forbidden(path: pathlib.Path, what: str) -> None:
    for root in FORBIDDEN_ROOTS:
        if _under(path, root):
            raise ModelStoreError(f"{what} {path} is under {root}; models must come from the model store, "
                                  f"never from {root} (move the model into the store)")


def store_dir(flag_value: str | None = None) -> pathlib.Path:
    """The model store: `flag_value`, else $LANES_MODEL_STORE; an existing directory not under /home."""
    raw = flag_value or os.environ.get(ENV_VAR, "")
    if not raw:
        raise ModelStoreError(f"no model store configured; pass --model_store=DIR or set {ENV_VAR}")
    given = pathlib.Path(raw).absolute()
    _refuse_forbidden(given, "model store")
    resolved = given.resolve()
    _refuse_forbidden(resolved, "model store (resolved)")
    if not resolved.is_dir():
        raise ModelStoreError(f"model store {given} is not a directory")
    return resolved


def split_set(path: pathlib.Path) -> list[pathlib.Path]:
    """Every file of the model at `path` in split order: [path] for a single GGUF."""
    m = _SPLIT_RE.match(path.name)
    if not m:
        return [path]
    index, count = int(m["index"]), int(m["count"])
    if count < 1 or not 1 <= index <= count:
        raise ModelStoreError(f"{path.name}: split {index} of {count} is not a valid GGUF split name")
    parts = [path.with_name(f"{m['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [p.name for p in parts if not p.exists()]
    if missing:
        raise ModelStoreError(f"{path.name}: GGUF split set incomplete, missing {', '.join(missing[:5])}"
                              f"{' ...' if len(missing) > 5 else ''}; every split must be in the store")
    return parts


def resolve(model: str, store: pathlib.Path) -> list[pathlib.Path]:
    """The model's files (resolved paths inside `store`), refusing anything outside it or under /home."""
    if not model:
        raise ModelStoreError("--model is empty")
    given = pathlib.Path(model)
    given = given if given.is_absolute() else store / given
    _refuse_forbidden(given.absolute(), "model")
    files = []
    for part in split_set(given):
        resolved = part.resolve()
        _refuse_forbidden(resolved, "model (resolved)")
        if not _under(resolved, store.resolve()):
            raise ModelStoreError(f"model file {part} resolves to {resolved}, outside the model store {store}")
        try:
            st = os.stat(resolved)
        except OSError as err:
            raise ModelStoreError(f"model file {part}: {err.strerror}") from err
        if not stat.S_ISREG(st.st_mode):
            raise ModelStoreError(f"model file {part} is not a regular file")
        files.append(resolved)
    return files


def _hash_file(path: pathlib.Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                size += len(chunk)
    except OSError as err:
        raise ModelStoreError(f"cannot read model file {path}: {err.strerror}") from err
    return h.hexdigest(), size


def shards(files: list[pathlib.Path]) -> list[runner_report_pb2.ModelShard]:
    out = []
    for path in files:
        digest, size = _hash_file(path)
        out.append(runner_report_pb2.ModelShard(name=path.name, sha256=digest, size=size))
    return out


def model_from_store(model: str, store: str | pathlib.Path | None = None, name: str = "") -> runner_report_pb2.Model:
    """The runner_report.Model for `model` in the store (flag value, else $LANES_MODEL_STORE)."""
    root = store_dir(str(store) if store else None)
    files = resolve(model, root)
    parts = shards(files)
    first = _SPLIT_RE.match(files[0].name)
    return runner_report_pb2.Model(
        name=name or (first["stem"] if first else files[0].stem),
        sha256=parts[0].sha256,
        size=sum(p.size for p in parts),  # of the whole set
        source=str(files[0]),
        shards=parts,
    )
