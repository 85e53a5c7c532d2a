"""One error root for Lanes. Every package's errors subclass LanesError.

`code` is a stable reason code (admission reports it, tests match it; it never changes meaning once
released) and `exit_status` is what a CLI exits with when this error ends it, so a CLI chooses its
status from the error's type, never from its message.
"""

from __future__ import annotations

EXIT_FAILURE = 1
EXIT_UNAVAILABLE = 2
EXIT_UNWRITABLE = 3
EXIT_USAGE = 4


class LanesError(Exception):
    """Base of every error Lanes raises on purpose."""

    code = "lanes-error"
    exit_status = EXIT_FAILURE


class UsageError(LanesError):
    """The command line or a configuration file asks for something that cannot be done."""

    code = "usage"
    exit_status = EXIT_USAGE


class UnwritableOutputError(LanesError):
    """An output (a report, a record, a run directory) cannot be written; nothing partial was left."""

    code = "unwritable-output"
    exit_status = EXIT_UNWRITABLE


def exit_status_of(err: BaseException) -> int:
    """The exit status for an error that ends a CLI: the type's, EXIT_FAILURE for foreign errors."""
    return err.exit_status if isinstance(err, LanesError) else EXIT_FAILURE
