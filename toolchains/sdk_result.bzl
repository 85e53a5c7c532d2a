"""The dict every SDK detection returns: AVAILABLE or UNAVAILABLE, and why (see sdk_detect.bzl)."""

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
