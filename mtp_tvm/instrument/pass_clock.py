"""Wall time inside a build's passes (the outermost ones: a pass run by another is not counted twice), so the
time line can split a build into its passes and the codegen around them without the pass recorder."""

from __future__ import annotations

import time

import tvm


@tvm.instrument.pass_instrument
class PassClock:
    def __init__(self):
        self.seconds, self._depth, self._since = 0.0, 0, 0.0

    def run_before_pass(self, _mod, _info):
        if self._depth == 0:
            self._since = time.perf_counter()
        self._depth += 1

    def run_after_pass(self, _mod, _info):
        self._depth -= 1
        if self._depth == 0:
            self.seconds += time.perf_counter() - self._since
