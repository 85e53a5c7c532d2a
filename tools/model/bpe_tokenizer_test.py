"""The independent BPE tokenizer gives upstream's own expected tokens for its BPE vocabularies.

llama.cpp ships models/ggml-vocab-<name>.gguf.inp/.out (test-tokenizer-0's inputs and expected
ids, without BOS) for the GPT-2, Qwen2 and Llama-3 vocabularies: every case must come out the same.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

from tools.model import bpe_tokenizer, prompt_tokenizer
from tools.model.spm_tokenizer import TokenizerError

_SEPARATOR = "\n__ggml_vocab_test__\n"
VOCABS = ("ggml-vocab-gpt-2.gguf", "ggml-vocab-qwen2.gguf", "ggml-vocab-llama-bpe.gguf")


def _vocab_dir() -> pathlib.Path:
    # --vocab= names one file of upstream's models/ directory; its siblings are the other vocabularies.
    for arg in sys.argv:
        if arg.startswith("--vocab="):
            return pathlib.Path(arg.split("=", 1)[1]).parent
    pytest.skip("run through Bazel (--vocab=)")


def _cases(vocab: pathlib.Path) -> list[tuple[str, list[int]]]:
    inputs = pathlib.Path(f"{vocab}.inp").read_text(encoding="utf-8").split(_SEPARATOR)
    outputs = pathlib.Path(f"{vocab}.out").read_text(encoding="utf-8").splitlines()
    assert inputs[-1] == "" and len(inputs) - 1 == len(outputs), "unexpected fixture layout"
    return [(text, [int(t) for t in line.split()]) for text, line in zip(inputs[:-1], outputs)]


@pytest.mark.parametrize("name", VOCABS)
def test_upstream_tokenizer_fixtures(name: str) -> None:
    vocab = _vocab_dir() / name
    tok = prompt_tokenizer.from_gguf(vocab)
    assert isinstance(tok, bpe_tokenizer.BpeTokenizer)
    cases = _cases(vocab)
    assert len(cases) >= 40
    wrong = [(text, want, tok.encode(text, add_special=False)) for text, want in cases
             if tok.encode(text, add_special=False) != want]
    assert not wrong, wrong[:3]


def test_a_wrong_pre_tokenizer_gives_other_tokens() -> None:
    # The fixtures can fail: Qwen2's vocabulary split with GPT-2's expression differs (upper-case
    # contractions, runs of newlines).
    vocab = _vocab_dir() / "ggml-vocab-qwen2.gguf"
    tok = prompt_tokenizer.from_gguf(vocab)
    gpt2 = bpe_tokenizer.BpeTokenizer.__new__(bpe_tokenizer.BpeTokenizer)
    gpt2.__dict__.update(tok.__dict__, pre=bpe_tokenizer.PRE_TOKENIZERS["gpt-2"])
    texts = ["HE'LL GO", "x\n\n\ny", "a.\n\n  b"]
    differ = [t for t in texts if tok.encode(t, add_special=False) != gpt2.encode(t, add_special=False)]
    assert differ


def test_merges_apply_by_rank() -> None:
    # "a b" ranks before "b c": "abc" -> "ab" + "c", not "a" + "bc".
    tok = bpe_tokenizer.BpeTokenizer(["a", "b", "c", "ab", "bc"], ["a b", "b c"], "gpt-2", None, False)
    assert tok.encode("abc") == [3, 2]
    tok = bpe_tokenizer.BpeTokenizer(["a", "b", "c", "ab", "bc"], ["b c", "a b"], "gpt-2", None, False)
    assert tok.encode("abc") == [0, 4]


def test_bos_when_the_vocabulary_adds_it() -> None:
    tok = bpe_tokenizer.BpeTokenizer(["<s>", "a"], [], "gpt-2", 0, True)
    assert tok.encode("a") == [0, 1]
    assert tok.encode("a", add_special=False) == [1]


def test_unknown_pre_tokenizer_is_refused_by_name() -> None:
    with pytest.raises(TokenizerError, match="pre-tokenizer 'falcon' is not implemented"):
        bpe_tokenizer.BpeTokenizer(["a"], [], "falcon", None, False)


def test_symbol_outside_the_vocabulary_is_refused() -> None:
    tok = bpe_tokenizer.BpeTokenizer(["a"], [], "gpt-2", None, False)
    with pytest.raises(TokenizerError, match="not in the vocabulary"):
        tok.encode("ab")


def test_duplicate_tokens_are_refused() -> None:
    with pytest.raises(TokenizerError, match="appears twice"):
        bpe_tokenizer.BpeTokenizer(["a", "a"], [], "gpt-2", None, False)


def test_spm_vocabulary_goes_to_the_spm_tokenizer() -> None:
    from tools.model import spm_tokenizer

    tok = prompt_tokenizer.from_gguf(_vocab_dir() / "ggml-vocab-llama-spm.gguf")
    assert isinstance(tok, spm_tokenizer.SpmTokenizer)


def test_other_tokenizer_models_are_refused(tmp_path: pathlib.Path) -> None:
    import gguf

    path = tmp_path / "wpm.gguf"
    w = gguf.GGUFWriter(str(path), "bert")
    w.add_tokenizer_model("bert")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(TokenizerError, match="'bert' is not implemented"):
        prompt_tokenizer.from_gguf(path)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-s", "-p", "no:cacheprovider"]))
