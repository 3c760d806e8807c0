"""One error vocabulary: every failure a user can cause is an ``MtpError`` with a one-line message."""

from __future__ import annotations


class MtpError(Exception):
    """A user-caused error (bad case, shape, dtype, target, path ...). The CLI prints it and exits 2."""

    exit_code = 2


class UsageError(MtpError):
    """Bad command-line or API arguments."""


class BuildError(MtpError):
    """TVM could not lower or build the module for the requested target: ``place`` where (``in pass P on ...``,
    empty when no pass was running), ``cause`` TVM's own line."""

    exit_code = 3

    def __init__(self, message: str, place: str = "", cause: str = ""):
        super().__init__(message)
        self.place, self.cause = place, cause


def last_line(error: BaseException | str) -> str:
    """The line of a TVM error (or error text) a user reads: its C++ traces are many lines, the message the last
    one (the exception's type name when it has no text)."""
    lines = [ln for ln in str(error).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(error).__name__


def did_you_mean(name: str, known, list_known: bool = False, n: int = 3, cutoff: float = 0.5) -> str:
    """The tail of an unknown-name message: ``; did you mean A, B?`` from the close matches, else (with
    ``list_known``) ``; it has ...`` (the first ten), else nothing."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=n, cutoff=cutoff)
    if close:
        return f"; did you mean {', '.join(close)}?"
    return f"; it has {', '.join(sorted(known)[:10])}" if list_known and known else ""
