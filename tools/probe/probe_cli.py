"""Probes a node's llama-server once against a reference and prints the result as JSON.

    bazel run //tools/probe:probe_cli -- --node=http://10.0.0.7:8080 --reference=http://127.0.0.1:8080 \
        --vocab_size=49152 --certified_tokens_per_s=180 --model=smollm2-135m-instruct-q4_1.gguf

Exit status 0: pass; 1: the node failed (probe-failed) or is far below its certified speed
(probe-speed); 2: the probe could not be made (the reference did not answer, bad flags).
"""

from __future__ import annotations

import dataclasses
import json
import sys

from absl import app, flags

from tools.probe import probe

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
for _name in ("node", "reference", "vocab_size", "certified_tokens_per_s"):
    flags.mark_flag_as_required(_name)
FLAGS = flags.FLAGS


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
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
    print(json.dumps(out, indent=1, sort_keys=True))
    return 0 if result.verdict == probe.PASS else 1


if __name__ == "__main__":
    app.run(main)
