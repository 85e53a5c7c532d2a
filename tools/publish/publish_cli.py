"""Publishes certification/compatibility records and revocations to a TUF record repository.

  publish --mode=init --repository=DIR --root_key=r1.key --root_key=r2.key --root_key=r3.key \\
          --root_threshold=2 --targets_key=~/.config/lanes/keys/lanes-issuer.key \\
          --snapshot_key=snap.key --timestamp_key=ts.key
  publish --mode=add --repository=DIR --records_dir=evidence/records --targets_key=... --snapshot_key=... --timestamp_key=...
  publish --mode=revoke --repository=DIR --record=<file> | --record_digest=sha256:<hex> \\
          | --lane_id=<lane> [--backend= --driver_major= --device_name= ...] | --issuer_public_key=<pub> \\
          --reason="driver 580 regression" --targets_key=... --snapshot_key=... --timestamp_key=...
  publish --mode=rotate --repository=DIR --root_key=r1.key --root_key=r2.key --new_targets_key=new.key \\
          --retire=honour-issued-before|refuse-all --snapshot_key=... --timestamp_key=...
  publish --mode=rotate_online --repository=DIR --root_key=r1.key --root_key=r2.key \\
          --new_snapshot_key=snap2.key --new_timestamp_key=ts2.key    # after a fast-forward attack or a leak
  publish --mode=timestamp --repository=DIR --timestamp_key=ts.key     # re-sign before it expires (daily)
  publish --mode=keygen --name=lanes-root-1 [--key_dir=~/.config/lanes/keys]

Each mode that changes the repository writes one complete new version (timestamp last). Exit 0 on
success, 1 when refused (the reason is printed), 2 for bad flags.
Flags only; the work is in tools/publish/publish_files.py and repository.py.
"""

from __future__ import annotations

import sys

from absl import app, flags

from tools.core.errors import exit_status_of
from tools.policy import keys, safe_io
from tools.policy.errors import TrustError
from tools.publish import publish_files, repository, revocations

FLAGS = flags.FLAGS
flags.DEFINE_enum("mode", None, ["init", "add", "revoke", "rotate", "rotate_online", "timestamp", "keygen"],
                  "What to do.", required=True)
flags.DEFINE_string("repository", "", "The repository directory (served as is by any static server).")
flags.DEFINE_multi_string("root_key", [], "init/rotate: root private keys (rotate: at least the root threshold).")
flags.DEFINE_integer("root_threshold", 1, "init: root signatures a root update needs.", lower_bound=1)
flags.DEFINE_multi_string("targets_key", [], "Issuer key(s): sign records, revocations, checkpoints, targets.")
flags.DEFINE_string("snapshot_key", "", "Snapshot role key.")
flags.DEFINE_string("timestamp_key", "", "Timestamp role key.")
flags.DEFINE_multi_string("record", [], "add: record envelope file(s); revoke: the record file to revoke.")
flags.DEFINE_string("records_dir", "", "add: every *.dsse.json in this directory.")
flags.DEFINE_string("record_digest", "", "revoke: sha256:<hex> over the record's DSSE PAE (what was signed; "
                    "--record=<file> computes it).")
flags.DEFINE_string("lane_id", "", "revoke by scope: lane id.")
for _f in ("backend", "os", "arch", "vendor", "device_name", "compute_capability", "driver_major"):
    flags.DEFINE_string(_f, "", f"revoke by scope: device class {_f} (empty matches any).")
flags.DEFINE_string("issuer_public_key", "", "revoke by issuer key: its public key file (.pub or .pub.raw).")
flags.DEFINE_string("effective_from", "", "revoke by issuer key: RFC 3339 time from which its records are revoked.")
flags.DEFINE_string("reason", "", "revoke/rotate: why, shown by Trackers as 'revoked: <reason>'.")
flags.DEFINE_multi_string("new_targets_key", [], "rotate: the new issuer key(s).")
flags.DEFINE_string("new_snapshot_key", "", "rotate_online: the new snapshot role key.")
flags.DEFINE_string("new_timestamp_key", "", "rotate_online: the new timestamp role key.")
flags.DEFINE_enum("retire", "honour-issued-before", ["honour-issued-before", "refuse-all"],
                  "rotate: what happens to records the retired key signed.")
flags.DEFINE_string("name", "lanes-root", "keygen: key file name.")
flags.DEFINE_string("key_dir", "", "keygen: directory outside any git work tree.")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        print(f"usage: unexpected arguments {safe_io.escape(argv[1:])}", file=sys.stderr)
        sys.exit(2)
    try:
        if FLAGS.mode == "keygen":
            files = keys.generate(FLAGS.name, FLAGS.key_dir or None)
            print(f"private key {files.private_key}\npublic key  {files.public_pem}\nkeyid       {files.keyid}")
            return
        if not FLAGS.repository:
            raise repository.PublishError("--repository is required")
        repo = repository.RecordRepository(publish_files.resolve(FLAGS.repository))
        s = publish_files.signers(FLAGS.root_key, FLAGS.targets_key, FLAGS.snapshot_key, FLAGS.timestamp_key)
        if FLAGS.mode == "init":
            repo.init(s.root, FLAGS.root_threshold, s.of("targets"), s.of("snapshot")[0], s.of("timestamp")[0])
            print(f"initialised {repo.dir}: give Trackers {repo.metadata_dir / '1.root.json'} as their bootstrap root")
        elif FLAGS.mode == "add":
            v = repo.publish(s, publish_files.record_inputs(FLAGS.record, FLAGS.records_dir))
            print(f"published targets version {v} ({repo.dir})")
        elif FLAGS.mode == "revoke":
            device = {f: getattr(FLAGS, f) for f in ("backend", "os", "arch", "vendor", "device_name",
                                                      "compute_capability", "driver_major")}
            rev = publish_files.revocation_from_flags(
                reason=FLAGS.reason, record_digest=FLAGS.record_digest, record_file=(FLAGS.record or [""])[0],
                lane_id=FLAGS.lane_id, device_fields=device, issuer_public_key=FLAGS.issuer_public_key,
                effective_from=FLAGS.effective_from)
            v = repo.publish(s, (), [revocations.sign(rev, s.of("targets")[0])])
            print(f"revocation published in targets version {v}")
        elif FLAGS.mode == "rotate":
            new = publish_files.load_keys(FLAGS.new_targets_key)
            if not new:
                raise repository.PublishError("rotate needs --new_targets_key")
            v = repo.rotate_targets_key(s, new, FLAGS.retire, reason=FLAGS.reason or "issuer key rotated")
            print(f"root v{repo.root().signed.version} lists the new targets key; retirement published in targets version {v}")
        elif FLAGS.mode == "rotate_online":
            if not FLAGS.new_snapshot_key or not FLAGS.new_timestamp_key:
                raise repository.PublishError("rotate_online needs --new_snapshot_key and --new_timestamp_key")
            snapshot_key, timestamp_key = publish_files.load_keys([FLAGS.new_snapshot_key, FLAGS.new_timestamp_key])
            v = repo.rotate_online_keys(s, snapshot_key, timestamp_key)
            print(f"root v{v} lists the new snapshot and timestamp keys; snapshot and timestamp re-signed with them")
        elif FLAGS.mode == "timestamp":
            print(f"timestamp version {repo.refresh_timestamp(s.of('timestamp')[0])}")
    except TrustError as err:
        print(f"{err.code}: {safe_io.escape(err)}", file=sys.stderr)
        sys.exit(exit_status_of(err))


if __name__ == "__main__":
    app.run(main)
