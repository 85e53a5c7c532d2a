"""foreign_libraries: a lane process that maps a shared object from outside the lane and the
system library dirs is reported; the lane's own and the system's are not."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tools.runner import loaded_libraries

# Maps each file named on the command line (as the loader maps a library), then waits.
MAPPER = textwrap.dedent("""
    import mmap, sys, time
    maps = []
    for name in sys.argv[1:]:
        f = open(name, "rb")
        maps.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
    print("ready", flush=True)
    time.sleep(60)
""")


@pytest.fixture
def mapper():
    procs = []

    def start(*paths):
        proc = subprocess.Popen([sys.executable, "-c", MAPPER, *map(str, paths)], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "ready"
        return proc.pid

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _lib(path, size=4096):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF" + b"\0" * (size - 4))
    return path


def test_a_library_from_outside_the_lane_is_reported(tmp_path, mapper):
    lane = tmp_path / "lane"
    own = _lib(lane / "lib" / "libggml.so.0")
    evil = _lib(tmp_path / "tmp" / "libevil.so")
    pid = mapper(own, evil)
    # The interpreter's own extension modules live outside the roots when it is a hermetic one: the
    # runner's Python is no lane process, so pass its prefix as an allowed root here.
    found = loaded_libraries.foreign_libraries(pid, lane, (sys.base_prefix, sys.prefix))
    assert found == [str(evil)]


def test_the_lane_and_sdk_roots_are_not_foreign(tmp_path, mapper):
    lane = tmp_path / "lane"
    sdk_lib = _lib(tmp_path / "sdk" / "lib64" / "libcudart.so.12")
    pid = mapper(_lib(lane / "lib" / "libggml-cpu.so"), sdk_lib)
    assert loaded_libraries.foreign_libraries(pid, lane, (str(tmp_path / "sdk"), sys.base_prefix, sys.prefix)) == []
    assert loaded_libraries.foreign_libraries(pid, lane, (sys.base_prefix, sys.prefix)) == [str(sdk_lib)]


def test_a_deleted_library_is_foreign_even_inside_the_lane(tmp_path, mapper):
    lane = tmp_path / "lane"
    lib = _lib(lane / "lib" / "libggml.so.0")
    pid = mapper(lib)
    lib.unlink()
    assert loaded_libraries.foreign_libraries(pid, lane, (sys.base_prefix, sys.prefix)) == [f"{lib} (deleted)"]


def test_a_gone_process_raises():
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(OSError):
        loaded_libraries.foreign_libraries(proc.pid, "/nonexistent")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
