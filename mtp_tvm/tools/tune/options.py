"""How ``tune`` searches, apart from the tuner (which imports TVM): the command line declares its flags from
these fields (``support.flags``) without loading it."""

from __future__ import annotations

import dataclasses
import os

from ...schedule.tune_space import TuneSpace
from ...support.errors import UsageError
from ...support.flags import option


@dataclasses.dataclass(frozen=True)
class TuneOptions:
    """How ``tune`` searches (what it tunes is a ``BuildSpec``): ``trials`` in all, hand points included;
    ``work_dir`` the database folder (None: ``schedule.tuned.tuned_dir``), warm-started from; ``seed`` of the
    search; ``budget`` seconds after which the search stops (None: the trials decide); ``rpc = (HOST:PORT,
    key)`` measure on a TVM RPC tracker's servers; ``space`` a ``TuneSpace`` (or its name); ``module`` a module
    file (``--module FILE.py``) whose kernels are tuned instead of the spec's case."""

    trials: int = option(64, help="trials over all kernels", type=int, metavar="N")
    work_dir: str | os.PathLike | None = option(None, help="database folder", shown="schedules/tuned/<target>/<case>",
                                                metavar="DIR")
    seed: int = option(0, help="search seed", type=int, metavar="S")
    budget: float | None = option(None, help="stop the search after this many seconds of tuning (the trials "
                                  "measured are kept; the hand points are measured first whatever the budget)",
                                  type=float, metavar="SECONDS")
    rpc: tuple[str, str] | None = None  # --rpc-tracker and --rpc-key (cli/common.py: bench's too)
    space: TuneSpace = option(TuneSpace.BOTH, help="design spaces: our hand rules with sampled knobs, MetaSchedule's "
                              "generic rules, or both", choices=TuneSpace.names())
    module: str | os.PathLike | None = None  # --module, every command's

    def __post_init__(self):
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise UsageError(f"trials must be a positive integer, got {self.trials!r}")
        if self.budget is not None and (isinstance(self.budget, bool) or not isinstance(self.budget, (int, float))
                                        or not self.budget > 0 or self.budget == float("inf")):
            raise UsageError(f"budget must be a positive number of seconds, got {self.budget!r}")
        object.__setattr__(self, "space", TuneSpace.parse(self.space, "space"))
