"""Red-team cases: injected configuration, an unverified oracle, loosened flags, replays, one-token
tokenization and swapped binaries (classes 1-6 of issue 23).

The lies are fake lanes of shell scripts with build evidence made for them (an attacker builds the
lane, so its evidence matches it), run over the embedded tiny model with the committed policy.
"""

from __future__ import annotations

import os
import pathlib
import shlex
import struct
import sys

import numpy as np

from tests.red_team.case import RedTeamCase, Refusal, refused_check
from tools.runner import log_blocks, runner
from tools.runner.testing import fake_lane

REPO = pathlib.Path(__file__).resolve().parents[2]
POLICY = REPO / "evidence" / "policy.json"
# The stamp artifact_integrity requires of `llama-completion --version` (fake_lane.PIN's commit).
VERSION_SCRIPT = ("#!/bin/sh\necho 'version: 11312 (build 11312, commit 0c1e570)' >&2\n"
                  "echo 'lanes: lane linux-x86_64-cpu, patch stack test' >&2\n")


def tiny_model() -> pathlib.Path:
    """The embedded model: from Bazel's runfiles, or LANES_TINY_MODEL."""
    candidates = [os.environ.get("LANES_TINY_MODEL", ""),
                  os.path.join(os.environ.get("TEST_SRCDIR", ""), "lanes", "tools", "model", "tiny_llama_f32.gguf")]
    for c in candidates:
        if c and pathlib.Path(c).is_file():
            return pathlib.Path(c)
    raise AssertionError(f"the embedded model is not in the runfiles (tried {candidates})")


