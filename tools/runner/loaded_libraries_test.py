"""foreign_libraries: a lane process that maps a shared object from outside the lane and the
system library dirs is reported; the lane's own and the system's are not."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from tools.runner import loaded_libraries
from tools.runner.testing import fake_lane

# Maps each file named on the command line (as the loader maps a library), then waits.
MAPPER = textwrap.dedent("""
    import mmap, os, sys, time
    maps = []
    for name in sys.argv[1:]:
        if name.startswith("memfd:"):  # an executable anonymous memfd, as NVIDIA's GL driver makes
            fd = os.memfd_create(name[len("memfd:"):])
            os.ftruncate(fd, 4096)
            maps.append(mmap.mmap(fd, 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC))
            continue
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


def test_a_driver_the_system_loader_cache_lists_is_not_foreign_and_its_neighbours_are(tmp_path, mapper):
    """The H200 host's libcuda lives in /usr/local/nvidia/lib64, listed by ld.so.conf: the exact files
    the loader's cache names are the system's; another file in that directory is not."""
    if os.geteuid() != 0:
        pytest.skip("the driver stand-in must be root's, as a cache-listed file has to be")
    lane = tmp_path / "lane"
    own = _lib(lane / "lib" / "libggml.so.0")
    driver = _lib(tmp_path / "nvidia" / "lib64" / "libcuda.so.580.159.04")
    planted = _lib(tmp_path / "nvidia" / "lib64" / "libplanted.so")
    listing = (f"3 libs found in cache `/etc/ld.so.cache'\n"
               f"\tlibcuda.so.1 (libc6,x86-64) => {driver}\n"
               "\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n")
    cache = loaded_libraries.loader_cache_files(listing)
    assert str(driver) in cache and "/lib/x86_64-linux-gnu/libc.so.6" in {p for p in loaded_libraries.parse_loader_cache(listing)}
    pid = mapper(own, driver, planted)
    roots = (sys.base_prefix, sys.prefix)
    assert loaded_libraries.foreign_libraries(pid, lane, roots) == [str(driver), str(planted)]
    assert loaded_libraries.foreign_libraries(pid, lane, roots, cache) == [str(planted)]


