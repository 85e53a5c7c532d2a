"""What a lane process's exit status means, in words: every message that reports one uses this.

Python's subprocess gives -N for a process killed by signal N; a shell (and ctest) give 128 + N.
A number alone hides a crash behind what looks like an ordinary failure (`exited -4`), so the
signal is named with what it most likely means for a llama.cpp binary.
"""

from __future__ import annotations

import signal

# Why a llama.cpp lane binary most likely got this signal.
_LIKELY_CAUSE = {
    signal.SIGILL: "illegal instruction: the binary ran an instruction this CPU cannot execute or "
                   "has not enabled (a CPU variant beyond the host's ISA, or AMX tiles used unconfigured)",
    signal.SIGSEGV: "segmentation fault: an invalid memory access (a backend or model-loading bug, or a "
                    "corrupt model file)",
    signal.SIGBUS: "bus error: a mapped file shrank or its pages became unreadable (model file changed "
                   "while mapped, or a full disk)",
    signal.SIGABRT: "abort: ggml/llama.cpp hit an assertion (GGML_ASSERT/GGML_ABORT) or the C++ runtime "
                    "terminated; its last output says which",
    signal.SIGFPE: "arithmetic exception: integer division by zero or overflow in a kernel",
    signal.SIGKILL: "killed: the runner's timeout, the kernel's OOM killer, or an operator",
    signal.SIGTERM: "terminated: stopped on request (the runner's timeout or a shutdown)",
    signal.SIGINT: "interrupted (Ctrl-C or the cancellation check's SIGINT)",
}


def signal_of(code: int) -> signal.Signals | None:
    """The signal that ended a process with this exit status, or None for an ordinary exit."""
    number = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else 0
    try:
        return signal.Signals(number) if number else None
    except ValueError:
        return None


def crashed(code: int) -> bool:
    """True when the process died of a signal that is a crash (not a stop the runner asked for)."""
    sig = signal_of(code)
    return sig is not None and sig in (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE)


def describe(code: int | str | None) -> str:
    """`0`, `1`, or `-4 (SIGILL: illegal instruction: ...)`: the status with its signal named.
    A status read back from a log may be text; what is not a number is returned as it is."""
    try:
        code = int(code)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(code)
    text = meaning(code)
    return f"{code} ({text})" if text else str(code)


def meaning(code: int) -> str:
    """`SIGILL: illegal instruction: ...` for a status that is a signal, else empty."""
    sig = signal_of(code)
    if sig is None:
        return ""
    return f"{sig.name}: {_LIKELY_CAUSE.get(sig, signal.strsignal(sig) or 'signal')}"