def _script(path: pathlib.Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def lane_with(tmp: pathlib.Path, scripts: dict[str, str]) -> tuple[pathlib.Path, pathlib.Path]:
    """A fake CPU lane whose named binaries are the given scripts, and evidence made for exactly it."""
    lane_dir = fake_lane.make_lane(tmp / "lane")
    _script(lane_dir / "bin" / "llama-completion", VERSION_SCRIPT)
    for name, text in scripts.items():
        _script(lane_dir / "bin" / name, text)
    return lane_dir, fake_lane.make_evidence(lane_dir, tmp / "linux-x86_64-cpu.evidence.pb")


def run(tmp: pathlib.Path, lane_dir: pathlib.Path, evidence: pathlib.Path, **kw):
    kw.setdefault("policy", POLICY)
    cfg = fake_lane.config(tmp, lane_dir, evidence, tiny_model(), **kw)
    return runner.run(cfg)


def logits_writer(tmp: pathlib.Path, tokens: list[int], n_vocab: int = 32000) -> str:
    """A llama-logits that ignores its prompt and writes these tokens' (random) logits where -o says."""
    body = struct.pack("<4sii", b"LGT1", len(tokens), n_vocab) + struct.pack(f"<{len(tokens)}i", *tokens)
    body += np.random.default_rng(0).normal(0, 3, (len(tokens), n_vocab)).astype("<f4").tobytes()
    blob = tmp / f"replay-{len(tokens)}.lgt"
    blob.write_bytes(body)
    return ("#!/bin/sh\nout=''\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n"
            f"cp {shlex.quote(str(blob))} \"$out\"\n")


# Checks the lie does not concern, skipped to keep each case short; the refusal asserted is the
# named check's own FAIL (a required check), never the skip.
_ONLY_PARITY = ("fixture_parity", "op_oracle", "cpu_variants", "upstream_ctest", "graph_smoke", "concurrency",
                "cancellation", "speed")


def case_config_file_rewritten(tmp: pathlib.Path) -> Refusal:
    config = tmp / "out" / "logs" / "reference_parity.config.json"
    loosen = (f"#!/bin/sh\nprintf '{{\"tol_max_abs_delta_logit\": \"1e9\"}}' > {shlex.quote(str(config))}\n"
              "exit 1\n")
    lane_dir, evidence = lane_with(tmp, {"llama-logits": loosen})
    report = run(tmp, lane_dir, evidence, skip=_ONLY_PARITY)
    return refused_check(report, "reference_parity", "was changed during the step")


def case_forged_config_lines(tmp: pathlib.Path) -> Refusal:
    """A tool (or a model's generated text) prints a forged exit line and config lines: the step's
    configuration is its runner-written file, and stays what the runner wrote."""
    logs = tmp / "logs"
    logs.mkdir()
    log_blocks.write_config(log_blocks.config_path(logs, "cancellation"), {"cancel_bound_s": "5.0"})
    (logs / "cancellation.log").write_text("$ llama-completion -p x\nOnce upon\n# exit 0 after 0.1s\n"
                                           "# lanes-config cancel_bound_s=1000000.0\n")
    got = log_blocks.step_config(logs, "cancellation")
    assert got == {"cancel_bound_s": "5.0"}, got
    return Refusal("step configuration", f"printed '# lanes-config cancel_bound_s=1000000.0' ignored; bound {got}")


def case_unverified_reference_lane(tmp: pathlib.Path) -> Refusal:
    from tools.runner import lane_files
    cpu_lane, evidence = lane_with(tmp, {})
    _script(cpu_lane / "bin" / "llama-logits", "#!/bin/sh\nexec /some/other/lane/bin/llama-logits \"$@\"\n")
    try:
        lane_files.verify_reference_lane(cpu_lane, evidence, "x86_64")
    except lane_files.ReferenceLaneError as err:
        assert "bin/llama-logits: sha256" in str(err), err
        return Refusal("preflight", str(err))
    raise AssertionError("a reference CPU lane that is not its evidence's was accepted")


def case_accelerator_is_the_cpu_lane(tmp: pathlib.Path) -> Refusal:
    from tools.runner.checks import reference_parity as rp
    logs = tmp / "logs"
    logs.mkdir()
    cfg = {"tol_max_abs_delta_logit": "0.05", "tol_mean_kl": "0.0001", "tol_top1_agreement_decisive": "1.0",
           "tol_min_decisive_fraction": "0.5", "tie_margin": "0.1"}
    log_blocks.write_config(log_blocks.config_path(logs, rp.STEP), cfg)
    cpu = np.random.default_rng(1).normal(0, 3, (20, 64)).astype(np.float32)
    tokens = np.arange(20, dtype=np.int32)
    rp.save_logits(logs / rp.LOGITS_FILE, {"tokens": tokens, "expected_tokens": tokens, "lane": cpu,
                                           "reference": cpu, "cpu_lane": cpu})
    found = rp.problems(logs)
    assert any("not computed on the device" in p for p in found), found
    return Refusal("reference_parity", "; ".join(found))


def case_loosened_flags_without_policy(tmp: pathlib.Path) -> Refusal:
    lane_dir, evidence = lane_with(tmp, {})
    report = run(tmp, lane_dir, evidence, policy=None, parity_max_abs_delta=1.0, parity_min_top1=0.0,
                 kv_types=("f16",), skip=_ONLY_PARITY + ("reference_parity",))
    reasons = list(report.non_recordable_reasons)
    for want in ("--parity_max_abs_delta=1 is looser than the default 0.05", "--parity_min_top1=0 is looser",
                 "--kv_types=f16 leaves out", "no --policy"):
        assert any(want in r for r in reasons), (want, reasons)
    assert not report.pass_recordable
    return Refusal("runner", "; ".join(r for r in reasons if not r.startswith("--skip")))


def case_replayed_logits(tmp: pathlib.Path) -> Refusal:
    from tools.model import spm_tokenizer
    old = spm_tokenizer.from_gguf(tiny_model()).encode("The quick brown fox jumps over the lazy dog. Once upon a time")
    lane_dir, evidence = lane_with(tmp, {"llama-logits": logits_writer(tmp, old)})
    report = run(tmp, lane_dir, evidence, skip=_ONLY_PARITY)
    return refused_check(report, "reference_parity", "prompt token(s) differ from the model vocabulary's")


def case_loader_line_of_another_host(tmp: pathlib.Path) -> Refusal:
    from tools.runner import host_cpu
    from tools.runner.checks import preflight_devices
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import Lane
    from tools.runner.steps import ProcessTracker, Step
    flags = host_cpu.cpuinfo_flags(pathlib.Path("/proc/cpuinfo").read_text())
    variants = tuple(host_cpu.VARIANT_FEATURES)
    here = host_cpu.expected_variant(variants, flags)
    other = "zen4" if here == "sapphirerapids" else "sapphirerapids"
    lane_dir = fake_lane.make_lane(tmp / "lane")
    _script(lane_dir / "bin" / "llama-bench",
            f"#!/bin/sh\necho 'load_backend: loaded CPU backend from /l/bin/libggml-cpu-{other}.so' >&2\n")
    lane = Lane("linux-x86_64-cpu", "cpu", "linux", "x86_64", "cpu", "host-cc", (), (), (), cpu_variants=variants)
    cfg = fake_lane.config(tmp, lane_dir, None, None)
    (tmp / "logs").mkdir()
    ctx = RunContext(config=cfg, lane=lane, logs_dir=tmp / "logs", scratch_dir=tmp)
    try:
        preflight_devices.detect_cpu_variant(ctx, Step("preflight", tmp / "logs", ProcessTracker()))
    except preflight_devices.Failed as err:
        assert "not this host's" in str(err), err
        return Refusal("preflight", str(err))
    raise AssertionError(f"a {other} loader line on a {here} host was accepted")


def case_bos_only(tmp: pathlib.Path) -> Refusal:
    lane_dir, evidence = lane_with(tmp, {"llama-logits": logits_writer(tmp, [1])})
    report = run(tmp, lane_dir, evidence, skip=_ONLY_PARITY)
    return refused_check(report, "reference_parity", "the lane's 1 prompt token(s) differ")


def case_binary_swapped_after_hashing(tmp: pathlib.Path) -> Refusal:
    target = tmp / "lane" / "bin" / "llama-logits"
    swap = f"#!/bin/sh\nprintf '#!/bin/sh\\necho swapped\\n' > {shlex.quote(str(target))}\nexit 1\n"
    lane_dir, evidence = lane_with(tmp, {"test-backend-ops": swap})
    report = run(tmp, lane_dir, evidence, skip=("op_oracle", "cpu_variants", "upstream_ctest", "graph_smoke",
                                                 "concurrency", "cancellation", "speed"))
    return refused_check(report, "reference_parity", "artifacts changed after artifact_integrity hashed them")


def case_binary_resolves_a_planted_library(tmp: pathlib.Path) -> Refusal:
    """A lane binary (a real ELF, hashed with the lane) whose RUNPATH resolves a library from outside
    the lane: the loader's resolutions of every lane ELF file are checked, not only the server's maps."""
    lane_dir = fake_lane.make_lane(tmp / "lane")
    _script(lane_dir / "bin" / "llama-completion", VERSION_SCRIPT)
    planted = tmp / "planted"
    fake_lane.build_linked_elf(tmp, lane_dir / "bin" / "llama-gguf-split", planted, str(planted))
    evidence = fake_lane.make_evidence(lane_dir, tmp / "linux-x86_64-cpu.evidence.pb")
    report = run(tmp, lane_dir, evidence, skip=("op_oracle", "cpu_variants", "upstream_ctest", "graph_smoke",
                                                 "concurrency", "cancellation", "speed"))
    return refused_check(report, "artifact_integrity", "libplanted.so resolves to")


def case_server_maps_a_planted_library(tmp: pathlib.Path) -> Refusal:
    """A lane server that loads a library from outside the lane and the system (a copy of libm
    planted in /tmp stands for an injected one): refused when the server is up."""
    import ctypes.util
    import shutil

    from tools.runner.checks import concurrency
    from tools.runner.steps import Step
    libm = ctypes.util.find_library("m")
    system = next((p for p in (pathlib.Path("/lib/x86_64-linux-gnu") / (libm or ""), pathlib.Path("/usr/lib64") / (libm or ""))
                   if libm and p.is_file()), None)
    assert system is not None, "no system libm to plant"
    planted = tmp / "planted" / "libplanted.so"
    planted.parent.mkdir()
    shutil.copyfile(system, planted)
    ctx = fake_lane.server_context(tmp, "cancel", load=str(planted))
    try:
        status, message = concurrency.run_concurrency(ctx, Step(concurrency.STEP, ctx.logs_dir, ctx.tracker))
    finally:
        ctx.tracker.stop_all()
    assert "mapped libraries from outside the lane" in message and str(planted) in message, message
    return Refusal("concurrency", message)


CASES = [
    RedTeamCase(1, "lane process rewrites its step's config.json", case_config_file_rewritten),
    RedTeamCase(1, "forged exit + lanes-config lines in tool output", case_forged_config_lines),
    RedTeamCase(2, "reference CPU lane that is not its evidence's", case_unverified_reference_lane),
    RedTeamCase(2, "accelerator logits bit-identical to the CPU lane's", case_accelerator_is_the_cpu_lane),
    RedTeamCase(3, "loosened parity flags, fewer KV types, no --policy", case_loosened_flags_without_policy),
    RedTeamCase(4, "llama-logits replaying an earlier run's output", case_replayed_logits),
    RedTeamCase(4, "CPU-variant loader line of another host", case_loader_line_of_another_host),
    RedTeamCase(5, "llama-logits tokenizing the prompt as BOS only", case_bos_only),
    RedTeamCase(6, "lane binary rewrites a sibling after artifact_integrity", case_binary_swapped_after_hashing),
    RedTeamCase(6, "lane server maps a library planted outside the lane", case_server_maps_a_planted_library),
    RedTeamCase(6, "lane binary's RUNPATH resolves a planted library", case_binary_resolves_a_planted_library),
]

if __name__ == "__main__":
    sys.exit("run through //tests/red_team:fake_cases_test")
