"""Why a record repository or a Tracker refresh is refused: one exception type per attack it defeats.

Each carries the reason code that admission reports ("rollback: ..."), like tools/policy/errors.py.
"""

from __future__ import annotations

from tools.policy.errors import TrustError


class DistributionError(TrustError):
    """Base of every repository / refresh failure."""

    code = "distribution"


class RollbackError(DistributionError):
    """Metadata older than what the Tracker already trusts (a replayed old record set)."""

    code = "rollback"


class FreezeError(DistributionError):
    """Expired metadata: the repository (or someone between) serves a stale view forever."""

    code = "freeze"


class MixAndMatchError(DistributionError):
    """Metadata of one role from another repository version than the snapshot/timestamp names."""

    code = "mix-and-match"


class TargetHashMismatchError(DistributionError):
    """A metadata or target file whose length or hashes differ from the signed ones."""

    code = "target-hash-mismatch"


class BelowThresholdError(DistributionError):
    """Metadata signed by fewer trusted keys than its role's threshold."""

    code = "below-threshold"


class RepositoryUnreachableError(DistributionError):
    """The repository could not be read (network, missing file); nothing was decided from it."""

    code = "repository-unreachable"


class LogForkError(DistributionError):
    """The transparency log is not an extension of the log the Tracker saw before (history rewritten)."""

    code = "log-fork"


class LogMismatchError(DistributionError):
    """The log's entries do not hash to its signed checkpoint, or the checkpoint is not signed."""

    code = "log-mismatch"


class RevocationDroppedError(DistributionError):
    """The log lists a revocation that the repository no longer serves."""

    code = "revocation-dropped"


class MalformedRevocationError(DistributionError):
    """A revocation that is not exactly one of: by record digest, by scope, by issuer key."""

    code = "malformed-revocation"


class PublishError(DistributionError):
    """The publisher refuses to write (a record not signed by a current targets key, a conflict)."""

    code = "publish-refused"


class SlowRetrievalError(DistributionError):
    """A mirror too slow to trust with a refresh: a file not complete within the deadline, or
    arriving below the minimum rate (a slow-retrieval attack holds a Tracker on old data)."""

    code = "slow-retrieval"


class EndlessDataError(DistributionError):
    """A metadata or target file longer than its signed length or its size cap (an endless-data
    attack fills the Tracker's disk or memory)."""

    code = "endless-data"


class MalformedMetadataError(DistributionError):
    """TUF metadata that is ambiguous JSON (a duplicate key: python-tuf would keep the last value)."""

    code = "malformed-metadata"


class TrackerStateError(DistributionError):
    """The Tracker's own state directory holds something it must not read (a FIFO, a device or a
    link to one, a file that is not JSON, a file where a directory belongs); never reset silently."""

    code = "tracker-state"
