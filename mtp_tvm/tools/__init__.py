"""The jobs users come for, one folder (wing) per command: ``check`` (and its follow-ups on a failure),
``minimize`` (a failing module file cut to its smallest failing piece), ``bisect``, ``bench``, ``tune``,
``dumps``, and ``measure`` (the kernel profile, this machine's peaks and the roofline model, the code's
instruction counts) that check and bench share. ``remote.py``: TVM RPC for ``tune`` and ``bench``. A wing imports
from the layers below ``tools``, from ``remote`` and from the wings before it in ``tests/test_layers.py``'s
``TOOL_WINGS`` (measure, dumps, check, minimize, bisect, tune, bench), never from one after it."""
