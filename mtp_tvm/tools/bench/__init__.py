"""``bench``: TVM raced against what a user would run instead, TVM and each peer in a worker process of its own
(``worker.py``: the pipe protocol), side by side at every T, into one result (``result.py``). ``bench.py`` runs the
race (``race.py``) for a case, ``user_model.py`` what only a module file needs (its artifact, its own model as the
peers); the TVM builds in their worker (``tvm_worker.py``), the peers in theirs
(``peer_worker.py``: a case's, and a module file's own model), each stage as a user computes it without TVM
(``stage_peers.py``). The roofline it reports is ``measure``'s."""
