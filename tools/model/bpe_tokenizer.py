"""A prompt's token ids from the GGUF's own byte-level BPE vocabulary, independently of the lane.

Byte-level BPE as GPT-2 defines it (and as the models' own tokenizer.json files state it), not read
from llama.cpp: the text is split by the pre-tokenizer's regular expressions (the one of the
vocabulary's `tokenizer.ggml.pre`, from the model's tokenizer.json, with `regex` for \\p{L}/\\p{N});
each piece's UTF-8 bytes are mapped to GPT-2's printable byte alphabet; adjacent symbols are merged
by rank (`tokenizer.ggml.merges`, lowest rank first, leftmost on a tie) until no ranked pair is left;
every resulting symbol is a vocabulary token. BOS first when the vocabulary adds it. A pre-tokenizer
this module does not know is refused by name, never approximated with another's expression.
Prompts with special-token text are not handled: the prompt sets have none.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import gguf
import regex

from tools.model.spm_tokenizer import TokenizerError

# tokenizer.ggml.pre -> the pre-tokenizer's expressions, applied in turn (each splits the pieces the
# previous one produced). From the models' tokenizer.json (HF tokenizers' Split / ByteLevel / Digits).
_GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
_LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


@dataclasses.dataclass(frozen=True)
class PreTokenizer:
    expressions: tuple[str, ...]
    # A piece that is itself a vocabulary token is emitted whole (tokenizer.json "ignore_merges").
    ignore_merges: bool = False
    add_bos_default: bool = False  # when the GGUF has no tokenizer.ggml.add_bos_token


PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "gpt-2": PreTokenizer((_GPT2,)),
    # SmolLM: every digit is its own piece (Digits(individual_digits)), then GPT-2's ByteLevel split.
    "smollm": PreTokenizer((r"\p{N}", _GPT2)),
    "qwen2": PreTokenizer((_QWEN2,)),
    "llama-bpe": PreTokenizer((_LLAMA3,), ignore_merges=True, add_bos_default=True),
}


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the rest to U+0100 on."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_BYTES = _byte_alphabet()


def split(text: str, expressions: tuple[str, ...]) -> list[str]:
    """The pre-tokenizer's pieces: each expression's matches and the text between them (kept
    as pieces, as HF's Split with behavior=isolated does), applied to every piece in turn."""
    pieces = [text]
    for expression in expressions:
        pattern = regex.compile(expression)
        out: list[str] = []
        for piece in pieces:
            at = 0
            for m in pattern.finditer(piece):
                if m.start() > at:
                    out.append(piece[at:m.start()])
                if m.end() > m.start():
                    out.append(m.group())
                at = m.end()
            if at < len(piece):
                out.append(piece[at:])
        pieces = out
    return pieces


class BpeTokenizer:
    def __init__(self, tokens: list[str], merges: list[str], pre: str, bos_id: int | None,
                 add_bos: bool | None) -> None:
        if pre not in PRE_TOKENIZERS:
            raise TokenizerError(f"BPE pre-tokenizer {pre!r} is not implemented "
                                 f"(implemented: {', '.join(sorted(PRE_TOKENIZERS))})")
        self.ids: dict[str, int] = {}
        for i, tok in enumerate(tokens):
            if tok in self.ids:
                raise TokenizerError(f"vocabulary token {tok!r} appears twice (ids {self.ids[tok]} and {i})")
            self.ids[tok] = i
        self.ranks: dict[tuple[str, str], int] = {}
        for rank, line in enumerate(merges):
            left, sep, right = line.partition(" ")
            if not sep:
                raise TokenizerError(f"merge {rank} ({line!r}) is not two symbols")
            self.ranks.setdefault((left, right), rank)
        self.pre = PRE_TOKENIZERS[pre]
        self.bos_id = bos_id
        self.add_bos = self.pre.add_bos_default if add_bos is None else add_bos

    def _merge(self, piece: str) -> list[str]:
        mapped = "".join(_BYTES[b] for b in piece.encode("utf-8"))
        if self.pre.ignore_merges and mapped in self.ids:
            return [mapped]
        symbols = list(mapped)
        while len(symbols) > 1:
            ranked = [(self.ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:]))]
            ranked = [(r, i) for r, i in ranked if r is not None]
            if not ranked:
                break
            best = min(ranked)[0]
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and self.ranks.get((symbols[i], symbols[i + 1])) == best:
                    out.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            symbols = out
        return symbols

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        ids: list[int] = []
        if add_special and self.add_bos:
            if self.bos_id is None:
                raise TokenizerError("the vocabulary adds BOS but names no BOS token")
            ids.append(self.bos_id)
        for piece in split(text, self.pre.expressions):
            for symbol in self._merge(piece):
                if symbol not in self.ids:
                    raise TokenizerError(f"symbol {symbol!r} of {piece!r} is not in the vocabulary")
                ids.append(self.ids[symbol])
        return ids


def _value(reader: gguf.GGUFReader, key: str, default: Any) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def from_reader(reader: gguf.GGUFReader, path: pathlib.Path) -> BpeTokenizer:
    model = _value(reader, "tokenizer.ggml.model", None)
    if model != "gpt2":
        raise TokenizerError(f"{path}: tokenizer.ggml.model is {model!r}, not 'gpt2' (byte-level BPE)")
    tokens = _value(reader, "tokenizer.ggml.tokens", None)
    merges = _value(reader, "tokenizer.ggml.merges", None)
    if not tokens or not merges:
        raise TokenizerError(f"{path}: no tokenizer.ggml.tokens or tokenizer.ggml.merges")
    bos = _value(reader, "tokenizer.ggml.bos_token_id", None)
    add_bos = _value(reader, "tokenizer.ggml.add_bos_token", None)
    try:
        return BpeTokenizer(list(tokens), list(merges), str(_value(reader, "tokenizer.ggml.pre", "default")),
                            None if bos is None else int(bos), None if add_bos is None else bool(add_bos))
    except TokenizerError as err:
        raise TokenizerError(f"{path}: {err}") from err


def from_gguf(path: pathlib.Path) -> BpeTokenizer:
    try:
        reader = gguf.GGUFReader(path, "r")
    except (OSError, ValueError) as err:
        raise TokenizerError(f"{path}: not a readable GGUF ({err})") from err
    return from_reader(reader, path)
