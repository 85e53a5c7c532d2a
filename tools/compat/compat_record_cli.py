"""Writes the unsigned CompatibilityRecord JSON of a mixed-route measurement, for certify_cli --mode=sign_compat.

  python3 -m tools.compat.compat_record_cli --measurement=OUT --records=evidence/records --model=MODEL.gguf \
      --out=compat.json
"""

from __future__ import annotations

import pathlib
import sys

from absl import app, flags
from google.protobuf import json_format

from tools.compat import compat_record

FLAGS = flags.FLAGS
flags.DEFINE_string("measurement", None, "rpc_route_cli's --out_dir (compat_report.json + logs/).")
flags.DEFINE_string("records", None, "Directory of the lanes' signed certification records.")
flags.DEFINE_string("model", None, "The model the route served (its sha256 must be the measurement's): the "
                    "corpus bounds are re-derived from its tensor types, never taken from the measurement.")
flags.DEFINE_string("out", None, "Where the CompatibilityRecord JSON is written.")
flags.mark_flags_as_required(["measurement", "records", "model", "out"])


def main(argv: list[str]) -> int:
    del argv
    try:
        rec = compat_record.build(pathlib.Path(FLAGS.measurement),
                                  compat_record.records_by_report_digest(pathlib.Path(FLAGS.records)),
                                  model=pathlib.Path(FLAGS.model))
    except compat_record.CompatibilityInputError as err:
        print(f"compat_record: {err}", file=sys.stderr)
        return 1
    pathlib.Path(FLAGS.out).write_text(json_format.MessageToJson(rec, sort_keys=True) + "\n")
    print(FLAGS.out)
    return 0


if __name__ == "__main__":
    app.run(main)
