"""The one way the runner tokenizes a prompt independently of the lane: the tokenizer the GGUF's
`tokenizer.ggml.model` names (SentencePiece "llama" or byte-level BPE "gpt2"); any other is
refused by name."""

from __future__ import annotations

import pathlib
from typing import Protocol

import gguf

from tools.model import bpe_tokenizer, spm_tokenizer
from tools.model.spm_tokenizer import TokenizerError

__all__ = ["TokenizerError", "from_gguf"]


class Tokenizer(Protocol):
    def encode(self, text: str, add_special: bool = True) -> list[int]: ...


def from_gguf(path: pathlib.Path) -> Tokenizer:
    try:
        reader = gguf.GGUFReader(path, "r")
    except (OSError, ValueError) as err:
        raise TokenizerError(f"{path}: not a readable GGUF ({err})") from err
    field = reader.fields.get("tokenizer.ggml.model")
    model = None if field is None else field.contents()
    if model == "llama":
        return spm_tokenizer.from_gguf(path)
    if model == "gpt2":
        return bpe_tokenizer.from_reader(reader, path)
    raise TokenizerError(f"{path}: tokenizer.ggml.model {model!r} is not implemented (implemented: llama, gpt2)")
