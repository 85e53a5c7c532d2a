"""model_store: models come from the configured store, never from /home, and splits identify a model."""

import hashlib

import pytest

from tools.model import model_store
from tools.model.model_store import ModelStoreError


@pytest.fixture
def store(tmp_path):
    d = tmp_path / "store"
    d.mkdir()
    return d


def test_single_file_model(store):
    (store / "m.gguf").write_bytes(b"GGUF one")
    m = model_store.model_from_store("m.gguf", store)
    assert m.sha256 == hashlib.sha256(b"GGUF one").hexdigest() and m.size == 8 and m.name == "m"
    assert [(s.name, s.sha256, s.size) for s in m.shards] == [("m.gguf", m.sha256, 8)]


def test_split_set_identified_by_every_split(store):
    for i in (1, 2, 3):
        (store / f"big-{i:05d}-of-00003.gguf").write_bytes(f"part {i}".encode())
    m = model_store.model_from_store("big-00002-of-00003.gguf", store)  # any split names the set
    assert [s.name for s in m.shards] == [f"big-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    assert [s.sha256 for s in m.shards] == [hashlib.sha256(f"part {i}".encode()).hexdigest() for i in (1, 2, 3)]
    assert m.sha256 == m.shards[0].sha256 and m.size == 18 and m.name == "big"


def test_missing_split_refused(store):
    (store / "big-00001-of-00002.gguf").write_bytes(b"x")
    with pytest.raises(ModelStoreError, match="missing big-00002-of-00002.gguf"):
        model_store.model_from_store("big-00001-of-00002.gguf", store)


def test_store_from_env_and_unconfigured(store, monkeypatch):
    (store / "m.gguf").write_bytes(b"x")
    monkeypatch.delenv(model_store.ENV_VAR, raising=False)
    with pytest.raises(ModelStoreError, match="LANES_MODEL_STORE"):
        model_store.model_from_store("m.gguf")
    monkeypatch.setenv(model_store.ENV_VAR, str(store))
    assert model_store.model_from_store("m.gguf").shards[0].name == "m.gguf"


def test_home_refused_even_through_symlink(tmp_path, store, monkeypatch):
    with pytest.raises(ModelStoreError, match="under /home"):
        model_store.store_dir("/home/someone/models")
    with pytest.raises(ModelStoreError, match="under /home"):
        model_store.resolve("/home/someone/m.gguf", store)
    fake_home = tmp_path / "home"
    fake_home.mkdir()
    (fake_home / "m.gguf").write_bytes(b"x")
    monkeypatch.setattr(model_store, "FORBIDDEN_ROOTS", (fake_home,))
    (store / "link.gguf").symlink_to(fake_home / "m.gguf")
    with pytest.raises(ModelStoreError, match="resolved"):
        model_store.model_from_store("link.gguf", store)


def test_outside_store_refused(tmp_path, store):
    (tmp_path / "elsewhere.gguf").write_bytes(b"x")
    with pytest.raises(ModelStoreError, match="outside the model store"):
        model_store.model_from_store(str(tmp_path / "elsewhere.gguf"), store)
    with pytest.raises(ModelStoreError, match="outside the model store"):
        model_store.model_from_store("../elsewhere.gguf", store)
    with pytest.raises(ModelStoreError):
        model_store.model_from_store("absent.gguf", store)


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
