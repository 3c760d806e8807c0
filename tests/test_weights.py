"""Packed weights are held by identity, never hashed: the same objects unchanged are served again; another object,
or one changed in place (torch's version counter, a numpy array made writeable again, a tensor re-pointed), is
packed anew; a packed numpy weight and the arrays it views are read-only."""

import numpy as np
import pytest
import torch

from mtp_tvm.compiler.weights import WeightCache, is_tracked
from mtp_tvm.support.errors import UsageError


class CountingCache:
    """A ``WeightCache`` whose packing counts itself (its packed "tensors" are the count)."""

    def __init__(self):
        self.cache, self.packs = WeightCache(), 0

    def get(self, weights: dict):
        return self.cache.get(weights, lambda w: list(w.values()), self._transform)

    def _transform(self, arrays):
        self.packs += 1
        return [self.packs]


def test_the_same_objects_are_packed_once_and_other_objects_anew():
    cache, w = CountingCache(), torch.ones(4, 3)
    first = cache.get({"w": w})
    assert cache.get({"w": w}) is first and cache.packs == 1
    cache.get({"w": w.clone()})  # equal bytes, another object: packed again, nothing hashed
    assert cache.packs == 2
    cache.get({"w": w, "v": w})  # another set of names
    assert cache.packs == 3


def test_a_torch_weight_changed_in_place_is_packed_anew():
    cache, w = CountingCache(), torch.ones(4, 3)
    packed = cache.get({"w": w})
    w[0].zero_()  # through a view: views share the version counter
    assert packed.change() == ("w", "changed in place")
    assert cache.get({"w": w}) is not packed and cache.packs == 2
    repacked = cache.get({"w": w})
    w.data = torch.zeros(4, 3)  # re-pointed without an in-place op
    assert repacked.change() == ("w", "was re-pointed, reshaped or re-typed in place")


def test_a_packed_numpy_weight_and_the_arrays_it_views_are_read_only():
    cache, big = CountingCache(), np.ones((8, 3), np.float32)
    w = big[:4]
    packed = cache.get({"w": w})
    for target in (w, big):
        with pytest.raises(ValueError, match="read-only"):
            target[0, 0] = 2
    assert packed.change() is None and cache.get({"w": w}) is packed
    big.flags.writeable = True  # numpy: the base first, then the view
    w.flags.writeable = True
    assert packed.change() == ("w", "was made writeable again")
    assert cache.get({"w": w}) is not packed and not w.flags.writeable and not big.flags.writeable


def test_a_numpy_view_of_a_torch_tensor_is_watched_through_the_tensor():
    cache, t = CountingCache(), torch.ones(4, 3)
    packed = cache.get({"w": t.numpy()})
    t.add_(1)
    assert packed.change() == ("w", "changed in place")


def test_an_inference_tensor_is_never_served_from_the_cache():
    with torch.inference_mode():
        w = torch.ones(3)
    assert not is_tracked(w) and not is_tracked(w.numpy()) and is_tracked(torch.ones(3)) and is_tracked(np.ones(3))
    cache = CountingCache()
    packed = cache.get({"w": w})
    assert packed.change() == ("w", "is a torch inference tensor (no version counter)")
    cache.get({"w": w})
    assert cache.packs == 2


def test_weights_that_fail_validation_stay_writeable_and_the_last_set_stays_cached():
    cache, good, bad = CountingCache(), np.ones(3), np.ones(3)
    packed = cache.get({"w": good})

    def refuse(weights):
        raise UsageError("bad weight")

    with pytest.raises(UsageError):
        cache.cache.get({"w": bad}, refuse, cache._transform)
    assert bad.flags.writeable and cache.get({"w": good}) is packed and cache.packs == 1
