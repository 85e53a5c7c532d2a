"""Creates or updates an AdmissionPolicy JSON: trusted keys with validity windows, required checks,
speed floors, maximum record age.

  policy_tool --policy=policy.json --policy_id=lanes-prod \\
    --public_key=~/.config/lanes/keys/ci.pub --owner=ci --valid_days=365 \\
    --required_check=fixture_parity --speed_floor='*:speed.tg_tokens_per_s:5'

Flags only; the work is in tools/admission/policy_edit.py.
"""

from __future__ import annotations

import json
import pathlib
import sys

from absl import app, flags

from proto import admission_pb2
from tools.admission import policy_edit
from tools.core.errors import exit_status_of
from tools.policy import policy as policy_lib
from tools.policy import timestamps
from tools.policy.errors import TrustError

FLAGS = flags.FLAGS
flags.DEFINE_string("policy", None, "Policy JSON to create or update in place.", required=True)
flags.DEFINE_string("policy_id", "", "Policy id (required when creating).")
flags.DEFINE_string("public_key", "", "Public key file to trust (PEM or raw 32 bytes, e.g. <name>.pub).")
flags.DEFINE_string("owner", "", "Who holds the trusted key.")
flags.DEFINE_string("not_before", "", "Key valid from (RFC 3339 UTC); default now.")
flags.DEFINE_string("not_after", "", "Key valid until (RFC 3339 UTC); default not_before + --valid_days.")
flags.DEFINE_integer("valid_days", 365, "Key validity when --not_after is not given.")
flags.DEFINE_multi_string("required_check", [], "Check that must be PASS in a record (replaces the list if given).")
flags.DEFINE_multi_string("lane_required_check", [], "LANE:CHECK that must also be PASS in that lane's records "
                          "(e.g. linux-x86_64-cuda:upstream_ctest); added to the policy's lane list.")
flags.DEFINE_multi_string("remove_speed_floor", [], "LANE:METRIC floor to drop (e.g. one on a metric the runner no "
                          "longer floors).")
flags.DEFINE_multi_string("speed_floor", [], "LANE:METRIC:MIN, LANE '*' for every lane (replaces same lane+metric).")
flags.DEFINE_multi_string("metric_ceiling", [], "LANE:METRIC:MAX, e.g. '*:cancellation.stream_task_seconds:5' "
                          "(replaces same lane+metric; the runner uses it as the check's bound).")
flags.DEFINE_multi_string("remove_key", [], "Keyid to stop trusting (e.g. a lost key, or one whose records were "
                          "superseded); every record it signed is then refused as unknown-key.")
flags.DEFINE_integer("max_record_age_days", None, "Refuse records issued longer ago than this.")
flags.DEFINE_list("compatibility_bounds", [], "MAX_MEAN_KL,MIN_TOP1,MAX_ABS_DELTA_LOGIT,MIN_GREEDY: what every "
                  "compatibility record must meet; without them no mixed-backend route is admitted.")
flags.DEFINE_list("quantized_compatibility_bounds", [], "The same four numbers for routes on a model with weight "
                  "types other than F32; without them no mixed-backend route on such a model is admitted.")
flags.DEFINE_multi_integer("supported_record_schema_version", [], "Record schema versions accepted (replaces).")
flags.DEFINE_string("lanes_spec", "", "The lane spec (default: //lanes:spec.json in this tool's runfiles): "
                    "lane-scoped entries must name one of its lanes or '*'.")


def main(argv: list[str]) -> None:
    del argv
    try:
        policy = _run_from_flags()
    except (TrustError, OSError) as err:
        print(f"{getattr(err, 'code', 'error')}: {err}", file=sys.stderr)
        sys.exit(exit_status_of(err))
    print(f"{FLAGS.policy}: policy {policy.policy_id}, {len(policy.trusted_keys)} trusted key(s), "
          f"digest {policy_lib.policy_digest(policy)}")


def _known_lanes() -> list[str] | None:
    """The spec's lane ids, needed only when a flag names a lane."""
    if not (FLAGS.lane_required_check or FLAGS.speed_floor or FLAGS.metric_ceiling):
        return None
    # Not resolved: __file__ sits in the runfiles tree, beside the spec this tool's data names.
    spec = pathlib.Path(FLAGS.lanes_spec or pathlib.Path(__file__).parent.parent.parent / "lanes" / "spec.json")
    try:
        return list(json.loads(spec.read_text())["lanes"])
    except (OSError, ValueError, KeyError) as err:
        raise TrustError(f"{spec}: cannot read the lane spec's lanes ({err}); run through bazel run "
                           "//tools/admission:policy_tool or pass --lanes_spec=bazel-bin/lanes/spec.json") from None


def _run_from_flags() -> admission_pb2.AdmissionPolicy:
    public_key = pathlib.Path(FLAGS.public_key).expanduser().read_bytes() if FLAGS.public_key else None
    return policy_edit.update_policy_file(
        FLAGS.policy,
        policy_id=FLAGS.policy_id,
        public_key=public_key,
        owner=FLAGS.owner,
        not_before=timestamps.parse_utc(FLAGS.not_before, "--not_before") if FLAGS.not_before else None,
        not_after=timestamps.parse_utc(FLAGS.not_after, "--not_after") if FLAGS.not_after else None,
        valid_days=FLAGS.valid_days,
        required_checks=FLAGS.required_check or None,
        speed_floors=[policy_edit.parse_speed_floor(s) for s in FLAGS.speed_floor],
        metric_ceilings=[policy_edit.parse_speed_floor(s) for s in FLAGS.metric_ceiling],
        max_record_age_days=FLAGS.max_record_age_days,
        supported_record_schema_versions=FLAGS.supported_record_schema_version or None,
        remove_keyids=FLAGS.remove_key,
        compatibility_bounds=_bounds(FLAGS.compatibility_bounds, "compatibility_bounds"),
        quantized_compatibility_bounds=_bounds(FLAGS.quantized_compatibility_bounds, "quantized_compatibility_bounds"),
        lane_required_checks=[policy_edit.parse_lane_pair(s, "lane_required_check", "linux-x86_64-cuda:upstream_ctest")
                              for s in FLAGS.lane_required_check],
        remove_speed_floors=[policy_edit.parse_lane_pair(s, "remove_speed_floor", "linux-x86_64-cuda:speed.speedup_pp")
                             for s in FLAGS.remove_speed_floor],
        known_lanes=_known_lanes(),
    )


def _bounds(values: list[str], flag: str) -> tuple[float, float, float, float] | None:
    if not values:
        return None
    if len(values) != 4:
        raise app.UsageError(f"--{flag} takes four numbers: MAX_MEAN_KL,MIN_TOP1,MAX_ABS_DELTA_LOGIT,MIN_GREEDY")
    try:
        kl, top1, delta, greedy = (float(v) for v in values)
    except ValueError as err:
        raise app.UsageError(f"--{flag}: {err}") from err
    return kl, top1, delta, greedy


if __name__ == "__main__":
    app.run(main)
