"""Test helpers: a fake lane (shell-script binaries), its build evidence, and small GGUF files.
Enough for every check that fails before a lane binary runs; no real binaries needed."""

from __future__ import annotations

import pathlib
import time

from tools.evidence import build_evidence
from tools.runner import runner
from tools.runner.config import RunnerConfig

TESTDATA = pathlib.Path(__file__).resolve().parents[1] / "testdata"
SPEC = TESTDATA / "spec.json"
TARGETS = ("llama-completion", "llama-simple", "llama-bench", "llama-server", "llama-logits", "test-backend-ops")
PIN = {"source_uri": "test:", "archive_sha256": "0" * 64, "commit": "0c1e57098bba43ac29e6e3b677cdceebdd22334f",
       "patch_stack_digest": "test", "patches": []}


def make_lane(root: pathlib.Path, missing: tuple[str, ...] = ()) -> pathlib.Path:
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    for t in TARGETS:
        if t not in missing:
            p = root / "bin" / t
            p.write_text("#!/bin/sh\necho fake\n")
            p.chmod(0o755)
    # Not ELF: the loader listing of artifact_integrity skips it, as it skips the scripts.
    (root / "lib" / "libggml.so.0").write_bytes(b"fake shared object")
    return root


def make_evidence(lane_dir: pathlib.Path, out: pathlib.Path, lane_id: str = "linux-x86_64-cpu",
                  patch_stack_digest: str = "test") -> pathlib.Path:
    now = time.time()
    ev = build_evidence.make_evidence(
        lane_id=lane_id, lane_dir=lane_dir, pin=dict(PIN, patch_stack_digest=patch_stack_digest),
        sdk={"name": "host-cc"}, stage_metas=[{"name": "llama", "cache_entries": {}, "started": now, "finished": now}],
        targets=list(TARGETS), bazel_version="test")
    build_evidence.write_evidence(ev, out, out.with_suffix(".json"))
    return out


