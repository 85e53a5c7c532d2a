"""Fake lane binaries for measuring a mixed route end to end (tools/compat/rpc_route.measure)
without GPUs: an rpc-server, llama-logits, llama-perplexity and llama-completion per lane, each a
Python script. Marker files beside a lane's binaries make it misbehave (see each binary)."""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable

from tools.compat import rpc_route
from tools.runner.testing import fake_lane

# One rpc-server per lane: listens where -H/-p say, prints its protocol version once.
_RPC_SERVER = """
import socket, sys
a = sys.argv[1:]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((a[a.index("-H") + 1], int(a[a.index("-p") + 1])))
s.listen()
print("Starting RPC server v3.0.0", flush=True)
while True:
    s.accept()[0].close()
"""
# LGT1 logits of the prompt's words (a word's token: its length mod 8) whose decisive top-1 is the
# next word's token (the last row: its own), so any text is the fake model's own greedy path; where a
# file `unlikely` sits beside the binary the top-1 is the token after it instead (every text is
# ranked 4.3 nats or more below it). Over RPC, each server gets weights and a layer, and the route's
# logits move by 1.0 where a file `diverge` sits beside the binary.
_LOGITS = """
import os, struct, sys
a = sys.argv[1:]
val = lambda f: a[a.index(f) + 1] if f in a else None
here = os.path.dirname(sys.argv[0])
tokens = [len(w) % 8 for w in val("-p").split()][:64]
shift = 1 if os.path.exists(os.path.join(here, "unlikely")) else 0
top = [(tokens[min(j + 1, len(tokens) - 1)] + shift) % 8 for j in range(len(tokens))]
rows = [[5.0 if v == t else 0.1 * v for v in range(8)] for t in top]
if val("-rpc"):
    for i, endpoint in enumerate(val("-rpc").split(",")):
        print(f"load_tensors: RPC{i}[{endpoint}] model buffer size =     2.00 MiB")
        print(f"llama_kv_cache: layer   {i}: dev = RPC{i}")
    if os.path.exists(os.path.join(os.path.dirname(sys.argv[0]), "diverge")):
        rows = [[x + (1.0 if j == 3 else 0.0) for j, x in enumerate(r)] for r in rows]
with open(val("-o"), "wb") as f:
    f.write(b"LGT1" + struct.pack("<ii", len(tokens), 8) + struct.pack(f"<{len(tokens)}i", *tokens))
    for r in rows:
        f.write(struct.pack("<8f", *r))
"""
# upstream's --kl-divergence-base file over 32 chunks of 258 tokens and a vocabulary of 8, the same
# rows for every party (a route file lifts the runner-up by 4.5 nats where `diverge_corpus` sits beside it).
_PERPLEXITY = """
import os, struct, sys
a = sys.argv[1:]
val = lambda f: a[a.index(f) + 1] if f in a else None
n_ctx, n_chunk, n_vocab = int(val("-c")), int(val("--chunks")), 8
if "-rpc" in a:  # as upstream's common argument parser: --rpc only (seen on the H200)
    print("error: invalid argument: -rpc", file=sys.stderr)
    sys.exit(1)
# common's logger: libllama's info lines need -lv 4, its debug lines (KV layers) -lv 5.
verbosity = int(val("-lv") or 3)
if val("--rpc"):
    for i, endpoint in enumerate(val("--rpc").split(",")):
        if verbosity >= 4:
            print(f"load_tensors: RPC{i}[{endpoint}] model buffer size =     2.00 MiB")
        if verbosity >= 5:
            print(f"llama_kv_cache: layer   {i}: dev = RPC{i}")
drift = val("--rpc") and os.path.exists(os.path.join(os.path.dirname(sys.argv[0]), "diverge_corpus"))
scale = 16.0 / 65535.0
with open(val("--kl-divergence-base"), "wb") as f:
    f.write(b"_logits_" + struct.pack("<iii", n_ctx, n_vocab, n_chunk))
    f.write(struct.pack(f"<{n_ctx * n_chunk}i", *[(7 * i) % n_vocab for i in range(n_ctx * n_chunk)]))
    for row in range(n_chunk * (n_ctx - 1 - n_ctx // 2)):
        top = row % n_vocab
        logp = [-1.0 if v == top else -1.5 if drift and v == (top + 1) % n_vocab else -6.0 - 0.1 * v
                for v in range(n_vocab)]
        low = -16.0
        f.write(struct.pack("<ff", scale, low))
        f.write(struct.pack(f"<{n_vocab}H", *[max(0, min(65535, round((x - low) / scale))) for x in logp]))
"""
# The same words for every party, or the text of a `completion.txt` beside the binary; then, as
# llama-completion does after the last token, an empty line.
_COMPLETION = """
import os, sys
here = os.path.dirname(sys.argv[0])
canned = os.path.join(here, "completion.txt")
sys.stdout.write((open(canned).read() if os.path.exists(canned) else " the same words") + chr(10) * 2)
if os.path.exists(os.path.join(here, "rewrite")):  # a lane process that rewrites a sibling of its lane
    with open(os.path.join(here, "llama-perplexity"), "a") as f:
        f.write("# rewritten" + chr(10))
sys.exit(1 if os.path.exists(os.path.join(here, "crash")) else 0)
"""


