"""RFC 3339 UTC timestamps, the only time format records and policies carry."""

from __future__ import annotations

import datetime as dt

from tools.policy.errors import BadTimestampError

UTC = dt.timezone.utc


def now() -> dt.datetime:
    return dt.datetime.now(UTC).replace(microsecond=0)


def format_utc(t: dt.datetime) -> str:
    """2025-01-31T12:00:00Z; naive datetimes are taken as UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    t = t.astimezone(UTC)
    text = t.strftime("%Y-%m-%dT%H:%M:%S")
    if t.microsecond:
        text += f".{t.microsecond:06d}".rstrip("0")
    return text + "Z"


def parse_utc(text: str, field: str = "timestamp") -> dt.datetime:
    """Parses RFC 3339 with an explicit offset; raises BadTimestampError for anything else."""
    if not text:
        raise BadTimestampError(f"{field} is empty; write it as RFC 3339 UTC, e.g. 2025-01-31T12:00:00Z")
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError as err:
        raise BadTimestampError(f"{field} {text!r} is not RFC 3339; write e.g. 2025-01-31T12:00:00Z") from err
    if t.tzinfo is None:
        raise BadTimestampError(f"{field} {text!r} has no UTC offset; append 'Z'")
    return t.astimezone(UTC)