def test_a_cache_listed_file_others_can_replace_stays_foreign(tmp_path, mapper):
    """The cache is root's, the files it names need not be: one in a directory any user may write
    (no sticky bit) could be swapped under the same path, so it is not taken as the system's."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    lib = _lib(shared / "libvendor.so.1")
    listing = f"1 libs found in cache `/etc/ld.so.cache'\n\tlibvendor.so.1 (libc6,x86-64) => {lib}\n"
    assert loaded_libraries.loader_cache_files(listing) == set()
    pid = mapper(lib)
    assert loaded_libraries.foreign_libraries(pid, tmp_path / "lane", (), loaded_libraries.loader_cache_files(listing)) == [str(lib)]
    os.chmod(shared, 0o755)
    writable = _lib(tmp_path / "other" / "libw.so.1")
    os.chmod(writable, 0o666)
    assert not loaded_libraries.root_controlled(str(writable))


def test_this_hosts_loader_cache_is_read():
    assert any(p.rsplit("/", 1)[-1].startswith("libc.so") for p in loaded_libraries.loader_cache_files())


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


def test_the_nvidia_gl_memfd_is_accepted_only_beside_its_maker_from_the_system(tmp_path, mapper):
    """NVIDIA's Vulkan ICD maps an executable memfd ".glXXXXXX" (seen on the H200 host); it is not
    foreign where libnvidia-glcore is mapped from a root-controlled system file, and is otherwise;
    a memfd of any other name stays foreign beside the driver."""
    if os.geteuid() != 0:
        pytest.skip("the driver stand-in must be root's, as a cache-listed file has to be")
    lane = tmp_path / "lane"
    own = _lib(lane / "lib" / "libggml.so.0")
    glcore = _lib(tmp_path / "nvidia" / "lib64" / "libnvidia-glcore.so.580.95.05")
    listing = f"1 libs found in cache `/etc/ld.so.cache'\n\tlibnvidia-glcore.so.580.95.05 (libc6,x86-64) => {glcore}\n"
    cache = loaded_libraries.loader_cache_files(listing)
    roots = (sys.base_prefix, sys.prefix)
    memfd = loaded_libraries.DRIVER_MEMFD
    assert loaded_libraries.foreign_libraries(mapper(own, glcore, "memfd:/.glXXXXXX"), lane, roots, cache) == []
    # Without the driver, or with the driver from outside the system, the memfd is foreign.
    assert loaded_libraries.foreign_libraries(mapper(own, "memfd:/.glXXXXXX"), lane, roots, cache) == [memfd]
    assert loaded_libraries.foreign_libraries(mapper(own, glcore, "memfd:/.glXXXXXX"), lane, roots) == sorted(
        [str(glcore), memfd])
    # Another memfd name beside the driver stays foreign.
    assert loaded_libraries.foreign_libraries(mapper(own, glcore, "memfd:payload"), lane, roots, cache) == [
        "/memfd:payload (deleted)"]


def test_a_gone_process_raises():
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(OSError):
        loaded_libraries.foreign_libraries(proc.pid, "/nonexistent")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


# What the loader resolves for a lane's ELF files (artifact_integrity, every binary, not only the server).

def _listed(loader: str, path: pathlib.Path) -> list[tuple[str, str | None]]:
    out = subprocess.run([loader, "--list", str(path)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
                         timeout=30)
    assert out.returncode == 0, out.stderr
    return loaded_libraries.parse_loader_list(out.stdout)


def test_a_system_binary_resolves_only_system_libraries():
    loader = loaded_libraries.elf_interpreter("/bin/ls")
    assert loader and loader.startswith("/lib")
    resolved = _listed(loader, pathlib.Path("/bin/ls"))
    assert resolved and all(p for _, p in resolved)
    lines = [("bin/ls", name, loaded_libraries.classify(p, {}, [])) for name, p in resolved]
    assert all(w.startswith("system:") for _, _, w in lines), lines
    assert loaded_libraries.resolution_problems(lines, set(), []) == []


def test_a_lane_library_through_origin_is_the_lanes_and_a_planted_one_is_refused(tmp_path):
    lane = tmp_path / "lane"
    exe = fake_lane.build_linked_elf(tmp_path, lane / "bin" / "tool", lane / "lib", "$ORIGIN/../lib")
    own = {loaded_libraries._real(p): str(p.relative_to(lane)) for p in (lane / "bin" / "tool", lane / "lib" / "libplanted.so")}
    loader = loaded_libraries.elf_interpreter(exe)
    lines = [("bin/tool", n, loaded_libraries.classify(p, own, [])) for n, p in _listed(loader, exe)]
    assert ("bin/tool", "libplanted.so", "lane:lib/libplanted.so") in lines
    assert loaded_libraries.resolution_problems(lines, {"bin/tool", "lib/libplanted.so"}, []) == []

    planted = tmp_path / "planted"
    exe2 = fake_lane.build_linked_elf(tmp_path, tmp_path / "lane2" / "bin" / "tool", planted, str(planted))
    lines = [("bin/tool", n, loaded_libraries.classify(p, {}, [])) for n, p in _listed(loader, exe2)]
    problems = loaded_libraries.resolution_problems(lines, {"bin/tool"}, [])
    assert problems == [f"bin/tool: libplanted.so resolves to {loaded_libraries._real(planted / 'libplanted.so')} "
                        "(outside the lane, the system and the SDK)"]
    # The same path allowed as an SDK root passes; a label that lies about the path does not.
    assert loaded_libraries.resolution_problems(
        [("bin/tool", "libplanted.so", "sdk:" + loaded_libraries._real(planted / "libplanted.so"))], {"bin/tool"},
        [loaded_libraries._real(planted)]) == []
    assert loaded_libraries.resolution_problems(
        [("bin/tool", "libplanted.so", "system:" + str(planted / "libplanted.so"))], {"bin/tool"}, []) != []
    assert loaded_libraries.resolution_problems(
        [("bin/tool", "libplanted.so", "lane:lib/other.so")], {"bin/tool"}, []) != []


def test_a_library_from_the_loader_cache_passes_only_where_the_run_listed_it(tmp_path):
    """The GPU driver's libcuda.so.1 resolves from where a container mounts it (listed in the
    system loader's cache): `cache:` where the run's cache files name it, refused elsewhere."""
    planted = tmp_path / "nvidia" / "lib64"
    exe = fake_lane.build_linked_elf(tmp_path, tmp_path / "lane" / "bin" / "tool", planted, str(planted))
    loader = loaded_libraries.elf_interpreter(exe)
    real = loaded_libraries._real(planted / "libplanted.so")
    lines = [("bin/tool", n, loaded_libraries.classify(p, {}, [], {real})) for n, p in _listed(loader, exe)]
    assert ("bin/tool", "libplanted.so", "cache:" + real) in lines
    assert loaded_libraries.resolution_problems(lines, {"bin/tool"}, [], {real}) == []
    # The same resolution where the run's cache did not list it, or a cache label on another path.
    assert loaded_libraries.resolution_problems(lines, {"bin/tool"}, [], set()) == [
        f"bin/tool: libplanted.so resolves to {real} (outside the lane, the system and the SDK)"]
    assert loaded_libraries.resolution_problems(
        [("bin/tool", "libplanted.so", "cache:/tmp/elsewhere/libplanted.so")], {"bin/tool"}, [], {real}) != []
    # Without the cache the same file is foreign.
    assert loaded_libraries.classify(str(planted / "libplanted.so"), {}, []) == "foreign:" + real


def test_not_found_and_unreadable_loader_lines_are_refused():
    text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibx.so => not found\n\t/lib64/ld-linux-x86-64.so.2 (0x7f00)\n"
    assert loaded_libraries.parse_loader_list(text) == [("libx.so", None),
                                                        ("ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2")]
    with pytest.raises(loaded_libraries.LoaderListError, match="unreadable loader line"):
        loaded_libraries.parse_loader_list("\tlibx.so => /tmp/a b (0x1)\n")
    assert loaded_libraries.resolution_problems([("bin/t", "libx.so", "missing:")], {"bin/t"}, []) == [
        "bin/t: libx.so is not found by the loader"]


def test_elf_interpreter_refuses_a_non_elf(tmp_path):
    script = tmp_path / "s"
    script.write_text("#!/bin/sh\n")
    assert not loaded_libraries.is_elf(script)
    with pytest.raises(loaded_libraries.LoaderListError, match="not a 64-bit"):
        loaded_libraries.elf_interpreter(script)
