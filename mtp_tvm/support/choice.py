"""A closed set of names a user picks one of (a CLI choice, an options field), as a string enum: JSON and the
command line spell the members as plain strings, and a name outside the set is a one-line ``UsageError``."""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from .errors import UsageError


class Choice(StrEnum):
    """Subclasses list the members; ``parse`` reads a user's string."""

    @classmethod
    def parse(cls, name: str, what: str) -> Self:
        """``name`` as a member (a member passes as it is); ``what`` names the option in the error."""
        try:
            return cls(name)
        except ValueError:
            raise UsageError(f"{what} must be one of {', '.join(cls)}, got {name!r}") from None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The members as plain strings (argparse's choices: its error message shows their repr)."""
        return tuple(m.value for m in cls)
