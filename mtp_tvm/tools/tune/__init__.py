"""``tune``: the MetaSchedule search of a case's or a module file's kernels over the hand and generic design
spaces, locally or on a TVM RPC tracker's servers (``..remote``), into the database a ``tuned`` build replays."""
