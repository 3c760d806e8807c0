"""The jobs users come for, one folder (wing) per command: ``convert`` (a DeepSeek checkpoint's weights for a
case, and ``load_weights``), ``check`` (and its follow-ups on a failure),
``minimize`` (a failing module file cut to its smallest failing piece), ``bisect``, ``bench``, ``tune``,
``dumps``, and ``measure`` (the kernel profile, this machine's peaks and the roofline model, the code's
instruction counts) that check and bench share. ``remote.py``: TVM RPC for ``tune`` and ``bench``. A wing imports
from the layers below ``tools``, from ``remote`` and from the wings before it in ``tests/test_layers.py``'s
``TOOL_WINGS`` (remote, convert, measure, dumps, check, minimize, bisect, tune, bench), never from one after it."""
