"""The design spaces ``mtp-tvm tune`` searches, named once. No TVM here: the CLI offers them as ``--space``'s
choices without importing it."""

from __future__ import annotations

from ..support.choice import Choice


class TuneSpace(Choice):
    """``HAND``: our rules as design spaces (``schedule.space``, which also marks its candidates with this name);
    ``GENERIC``: MetaSchedule's own rules; ``BOTH``."""

    HAND = "hand"
    GENERIC = "generic"
    BOTH = "both"

    def includes(self, space: TuneSpace) -> bool:
        """Whether searching this space searches ``space`` (``BOTH`` holds either)."""
        return self in (space, TuneSpace.BOTH)
