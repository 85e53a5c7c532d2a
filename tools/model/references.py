"""The one registry of independent float64 references: a GGUF's architecture -> the module that
computes it. Every module offers ARCHITECTURES, TENSOR_TYPES, load_model(path) and forward(model,
tokens); a model no module implements is refused naming its architecture and tensor types."""

from __future__ import annotations

import pathlib
from types import ModuleType

import gguf
import numpy as np

from tools.model import reference_forward, reference_gemma3
from tools.model.reference_forward import UnsupportedModelError

MODULES: tuple[ModuleType, ...] = (reference_forward, reference_gemma3)
BY_ARCHITECTURE: dict[str, ModuleType] = {arch: m for m in MODULES for arch in m.ARCHITECTURES}


def _architecture(reader: gguf.GGUFReader) -> str:
    field = reader.fields.get("general.architecture")
    return "" if field is None else str(field.contents())


def module_for(reader: gguf.GGUFReader) -> ModuleType | None:
    return BY_ARCHITECTURE.get(_architecture(reader))


def unsupported(reader: gguf.GGUFReader) -> list[str]:
    """Why no reference computes the model (empty: one does): its architecture, or the tensor
    types the architecture's reference does not read."""
    module = module_for(reader)
    if module is None:
        return reference_forward.unsupported(reader, tuple(sorted(BY_ARCHITECTURE)), reference_forward.TENSOR_TYPES)
    return reference_forward.unsupported(reader, module.ARCHITECTURES, module.TENSOR_TYPES)


def load(path: pathlib.Path) -> tuple[ModuleType, object]:
    """(module, loaded model) for a model some reference implements; refused by name otherwise."""
    reader = gguf.GGUFReader(path, "r")
    module = module_for(reader)
    reasons = unsupported(reader)
    if module is None or reasons:
        raise UnsupportedModelError(f"{path}: no float64 reference implements {'; '.join(reasons)}")
    del reader
    return module, module.load_model(path)


def forward(path: pathlib.Path, tokens: np.ndarray | list[int]) -> np.ndarray:
    """Float64 logits [n_tokens, n_vocab] of the model at `path` for `tokens` at positions 0..n-1."""
    module, model = load(path)
    return module.forward(model, tokens)
