"""The model under test: present, a parseable GGUF, and its digest for the report."""

from __future__ import annotations

import dataclasses
import pathlib

from tools.core.digest import sha256_file

GGUF_MAGIC = b"GGUF"


class ModelError(Exception):
    """The model file is missing or not a valid GGUF."""


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    path: pathlib.Path
    name: str
    architecture: str
    sha256: str
    size: int
    n_tensors: int
    # Why the CPU lane's independent oracles cannot check this model (empty: they can): the float64
    # references of reference_parity and op_oracle.
    oracle_gaps: tuple[str, ...] = ()


def _field_str(reader, key: str) -> str:
    field = reader.fields.get(key)
    if field is None:
        return ""
    try:
        return str(field.contents())
    except Exception:  # older gguf-py lack contents(); the name is informational
        return ""


def inspect_model(path: pathlib.Path | None) -> ModelInfo:
    if path is None:
        raise ModelError("no model given: pass --model=<file.gguf> (the main job passes the embedded tiny model)")
    path = pathlib.Path(path)
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelError(f"model file {path} is not a GGUF (magic {magic!r}, expected b'GGUF')")
    import gguf  # heavy import, only when a model is really inspected

    try:
        reader = gguf.GGUFReader(path, "r")
        n_tensors = len(reader.tensors)
    except Exception as err:  # gguf raises ValueError, struct.error, IndexError... on corrupt files
        raise ModelError(f"model file {path} is a corrupt GGUF: {type(err).__name__}: {err}") from err
    arch = _field_str(reader, "general.architecture")
    name = _field_str(reader, "general.name") or path.stem
    # imports gguf and numpy, as above
    from tools.model import references

    # op_oracle follows the same architectures (node by node, or from the lane's own inputs). A
    # vocabulary the runner cannot tokenize fails reference_parity and op_oracle by name.
    gaps = tuple(f"float64 reference (reference_parity, op_oracle): {g}" for g in references.unsupported(reader))
    return ModelInfo(path, name, arch, sha256_file(path), path.stat().st_size, n_tensors, gaps)
