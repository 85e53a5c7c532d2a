"""A prompt's token ids from the GGUF's own SentencePiece vocabulary, independently of the lane.

reference_parity compares the lane's logits with a reference computed on token ids; if those ids
were the lane's own, a lane that tokenized the prompt as BOS alone would be compared on one
position. So the prompt is tokenized here from the model file (gguf-py reads the vocabulary) and
the lane's ids must equal these.

This follows the pinned llama.cpp's SPM tokenizer (src/llama-vocab.cpp, llm_tokenizer_spm_session):
BOS first when the vocabulary adds it; a space before the text when add_space_prefix; spaces as
U+2581; the text split into UTF-8 characters; adjacent pairs whose concatenation is a token merged,
highest score first (the leftmost pair on a tie); a symbol that is no token emitted as its bytes'
<0xXX> tokens. Prompts with special-token text are not handled: the prompt sets have none.
"""

from __future__ import annotations

import heapq
import pathlib
from typing import Any

import gguf


class TokenizerError(ValueError):
    """The model's vocabulary cannot be tokenized here; the message says why."""


_SPACE = "\u2581"


class SpmTokenizer:
    def __init__(self, tokens: list[str], scores: list[float], bos_id: int | None, add_bos: bool,
                 add_space_prefix: bool, user_defined: list[int] | None = None) -> None:
        self.ids: dict[str, int] = {}
        for i, text in enumerate(tokens):
            self.ids.setdefault(text, i)
        # User-defined tokens are split out of the text before anything else, longest (in UTF-8
        # bytes) first, as llama.cpp's tokenizer_st_partition does with parse_special off (Gemma's
        # vocabulary holds runs of spaces and newlines this way).
        self.user_defined = sorted(((tokens[i], i) for i in (user_defined or []) if tokens[i]),
                                   key=lambda t: (-len(t[0].encode("utf-8")), t[1]))
        self.scores = scores
        self.bos_id = bos_id
        self.add_bos = add_bos
        self.add_space_prefix = add_space_prefix

    def _byte_token(self, byte: int) -> int:
        name = f"<0x{byte:02X}>"
        if name not in self.ids:
            raise TokenizerError(f"the vocabulary has no byte token {name}")
        return self.ids[name]

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        """Token ids of text; add_special: BOS first where the vocabulary adds it (as llama-logits)."""
        out: list[int] = []
        if add_special and self.add_bos:
            if self.bos_id is None:
                raise TokenizerError("the vocabulary adds BOS but names no BOS token")
            out.append(self.bos_id)
        if not text:
            return out
        is_prev_special = True
        for fragment in self._partition(text):
            if isinstance(fragment, int):
                out.append(fragment)
                is_prev_special = True
                continue
            out += self._encode_raw((" " if self.add_space_prefix and is_prev_special else "") + fragment)
            is_prev_special = False
        return out

    def _partition(self, text: str) -> list[str | int]:
        fragments: list[str | int] = [text]
        for special, token in self.user_defined:
            split: list[str | int] = []
            for fragment in fragments:
                if isinstance(fragment, int) or special not in fragment:
                    split.append(fragment)
                    continue
                parts = fragment.split(special)
                for k, part in enumerate(parts):
                    if k:
                        split.append(token)
                    if part:
                        split.append(part)
            fragments = split
        return fragments

    def _encode_raw(self, text: str) -> list[int]:
        out: list[int] = []
        symbols = list(text.replace(" ", _SPACE))  # one symbol per Unicode character
        alive = [True] * len(symbols)
        nxt = list(range(1, len(symbols))) + [-1]
        prv = list(range(-1, len(symbols) - 1))
        heap: list[tuple[float, int, int, str]] = []

        def push(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            merged = symbols[left] + symbols[right]
            token = self.ids.get(merged)
            if token is not None:
                heapq.heappush(heap, (-self.scores[token], left, right, merged))

        for i in range(1, len(symbols)):
            push(i - 1, i)
        while heap:
            _, left, right, merged = heapq.heappop(heap)
            # A pair whose sides changed since it was queued is stale.
            if not (alive[left] and alive[right]) or nxt[left] != right or symbols[left] + symbols[right] != merged:
                continue
            symbols[left] = merged
            alive[right] = False
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            push(prv[left], left)
            push(left, nxt[left])
        i = 0
        while i != -1:
            token = self.ids.get(symbols[i])
            if token is not None:
                out.append(token)
            else:
                out.extend(self._byte_token(b) for b in symbols[i].encode("utf-8"))
            i = nxt[i]
        return out


def _value(reader: gguf.GGUFReader, key: str, default: Any) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def from_gguf(path: pathlib.Path) -> SpmTokenizer:
    """The SPM tokenizer of a GGUF; TokenizerError for another tokenizer model."""
    reader = gguf.GGUFReader(path, "r")
    model = _value(reader, "tokenizer.ggml.model", "")
    if model != "llama":
        raise TokenizerError(f"{path}: tokenizer model {model!r}; only SentencePiece ('llama') vocabularies "
                             "are tokenized independently of the lane")
    tokens = list(_value(reader, "tokenizer.ggml.tokens", []))
    scores = [float(s) for s in _value(reader, "tokenizer.ggml.scores", [0.0] * len(tokens))]
    if not tokens or len(scores) != len(tokens):
        raise TokenizerError(f"{path}: no usable tokenizer.ggml.tokens/scores")
    bos = _value(reader, "tokenizer.ggml.bos_token_id", None)
    types = list(_value(reader, "tokenizer.ggml.token_type", []))
    user_defined = [i for i, t in enumerate(types) if int(t) == gguf.TokenType.USER_DEFINED]
    return SpmTokenizer(tokens, scores, None if bos is None else int(bos),
                        bool(_value(reader, "tokenizer.ggml.add_bos_token", True)),
                        bool(_value(reader, "tokenizer.ggml.add_space_prefix", True)), user_defined)
