"""support/choice.py and the choices spelled once with it (tune spaces, bisect searches)."""

import json

import pytest

from mtp_tvm.schedule.tune_space import TuneSpace
from mtp_tvm.support.errors import UsageError
from mtp_tvm.tools.bisect.search import BisectSearch


def test_a_name_is_read_as_its_member_and_spelled_as_before():
    assert TuneSpace.parse("generic", "space") is TuneSpace.GENERIC
    assert TuneSpace.parse(TuneSpace.HAND, "space") is TuneSpace.HAND
    assert json.dumps({TuneSpace.HAND: BisectSearch.LINEAR}) == '{"hand": "linear"}'
    assert f"{BisectSearch.BINARY}" == "binary"
    assert TuneSpace.names() == ("hand", "generic", "both") and BisectSearch.names() == ("binary", "linear")
    assert all(type(n) is str for n in TuneSpace.names())  # argparse shows its choices' repr


@pytest.mark.parametrize("kind, name, message", [
    (TuneSpace, "all", "space must be one of hand, generic, both, got 'all'"),
    (BisectSearch, "ternary", "search must be one of binary, linear, got 'ternary'"),
    (BisectSearch, None, "search must be one of binary, linear, got None"),
])
def test_another_name_is_a_one_line_usage_error(kind, name, message):
    with pytest.raises(UsageError, match=message):
        kind.parse(name, message.split()[0])


def test_both_spaces_include_each_and_a_single_space_only_itself():
    assert TuneSpace.BOTH.includes(TuneSpace.HAND) and TuneSpace.BOTH.includes(TuneSpace.GENERIC)
    assert TuneSpace.HAND.includes(TuneSpace.HAND) and not TuneSpace.HAND.includes(TuneSpace.GENERIC)
    assert not TuneSpace.GENERIC.includes(TuneSpace.HAND)
