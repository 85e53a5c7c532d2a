"""Probes a node's llama-server once against a reference and prints the result as JSON.

    bazel run //tools/probe:probe_cli -- --node=http://10.0.0.7:8080 --reference=http://127.0.0.1:8080 \
        --vocab_size=49152 --certified_tokens_per_s=180 --model=smollm2-135m-instruct-q4_1.gguf

With --record (the node's signed certification record) and --policy, the record is verified and gives
the certified speed (speed.tg_tokens_per_s), the lane, the record id and the model sha256: the probe
is judged against exactly what admission will hold it to.

With --log and --tracker_key the result is also signed as a ProbeRecord for --node_id, --lane_id,
--record_id and --model_sha256 and appended to the hash-chained probe log (tools/probe/probe_log.py),
which admission reads.

Exit status 0: pass; 1: the node failed (probe-failed) or is far below its certified speed
(probe-speed); 2: the probe could not be made (the reference did not answer, bad flags, a log that
does not verify).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

from absl import app, flags

from tools.certify import records
from tools.policy import dsse, keys, safe_io, timestamps
from tools.policy import policy as policy_lib
from tools.policy.errors import TrustError
from tools.probe import probe, probe_log

flags.DEFINE_string("node", None, "The node's llama-server, http://HOST:PORT.")
flags.DEFINE_string("reference", None, "The reference llama-server (a certified CPU lane the Tracker runs).")
flags.DEFINE_integer("vocab_size", None, "The model's vocabulary size (the random token nonce is drawn below it).")
flags.DEFINE_float("certified_tokens_per_s", None, "The generation speed the node's certification record states.")
flags.DEFINE_string("model", "", "The model name the node must answer as (llama-server's --alias); empty: not checked.")
flags.DEFINE_float("deadline_s", 30.0, "Deadline of each request.")
flags.DEFINE_float("max_abs_delta_logprob", probe.Tolerances.max_abs_delta_logprob, "Tolerance (nats).")
flags.DEFINE_float("min_top1_agreement", probe.Tolerances.min_top1_agreement, "Tolerance.")
flags.DEFINE_float("min_greedy_prefix", probe.Tolerances.min_greedy_prefix, "Fraction of the continuation.")
flags.DEFINE_float("min_speed_fraction", probe.Tolerances.min_speed_fraction, "Of the certified speed.")
flags.DEFINE_string("record", "", "The node's certification record (DSSE JSON), verified with --policy's keys.")
flags.DEFINE_string("policy", "", "The admission policy whose trusted keys verify --record.")
flags.DEFINE_string("log", "", "Probe log (JSON lines) to append the signed record to; empty: print only.")
flags.DEFINE_string("tracker_key", "", "The Tracker's Ed25519 private key (PEM) that signs probe records.")
flags.DEFINE_string("node_id", "", "The node's id in the route (its node.json).")
flags.DEFINE_string("lane_id", "", "The node's lane id.")
flags.DEFINE_string("record_id", "", "The certification record the node was admitted with.")
flags.DEFINE_string("model_sha256", "", "The model the node serves (sha256).")
for _name in ("node", "reference", "vocab_size"):
    flags.mark_flag_as_required(_name)
CERTIFIED_SPEED_METRIC = "speed.tg_tokens_per_s"


def _from_record() -> str:
    """Fills the certified speed, lane, record id and model from --record; the reason it cannot."""
    if bool(FLAGS.record) != bool(FLAGS.policy):
        return "--record and --policy go together"
    if not FLAGS.record:
        return "" if FLAGS.certified_tokens_per_s is not None else "give --certified_tokens_per_s or --record"
    pol = policy_lib.load_policy(FLAGS.policy)
    env = dsse.envelope_from_json(safe_io.read_regular_file(FLAGS.record))
    rec = records.verify_record(env, policy_lib.validate(pol), list(pol.supported_record_schema_versions))
    derived = {"certified_tokens_per_s": rec.metrics.get(CERTIFIED_SPEED_METRIC), "lane_id": rec.scope.lane_id,
               "record_id": rec.record_id, "model_sha256": rec.model.sha256}
    if derived["certified_tokens_per_s"] is None:
        return f"{FLAGS.record}: the record states no {CERTIFIED_SPEED_METRIC}"
    for name, value in derived.items():
        given = FLAGS[name].value
        if given not in (None, "") and given != value:
            return f"--{name}={given} contradicts the record's {value}"
        FLAGS[name].value = value
    return ""
FLAGS = flags.FLAGS


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        why = _from_record()
    except (TrustError, OSError) as err:
        why = f"{FLAGS.record}: {err}"
    if why:
        print(f"probe_cli: {why}", file=sys.stderr)
        return 2
    tol = probe.Tolerances(FLAGS.max_abs_delta_logprob, FLAGS.min_top1_agreement, FLAGS.min_greedy_prefix,
                           FLAGS.min_speed_fraction)
    try:
        result = probe.probe(FLAGS.node, FLAGS.reference, FLAGS.vocab_size, FLAGS.certified_tokens_per_s, tol,
                             FLAGS.deadline_s, FLAGS.model)
    except probe.ProbeError as err:
        print(f"probe_cli: no probe made: {err}", file=sys.stderr)
        return 2
    out = dataclasses.asdict(result)
    out["challenge_digest"] = result.challenge.digest()
    if FLAGS.log:
        missing = [f for f in ("tracker_key", "node_id", "lane_id", "record_id", "model_sha256") if not FLAGS[f].value]
        if missing:
            print(f"probe_cli: --log needs --{', --'.join(missing)}", file=sys.stderr)
            return 2
        try:
            key = keys.load_private_key(FLAGS.tracker_key)
            rec = probe_log.make_record(result, FLAGS.node_id, FLAGS.lane_id, FLAGS.record_id, FLAGS.model_sha256,
                                        timestamps.format_utc(timestamps.now()))
            signed = probe_log.append(pathlib.Path(FLAGS.log), rec, key, {dsse.keyid_for(key): key.public_key()})
        except (TrustError, probe_log.ProbeLogError, OSError) as err:
            print(f"probe_cli: the probe was made but not logged: {err}", file=sys.stderr)
            return 2
        out["probe_record_digest"], out["sequence"] = signed.digest, signed.record.sequence
    print(json.dumps(out, indent=1, sort_keys=True))
    return 0 if result.verdict == probe.PASS else 1


if __name__ == "__main__":
    app.run(main)
