"""How a bisect walks its candidates, named once. No TVM here: the CLI offers them as ``--search``'s choices
without importing it."""

from ...support.choice import Choice


class BisectSearch(Choice):
    """``BINARY``: log2(n) probes, the first failure when failure is monotone; ``LINEAR``: every prefix in order,
    the first failure for certain."""

    BINARY = "binary"
    LINEAR = "linear"
