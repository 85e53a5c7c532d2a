"""The independent SPM tokenizer gives upstream's own expected tokens for the pinned llama vocabulary.

llama.cpp ships models/ggml-vocab-llama-spm.gguf.inp/.out, the inputs and expected outputs of its
test-tokenizer-0 (without BOS): every one of them must come out the same here.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

from tools.model import spm_tokenizer

_SEPARATOR = "\n__ggml_vocab_test__\n"


def _vocab() -> pathlib.Path:
    for arg in sys.argv:
        if arg.startswith("--vocab="):
            return pathlib.Path(arg.split("=", 1)[1])
    pytest.skip("run through Bazel (--vocab=)")


def _cases(vocab: pathlib.Path) -> list[tuple[str, list[int]]]:
    """(input, expected ids): each input ends with the separator line; one output line each."""
    inputs = pathlib.Path(f"{vocab}.inp").read_text(encoding="utf-8").split(_SEPARATOR)
    outputs = pathlib.Path(f"{vocab}.out").read_text(encoding="utf-8").splitlines()
    assert inputs[-1] == "" and len(inputs) - 1 == len(outputs), "unexpected fixture layout"
    return [(text, [int(t) for t in line.split()]) for text, line in zip(inputs[:-1], outputs)]


def test_upstream_tokenizer_fixtures():
    vocab = _vocab()
    tok = spm_tokenizer.from_gguf(vocab)
    cases = _cases(vocab)
    assert len(cases) >= 40
    wrong = [(text, want, tok.encode(text, add_special=False)) for text, want in cases
             if tok.encode(text, add_special=False) != want]
    assert wrong == [], wrong[:3]
    # With BOS, as llama-logits tokenizes (add_special).
    assert tok.encode("Hello world") == [1, 15043, 3186]


def test_merges_highest_score_first_and_bytes_for_unknown_characters():
    tokens = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "ab", "\u2581a", "\u2581ab"] + [f"<0x{i:02X}>" for i in range(256)]
    scores = [0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -0.5, -0.7, -0.1]
    scores += [0.0] * 256
    tok = spm_tokenizer.SpmTokenizer(tokens, scores, bos_id=1, add_bos=True, add_space_prefix=True)
    assert tok.encode("ab") == [1, 8]  # ▁ a b: "ab" (-0.5) before "▁a" (-0.7), then "▁ab"
    byte_ids = [tokens.index(f"<0x{b:02X}>") for b in "é".encode()]
    assert tok.encode("é", add_special=False) == [3] + byte_ids


def test_a_vocabulary_that_is_not_sentencepiece_is_refused(tmp_path):
    import gguf
    w = gguf.GGUFWriter(str(tmp_path / "bpe.gguf"), "llama")
    w.add_tokenizer_model("gpt2")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(spm_tokenizer.TokenizerError, match="tokenizer model 'gpt2'"):
        spm_tokenizer.from_gguf(tmp_path / "bpe.gguf")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))  # --vocab= stays in sys.argv for _vocab()
