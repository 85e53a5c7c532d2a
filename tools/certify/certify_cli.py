"""Certification CLI: keys, signing runner reports into records, verifying, in-toto export.

  certify_cli --mode=keygen --name=lanes-ci                      # ~/.config/lanes/keys/lanes-ci.{key,pub}
  certify_cli --mode=sign --report=RUN/runner_report.pb --key=~/.config/lanes/keys/lanes-ci.key \\
              --policy=policy.json --out_dir=records     # audits RUN first; refuses what does not audit
  certify_cli --mode=verify --record=records/<lane>.<device>.record.dsse.json --policy=policy.json
  certify_cli --mode=intoto --record=... --policy=policy.json --out=statement.json [--key=... to sign it]
  certify_cli --mode=sign_compat --compat=compat.json --key=... --policy=policy.json --out_dir=records

Flags only; the work is in tools/certify/certify.py (and tools/policy/keys.py for keygen).
"""

from __future__ import annotations

import sys

from absl import app, flags
from google.protobuf import json_format

from tools.certify import certify
from tools.core.errors import exit_status_of
from tools.policy import keys, safe_io
from tools.policy.errors import TrustError

FLAGS = flags.FLAGS
flags.DEFINE_enum("mode", None, ["keygen", "sign", "verify", "intoto", "sign_compat"], "What to do.", required=True)
flags.DEFINE_string("name", "lanes", "keygen: key file name.")
flags.DEFINE_string("key_dir", "", "keygen: directory outside any git work tree (default ~/.config/lanes/keys).")
flags.DEFINE_string("key", "", "sign/sign_compat/intoto: private key (<name>.key).")
flags.DEFINE_string("policy", "", "Admission policy JSON whose trusted keys verify records.")
flags.DEFINE_string("report", "", "sign: <run dir>/runner_report.pb; the run dir (logs, build_evidence.pb) is audited first.")
flags.DEFINE_string("spec", "", "sign: the lane spec the audit derives required checks from (default: lanes/spec.json "
                    "in the runfiles, $LANES_SPEC).")
flags.DEFINE_string("compat", "", "sign_compat: CompatibilityRecord as JSON (issuer/times are filled in).")
flags.DEFINE_string("record", "", "verify/intoto: record envelope (.dsse.json).")
flags.DEFINE_string("out_dir", "records", "sign/sign_compat: where records are written.")
flags.DEFINE_string("out", "", "intoto: statement output (default: stdout).")
flags.DEFINE_enum("predicate", "lanes", ["lanes", "test_result"], "intoto: the project's predicate "
                  "(https://lanes.dev/certification/v1) or the standard in-toto test result (v0.1), which carries "
                  "the record.")
flags.DEFINE_integer("validity_days", 30, "sign/sign_compat: days until the record expires.")


def main(argv: list[str]) -> None:
    del argv
    try:
        if FLAGS.mode == "keygen":
            files = keys.generate(FLAGS.name, FLAGS.key_dir or None)
            print(f"private key {files.private_key} (keep it out of every repository)")
            print(f"public key  {files.public_pem}\nkeyid       {files.keyid}")
            print(f"trust it:   policy_tool --policy=<policy.json> --public_key={files.public_pem} --owner=<who>")
        elif FLAGS.mode == "sign":
            print(certify.certify_report(FLAGS.report, FLAGS.key, FLAGS.policy, FLAGS.out_dir, FLAGS.validity_days,
                                         spec_path=FLAGS.spec or None))
        elif FLAGS.mode == "sign_compat":
            print(certify.sign_compatibility_file(FLAGS.compat, FLAGS.key, FLAGS.policy, FLAGS.out_dir, FLAGS.validity_days))
        elif FLAGS.mode == "verify":
            print(json_format.MessageToJson(certify.verify(FLAGS.record, FLAGS.policy), preserving_proto_field_name=True,
                                            sort_keys=True))
        elif FLAGS.mode == "intoto":
            text = certify.export_intoto(FLAGS.record, FLAGS.policy, FLAGS.out or None, FLAGS.key or None,
                                         predicate=FLAGS.predicate)
            print(FLAGS.out if FLAGS.out else text, end="\n" if FLAGS.out else "")
    except TrustError as err:
        print(f"{err.code}: {safe_io.escape(err)}", file=sys.stderr)
        sys.exit(exit_status_of(err))


if __name__ == "__main__":
    app.run(main)