def make_gguf(path: pathlib.Path) -> pathlib.Path:
    """A valid GGUF with one small tensor (not a runnable model: preflight only parses it)."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("fake")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def make_inputs(tmp: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """(lane dir, its build evidence, a GGUF) under tmp: what a CPU run over the fake lane takes."""
    lane_dir = make_lane(tmp / "lane")
    evidence = make_evidence(lane_dir, tmp / "linux-x86_64-cpu.evidence.pb")
    return lane_dir, evidence, make_gguf(tmp / "model.gguf")


def config(tmp: pathlib.Path, lane_dir: pathlib.Path, evidence: pathlib.Path | None, model: pathlib.Path | None,
           **kw) -> RunnerConfig:
    kw.setdefault("lane", "cpu")
    kw.setdefault("report", tmp / "out" / "runner_report.pb")
    return RunnerConfig(lane_dir=lane_dir, evidence=evidence, spec=kw.pop("spec", SPEC), model=model,
                        out_dir=tmp / "out", **kw)


def run(cfg: RunnerConfig):
    report = runner.run(cfg)
    return report, runner.exit_code(report)


def server_context(tmp: pathlib.Path, mode: str = "cancel", load: str = ""):
    """A RunContext over a fake CPU lane whose llama-server is testdata/fake_llama_server.py in `mode`
    (see install_fake_server), for calling the server checks directly."""
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import Lane

    lane_dir = make_lane(tmp / "lane")
    install_fake_server(lane_dir, mode, load)
    # An F32 GGUF: the server checks read the model's tensor types (concurrency's tie tolerance).
    cfg = RunnerConfig(lane="cpu", lane_dir=lane_dir, evidence=None, spec=SPEC, model=make_gguf(tmp / "m.gguf"),
                       out_dir=tmp, report=tmp / "r.pb", timeout_s=30)
    logs = tmp / "logs"
    logs.mkdir()
    lane = Lane("linux-x86_64-cpu", "cpu", "linux", "x86_64", "cpu", "host-cc", (), (), ())
    return RunContext(config=cfg, lane=lane, logs_dir=logs, scratch_dir=tmp)


def install_fake_server(lane_dir: pathlib.Path, mode: str = "cancel", load: str = "") -> pathlib.Path:
    """bin/llama-server becomes testdata/fake_llama_server.py (HTTP + llama-server's slot log lines);
    mode "ignore_cancel" decodes a dropped stream to the end, as a server that never cancels."""
    import sys

    p = lane_dir / "bin" / "llama-server"
    extra = f" --fake_load={load}" if load else ""
    p.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{TESTDATA / "fake_llama_server.py"}" --fake_mode={mode}{extra} "$@"\n')
    p.chmod(0o755)
    return p


def build_linked_elf(tmp: pathlib.Path, exe: pathlib.Path, lib_dir: pathlib.Path, runpath: str) -> pathlib.Path:
    """A real executable `exe` that needs lib_dir/libplanted.so through RUNPATH `runpath` (a library
    the lane does not hash when lib_dir is outside it). Uses the host's C compiler (setup_host.sh)."""
    import subprocess

    lib_dir.mkdir(parents=True, exist_ok=True)
    exe.parent.mkdir(parents=True, exist_ok=True)
    (tmp / "planted.c").write_text("int planted(void) { return 7; }\n")
    (tmp / "main.c").write_text("int planted(void);\nint main(void) { return planted() == 7 ? 0 : 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib_dir / "libplanted.so"), str(tmp / "planted.c")], check=True)
    subprocess.run(["cc", "-o", str(exe), str(tmp / "main.c"), f"-L{lib_dir}", "-lplanted",
                    f"-Wl,-rpath,{runpath}", "-Wl,--enable-new-dtags"], check=True)
    return exe


def install_fake_nvidia_smi(bin_dir: pathlib.Path, query: str, topo: str = "", header: str | None = None,
                            memory_used_file: pathlib.Path | None = None) -> pathlib.Path:
    """A fake `nvidia-smi` (and `ldd`) in bin_dir, for a test to put first on PATH: `--query-gpu=...`
    prints `query` (or, when memory_used_file exists, that file: cleanup's later readings), `topo -m`
    prints `topo` (exit 1 when empty), anything else the H200 header. `ldd` resolves the CUDA runtime
    libraries to paths under bin_dir. Recorded outputs only: nothing here runs on a GPU."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    data = bin_dir / "fake_nvidia_smi"
    data.mkdir(exist_ok=True)
    (data / "query.txt").write_text(query)
    (data / "topo.txt").write_text(topo)
    (data / "header.txt").write_text(header if header is not None else (TESTDATA / "nvidia_smi_h200.txt").read_text())
    live = str(memory_used_file) if memory_used_file is not None else str(data / "none")
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"""#!/bin/sh
case "$1" in
  --query-gpu=*) if [ -f "{live}" ]; then cat "{live}"; else cat "{data}/query.txt"; fi ;;
  topo) if [ -s "{data}/topo.txt" ]; then cat "{data}/topo.txt"; else echo "topo: not supported" >&2; exit 1; fi ;;
  *) cat "{data}/header.txt" ;;
esac
""")
    smi.chmod(0o755)
    ldd = bin_dir / "ldd"
    ldd.write_text(f"""#!/bin/sh
echo "	libcudart.so.13 => {data}/libcudart.so.13 (0x0000)"
echo "	libcublas.so.13 => {data}/libcublas.so.13 (0x0000)"
echo "	libcuda.so.1 => {data}/libcuda.so.1 (0x0000)"
""")
    ldd.chmod(0o755)
    return bin_dir


def make_cuda_lane(root: pathlib.Path) -> pathlib.Path:
    """A fake lane with the CUDA backend library preflight looks for (not ELF: ldd is faked too)."""
    lane_dir = make_lane(root)
    (lane_dir / "lib" / "libggml-cuda.so.0").write_bytes(b"fake CUDA backend")
    return lane_dir
