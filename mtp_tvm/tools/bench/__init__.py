"""``bench``: TVM raced against what a user would run instead, TVM and each peer in a worker process of its own
(``worker.py``: the pipe protocol), side by side at every T. ``bench.py`` runs the race for a case,
``module_bench.py`` for a module file; the TVM builds in their worker (``tvm_worker.py``), the peers in theirs
(``peer_worker.py``: a case's, and a module file's own model), each stage as a user computes it without TVM
(``stage_peers.py``). The roofline it reports is ``measure``'s."""
