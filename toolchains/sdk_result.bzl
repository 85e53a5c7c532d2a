"""What every SDK detector is and returns (see sdk_detect.bzl, sdk_table.bzl).

A detector is `sdk_detector(...)`: a struct with the SDK's name, the environment variables its
detection reads, `detect(rctx)` returning an SDK dict (sdk_available / sdk_unavailable), and
`build(sdk)` returning the env, cache_entries and build_data a lane needs from an AVAILABLE SDK.
"""

# The one command that re-runs @lane_sdks after an SDK is installed or removed where no variable
# that the rule declares changed (e.g. hipcc installed into /usr/bin, already on PATH).
REDETECT = "bazel sync --only=lane_sdks"

def sdk_available(name, version, path, reason = "", **extra):
    """An SDK the lane can build with."""
    return dict(name = name, status = "AVAILABLE", version = version, path = path, reason = reason, **extra)

def sdk_unavailable(name, reason, redetect = REDETECT, version = "", path = "", after = "installing it", **extra):
    """An SDK that is missing or unusable; the reason ends with the command that re-detects.

    Args:
      name: SDK name.
      reason: what is missing and what to install.
      redetect: the re-detect command; "" for reasons no installation can change.
      version: version found, if any.
      path: path found, if any.
      after: what the user does before re-detecting ("installing it", "fixing it").
      **extra: more fields for the evidence and the matrix.
    Returns:
      the SDK dict.
    """
    if redetect:
        reason = "{} (after {}, run: {})".format(reason, after, redetect)
    return dict(name = name, status = "UNAVAILABLE", version = version, path = path, reason = reason, **extra)

def no_build_settings(_sdk):
    """`build` of an SDK the host's toolchain already provides: nothing to add."""
    return {}

def sdk_detector(name, detect, build = no_build_settings, environ = []):
    """One SDK's entry of the table in sdk_table.bzl.

    Args:
      name: the SDK name lanes name in their `sdk` field.
      detect: function(rctx) -> the SDK dict (sdk_available or sdk_unavailable).
      build: function(sdk dict) -> {env, cache_entries, build_data} for a lane built with it.
      environ: environment variables `detect` reads (@lane_sdks re-runs when one changes).
    Returns:
      the detector struct.
    """
    return struct(name = name, detect = detect, build = build, environ = environ)

def run_tool(rctx, argv):
    """stdout + stderr of a command that succeeded, else None."""
    res = rctx.execute(argv, timeout = 30)
    return res.stdout + res.stderr if res.return_code == 0 else None

def first_line(text):
    return text.strip().splitlines()[0] if text and text.strip() else ""
