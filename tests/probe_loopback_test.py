"""Serving-time probes against the CPU lane's own llama-server on loopback: the node that serves the
certified file passes; the same model in another quantization and with slightly perturbed weights
are refused with their figures; a proxy in front of the honest server that answers from a cache of
earlier challenges is refused, one that throttles it far below the certified speed is flagged. Two
servers, one thread each, 16-token challenges: bounded in requests (2 per probe) and time (a deadline
per request); every server and proxy is stopped by the test."""

from __future__ import annotations

import contextlib
import datetime as dt
import http.server
import json
import os
import pathlib
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format

from tools.admission import admission
from tools.certify import records, sample_reports
from tools.model import make_tiny_model
from tools.policy import dsse, timestamps
from tools.probe import probe, probe_log
from tools.runner import llama_server

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."))
SERVER = RUNFILES / "lanes" / "lanes" / "cpu" / "bin" / "llama-server"
EMBEDDED = RUNFILES / "lanes" / "tools" / "model" / "tiny_llama_f32.gguf"
DEADLINE_S = 60.0
# Generation speed stated for the comparison: the embedded model's is tens of thousands of tokens
# a second on the CPU lane; a probe's 16 tokens over HTTP are far from that, so the floor is low here.
CERTIFIED_TOKENS_PER_S = 100.0


def _vocab() -> pathlib.Path:
    for arg in sys.argv:
        if arg.startswith("--vocab="):
            return pathlib.Path(arg.split("=", 1)[1])
    raise AssertionError("run through Bazel (--vocab=)")


