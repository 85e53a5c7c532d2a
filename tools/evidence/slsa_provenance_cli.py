"""Writes a lane build's SLSA Provenance v1 (an in-toto Statement v1) from its build evidence.

    bazel run //tools/evidence:slsa_provenance_cli -- --evidence=bazel-bin/lanes/cpu.evidence.pb --out=cpu.provenance.json
"""

from __future__ import annotations

import pathlib
import sys

from absl import app, flags

from tools.evidence import build_evidence, slsa_provenance

flags.DEFINE_string("evidence", None, "The lane's build evidence (<lane>.evidence.pb).")
flags.DEFINE_string("out", "", "Where the statement is written (default: stdout).")
flags.mark_flag_as_required("evidence")
FLAGS = flags.FLAGS


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        text = slsa_provenance.statement_json(build_evidence.read_evidence(pathlib.Path(FLAGS.evidence)))
    except (build_evidence.EvidenceError, ValueError) as err:
        print(f"slsa_provenance: {FLAGS.evidence}: {err}", file=sys.stderr)
        return 1
    if FLAGS.out:
        out = pathlib.Path(FLAGS.out)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(out)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    app.run(main)