def make_lane(root: pathlib.Path, *markers: str, completion: str | None = None,
              lane_id: str = "linux-x86_64-cpu") -> pathlib.Path:
    """A fake lane's bin/ (markers and completion.txt included) and its build evidence beside it."""
    (root / "bin").mkdir(parents=True)
    for name, body in (("ggml-rpc-server", _RPC_SERVER), ("llama-logits", _LOGITS), ("llama-completion", _COMPLETION),
                       ("llama-perplexity", _PERPLEXITY)):
        exe = root / "bin" / name
        exe.write_text(f"#!{sys.executable}\n{body}")
        exe.chmod(0o755)
    for marker in markers:
        (root / "bin" / marker).write_text("")
    if completion is not None:
        (root / "bin" / "completion.txt").write_text(completion)
    fake_lane.make_evidence(root, root.parent / f"{root.name}.evidence.pb", lane_id=lane_id)
    return root


def measure(tmp_path: pathlib.Path, *client_markers: str, gpu_completion: str | None = None,
            cpu_markers: tuple[str, ...] = (), prepare: Callable[[pathlib.Path], None] | None = None,
            **kw) -> tuple[pathlib.Path, dict]:
    """A CUDA+Vulkan route over fake lanes (the CUDA lane the client), measured into tmp_path/out;
    `prepare(tmp_path)` runs once the lanes (tmp_path/cuda, vulkan, cpu) and their evidence exist."""
    cuda = make_lane(tmp_path / "cuda", *client_markers, completion=gpu_completion, lane_id="linux-x86_64-cuda")
    vulkan = make_lane(tmp_path / "vulkan", completion=gpu_completion, lane_id="linux-x86_64-vulkan")
    cpu = make_lane(tmp_path / "cpu", *cpu_markers)
    model = fake_lane.make_gguf(tmp_path / "m.gguf")
    lanes = [rpc_route.RouteLane("linux-x86_64-cuda", "cuda", cuda, tmp_path / "cuda.evidence.pb", "CUDA0"),
             rpc_route.RouteLane("linux-x86_64-vulkan", "vulkan", vulkan, tmp_path / "vulkan.evidence.pb", "Vulkan0")]
    if prepare is not None:
        prepare(tmp_path)
    out = tmp_path / "out"
    kw.setdefault("cpu_evidence", tmp_path / "cpu.evidence.pb")
    report = rpc_route.measure(lanes, "linux-x86_64-cuda", cpu, model, out, rpc_route.Tolerances(), threads=1,
                               timeout_s=60, **kw)
    return out, report
