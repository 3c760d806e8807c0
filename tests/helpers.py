"""What several test files share: where the checkout and its examples are, and a silent log."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
# the int32-accumulator plugin pass: a build that fails its golden check in a known kernel
INT32_ACCUMULATOR_PLUGIN = EXAMPLES / "int32_logits_accumulator.py"
QUIET = {"log": lambda *_: None}  # keyword for check/localize: no progress lines in the test output
