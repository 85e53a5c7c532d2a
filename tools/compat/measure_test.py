"""measure() end to end over fake lane binaries: the step exit file states the real outcome, and the
recipe is the one the route's argv set (the lanes' certified recipe by default)."""

from __future__ import annotations

import pathlib
import sys

import pytest

from tools.compat import compat_record, rpc_route
from tools.runner import log_blocks
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
# LGT1 logits of the prompt's words with a decisive top-1; over RPC, each server gets weights and a
# layer, and the route's logits move by 1.0 where a file `diverge` sits beside the binary.
_LOGITS = """
import os, struct, sys
a = sys.argv[1:]
val = lambda f: a[a.index(f) + 1] if f in a else None
tokens = [len(w) for w in val("-p").split()][:6]
rows = [[5.0 if v == t % 8 else 0.1 * v for v in range(8)] for t in tokens]
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
_COMPLETION = """
import os, sys
print("the same words")
sys.exit(1 if os.path.exists(os.path.join(os.path.dirname(sys.argv[0]), "crash")) else 0)
"""


def _lane(root: pathlib.Path, *markers: str) -> pathlib.Path:
    (root / "bin").mkdir(parents=True)
    for name, body in (("ggml-rpc-server", _RPC_SERVER), ("llama-logits", _LOGITS), ("llama-completion", _COMPLETION),
                       ("llama-perplexity", _PERPLEXITY)):
        exe = root / "bin" / name
        exe.write_text(f"#!{sys.executable}\n{body}")
        exe.chmod(0o755)
    for marker in markers:
        (root / "bin" / marker).write_text("")
    (root.parent / f"{root.name}.evidence.pb").write_bytes(root.name.encode())
    return root


def _measure(tmp_path: pathlib.Path, *client_markers: str, **kw) -> tuple[pathlib.Path, dict]:
    cuda = _lane(tmp_path / "cuda", *client_markers)
    vulkan, cpu = _lane(tmp_path / "vulkan"), _lane(tmp_path / "cpu")
    model = fake_lane.make_gguf(tmp_path / "m.gguf")
    lanes = [rpc_route.RouteLane("linux-x86_64-cuda", "cuda", cuda, tmp_path / "cuda.evidence.pb", "CUDA0"),
             rpc_route.RouteLane("linux-x86_64-vulkan", "vulkan", vulkan, tmp_path / "vulkan.evidence.pb", "Vulkan0")]
    out = tmp_path / "out"
    report = rpc_route.measure(lanes, "linux-x86_64-cuda", cpu, model, out, rpc_route.Tolerances(), threads=1,
                               timeout_s=60, **kw)
    return out, report


def test_a_compatible_route_passes_its_step_under_the_lanes_recipe(tmp_path):
    out, report = _measure(tmp_path)
    assert report["compatible"], report["problems"]
    # A CheckResult status, not the exit code 0 read as one ("1 STATUS_UNSPECIFIED").
    assert (out / "logs" / "compat.exit").read_text() == "0 PASS\n"
    assert "# PASS: compatible" in (out / "logs" / "compat.log").read_text()
    assert report["recipe"] == {"kvCacheTypes": ["f16"], "flashAttention": ["on"], "nGpuLayers": -1,
                                "contextSize": 1024, "batchSize": 1024, "ubatchSize": 512, "parallelSequences": 1,
                                # The longest sequence compared: a corpus chunk less its unscored last token.
                                "longestSequenceTokens": 257}
    routed = [c.argv for c in log_blocks.commands((out / "logs" / "compat.log").read_text())
              if rpc_route.is_route_command(c.argv)]
    assert len(routed) == rpc_route.LOGIT_PROMPTS + len(rpc_route.PROMPTS) + 1  # + the corpus run
    assert all(log_blocks.flag_value(argv, "-fa") == "on" and log_blocks.flag_value(argv, "-ctk") == "f16"
               for argv in routed)
    # The recipe and the exit file are raw files of the measurement, digested like the rest.
    assert {"compat.config.json", "compat.exit"} <= set(report["log_digests"])
    assert compat_record.load_measurement(out)["recipe"] == report["recipe"]
    # The corpus: route vs the CPU lane at every scored position, under the F32 model's bounds.
    corpus = report["corpus"]
    assert corpus["bounds"] == "f16" and corpus["n_compared"] == corpus["n_scored"] == 4096
    assert corpus["mean_kl"] < 1e-9 and corpus["top1_agreement_decisive"] == 1.0
    assert rpc_route.CORPUS_FILE in report["log_digests"]
    assert not list(out.glob("corpus-*")), "the logits files are removed after the comparison"
    # The record's bounds kind is re-derived from the model file: an F32 model's is "f16".
    compat_record._check_corpus_bounds(compat_record.load_measurement(out), tmp_path / "m.gguf")
    looser = dict(compat_record.load_measurement(out), corpus={**report["corpus"], "bounds": "quantized"})
    with pytest.raises(compat_record.CompatibilityInputError, match="'quantized' bounds; the model's tensor types call"):
        compat_record._check_corpus_bounds(looser, tmp_path / "m.gguf")


def test_a_route_that_drifts_over_the_corpus_is_not_compatible(tmp_path):
    out, report = _measure(tmp_path, "diverge_corpus")
    assert not report["compatible"] and (out / "logs" / "compat.exit").read_text() == "1 FAIL\n"
    assert any(p.startswith("route vs cpu over the corpus: mean_kl") for p in report["problems"]), report["problems"]
    # The prompts' logits agree: only the corpus shows it.
    assert all("over the corpus" in p for p in report["problems"]), report["problems"]


def test_another_recipe_is_run_and_stated_as_given(tmp_path):
    _, report = _measure(tmp_path, flags=rpc_route.RecipeFlags(kv_cache_type="q8_0", flash_attention="off"))
    assert report["recipe"]["kvCacheTypes"] == ["q8_0"] and report["recipe"]["flashAttention"] == ["off"]


def test_an_incompatible_route_fails_its_step(tmp_path):
    out, report = _measure(tmp_path, "diverge")
    assert not report["compatible"]
    assert (out / "logs" / "compat.exit").read_text() == "1 FAIL\n"
    assert "# FAIL: not compatible: route vs " in (out / "logs" / "compat.log").read_text()


def test_a_failed_command_fails_its_step(tmp_path):
    with pytest.raises(rpc_route.RouteError, match="llama-completion for route, prompt 0, exited 1"):
        _measure(tmp_path, "crash")
    assert (tmp_path / "out" / "logs" / "compat.exit").read_text() == "1 FAIL\n"


def test_flash_attention_auto_is_refused(tmp_path):
    with pytest.raises(rpc_route.RouteError, match="auto proves no mode"):
        _measure(tmp_path, flags=rpc_route.RecipeFlags(flash_attention="auto"))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