@contextlib.contextmanager
def _server(model: pathlib.Path, log: pathlib.Path):
    port = llama_server.free_port()
    argv = [str(SERVER), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "256", "-np", "1",
            "-t", "1", "--no-warmup", "-a", "m.gguf"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if json.loads(r.read()).get("status") == "ok":
                        break
            time.sleep(0.2)
        else:
            raise AssertionError(f"llama-server on {model.name} not healthy in 60 s")
        yield url
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    with _server(EMBEDDED, tmp_path_factory.mktemp("ref") / "server.log") as url:
        yield url


def _vocab_size() -> int:
    import gguf
    return len(gguf.GGUFReader(EMBEDDED, "r").fields["tokenizer.ggml.tokens"].data)


def _probe_file(model: pathlib.Path, reference: str, tmp: pathlib.Path,
                certified: float = CERTIFIED_TOKENS_PER_S) -> probe.Result:
    with _server(model, tmp / "node.log") as url:
        return probe.probe(url, reference, _vocab_size(), certified, deadline_s=DEADLINE_S, expected_model="m.gguf")


def _row(case: str, r: probe.Result) -> str:
    f = r.figures
    return (f"| {case} | {f.greedy_prefix}/{r.challenge.n_predict} | {f.top1_agreement:.3f} | "
            f"{f.max_abs_delta_logprob:.4g} | {f.tokens_per_s:.0f} / {f.certified_tokens_per_s:.0f} | {r.verdict} | "
            f"{r.seconds:.2f} s |")


def test_the_certified_file_passes(reference, tmp_path):
    r = _probe_file(EMBEDDED, reference, tmp_path)
    print(_row("certified file", r))
    assert r.verdict == probe.PASS, r.reasons
    assert r.figures.max_abs_delta_logprob == 0.0 and r.figures.greedy_prefix == probe.N_PREDICT


def test_another_quantization_of_the_same_model_is_refused(reference, tmp_path):
    q4 = tmp_path / "tiny_llama_q4_0.gguf"
    make_tiny_model.make_tiny_model(_vocab(), q4, dtype="q4_0")
    r = _probe_file(q4, reference, tmp_path)
    print(_row("Q4_0 of the same weights", r))
    assert r.verdict == probe.FAILED and r.figures.max_abs_delta_logprob > 0.05, r.reasons


def test_slightly_perturbed_weights_are_refused(reference, tmp_path, monkeypatch):
    made = make_tiny_model.make_weights

    def perturbed(*args, **kw):
        weights = made(*args, **kw)
        rng = np.random.default_rng(7)
        # 1% relative noise on every matrix: a model that is almost, not quite, the file.
        for name, w in weights.items():
            if w.ndim == 2:
                weights[name] = w * (1 + 0.01 * rng.standard_normal(w.shape)).astype(np.float32)
        return weights

    monkeypatch.setattr(make_tiny_model, "make_weights", perturbed)
    model = tmp_path / "tiny_llama_perturbed.gguf"
    make_tiny_model.make_tiny_model(_vocab(), model, dtype="f32")
    r = _probe_file(model, reference, tmp_path)
    print(_row("1% noise on every matrix", r))
    assert r.verdict == probe.FAILED and r.figures.max_abs_delta_logprob > 0.0, r.reasons


@contextlib.contextmanager
def _proxy(upstream: str, mode: str):
    """A node that is the honest server behind a lie: "replay" answers every request with the first
    answer it got (a cache of earlier challenges); "throttle" holds each answer 0.1 s a token."""
    cache: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if mode == "replay" and "answer" in cache:
                answer = cache["answer"]
            else:
                req = urllib.request.Request(upstream + self.path, data=body, headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=30) as r:
                    answer = r.read()
                cache.setdefault("answer", answer)
            if mode == "throttle":
                time.sleep(0.1 * json.loads(body)["n_predict"])
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_node_answering_from_a_cache_of_earlier_challenges_is_refused(reference, tmp_path):
    with _server(EMBEDDED, tmp_path / "node.log") as honest, _proxy(honest, "replay") as node:
        first = probe.probe(node, reference, _vocab_size(), CERTIFIED_TOKENS_PER_S, deadline_s=DEADLINE_S,
                            expected_model="m.gguf")
        second = probe.probe(node, reference, _vocab_size(), CERTIFIED_TOKENS_PER_S, deadline_s=DEADLINE_S,
                             expected_model="m.gguf")
    print(_row("replay of the first answer (second probe)", second))
    assert first.verdict == probe.PASS, first.reasons
    assert second.verdict == probe.FAILED and second.figures.greedy_prefix < probe.N_PREDICT, second.reasons


def test_a_node_throttled_far_below_its_certified_speed_is_flagged(reference, tmp_path):
    with _server(EMBEDDED, tmp_path / "node.log") as honest, _proxy(honest, "throttle") as node:
        r = probe.probe(node, reference, _vocab_size(), CERTIFIED_TOKENS_PER_S, deadline_s=DEADLINE_S,
                        expected_model="m.gguf")
    print(_row("throttled to 10 tok/s", r))
    assert r.verdict == probe.SPEED and r.figures.speed_fraction < 0.25, r.reasons


def test_admission_cites_the_signed_probe_and_refuses_the_node_once_a_probe_fails(reference, tmp_path):
    """A node certified (a sample record of the CPU lane) serves the certified file and is probed:
    the signed probe record admits it and the decision cites it. The node then serves the Q4_0 file:
    its next probe fails and the same node is refused with the probe's reasons."""
    issuer, tracker = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    policy = sample_reports.make_policy(issuer)
    year = dt.timedelta(days=365)
    policy.trusted_keys.append(sample_reports.trusted_key(tracker, sample_reports.NOW - year, sample_reports.NOW + year))
    policy.probes.min_passing_probes, policy.probes.max_age_s = 1, 3600
    policy.probes.tracker_keyids.append(dsse.keyid_for(tracker))
    report = sample_reports.make_report()
    now = timestamps.now()
    record = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(issuer), now, 30,
                                        policy.policy_id)
    envelope, node = records.sign_record(record, issuer), sample_reports.node_for(report)
    route = admission.route_from_nodes([node], sample_reports.MODEL_SHA256, "probed", sample_reports.make_recipe(
        kv_cache_types=["f16"], flash_attention=["off"], context_size=2048, parallel_sequences=1))
    log, trusted = tmp_path / "probes.jsonl", {dsse.keyid_for(tracker): tracker.public_key()}

    def probe_and_decide(model: pathlib.Path):
        # Judged against the speed the record certifies, as admission requires.
        result = _probe_file(model, reference, tmp_path, record.metrics[admission.CERTIFIED_SPEED_METRIC])
        rec = probe_log.make_record(result, node.node_id, node.lane_id, record.record_id, sample_reports.MODEL_SHA256,
                                    timestamps.format_utc(timestamps.now()))
        signed = probe_log.append(log, rec, tracker, trusted)
        verified = probe_log.read(log, trusted)
        return signed, admission.decide(policy, [envelope], [], route, timestamps.now(), probes=verified)

    honest, admitted = probe_and_decide(EMBEDDED)
    print("probe record:", json_format.MessageToJson(honest.record, indent=None), "envelope", honest.digest)
    print("decision:", json_format.MessageToJson(admitted, indent=None))
    assert admitted.routable and list(admitted.probe_record_digests) == [honest.digest], admitted.reasons
    q4 = tmp_path / "tiny_llama_q4_0.gguf"
    make_tiny_model.make_tiny_model(_vocab(), q4, dtype="q4_0")
    failed, refused = probe_and_decide(q4)
    print("decision after the failed probe:", json_format.MessageToJson(refused, indent=None))
    assert failed.record.verdict == probe.FAILED and failed.record.sequence == 1
    assert not refused.routable and refused.reasons[0].startswith("probe-failed: the latest probe of node ")
    assert sorted(refused.probe_record_digests) == sorted([honest.digest, failed.digest])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
