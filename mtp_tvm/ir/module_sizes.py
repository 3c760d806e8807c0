"""A module file's model at another size than its example: ``--shape NAME=DIM,...`` names an input's shape, checked
against ``main``'s (fixed sizes equal, each symbolic size the same wherever it appears and within the
``dynamic_shapes()`` bounds the import recorded); the inputs at that size are drawn from a seed (floats standard
normal, integers within the example's range) and the parameters stay the file's. Sizes whose inputs would not fit
in this machine's memory are refused before anything is allocated; symbolic sizes are said by the user's ``Dim``
names (``names``: torch's symbol -> its name) where the file gave them. No TVM here: ``run`` on an artifact uses it
too."""

from __future__ import annotations

import math
import os

import numpy as np

from ..contract.cases import TensorDecl
from ..support.errors import UsageError

Bounds = dict[str, tuple[int, int | None]]  # symbolic size -> (lowest, highest or None)


def parse_shapes(items) -> dict[str, tuple[int, ...]]:
    """``["x=16,32", ...]`` -> ``{"x": (16, 32)}``; a malformed item is a one-line error."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or ():
        name, sep, dims = (s.strip() for s in str(item).partition("="))
        parts = [d.strip() for d in dims.split(",")] if sep else []
        if not name or not parts or not all(p.isascii() and p.isdigit() and int(p) > 0 for p in parts):
            raise UsageError(f"--shape {item!r}: expected NAME=DIM[,DIM...] with positive integer sizes "
                             "(e.g. x=16,32)")
        if name in shapes:
            raise UsageError(f"--shape names {name} twice")
        shapes[name] = tuple(int(p) for p in parts)
    return shapes


def physical_memory() -> int:
    """This machine's memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def bind_sizes(specs: dict[str, TensorDecl], activations: tuple[str, ...], shapes: dict[str, tuple[int, ...]],
               bounds: Bounds | None, names: dict[str, str] | None = None) -> dict[str, int]:
    """Each symbolic size's value at ``shapes`` (input name -> shape), every rule above checked."""
    def say(dim: str) -> str:
        return (names or {}).get(dim, dim)

    def said(shape) -> list:
        return [say(d) if isinstance(d, str) else d for d in shape]

    unknown = sorted(set(shapes) - set(activations))
    if unknown:
        raise UsageError(f"--shape {', '.join(unknown)}: not an input of the module (its inputs: "
                         f"{', '.join(activations)})")
    sizes: dict[str, int] = {}
    for name, shape in shapes.items():
        spec = specs[name]
        if len(shape) != len(spec.shape):
            raise UsageError(f"--shape {name}: {len(shape)} sizes for an input of {len(spec.shape)} dims "
                             f"{said(spec.shape)}")
        for i, (want, have) in enumerate(zip(spec.shape, shape)):
            if isinstance(want, int):
                if want != have:
                    raise UsageError(f"--shape {name}: dim {i} is fixed at {want}, got {have}")
            elif sizes.setdefault(want, have) != have:
                raise UsageError(f"--shape {name}: dim {i} is the symbolic size {say(want)}, already {sizes[want]}")
    for name in activations:
        free = [d for d in specs[name].shape if isinstance(d, str) and d not in sizes]
        if free:
            raise UsageError(f"--shape: input {name} {said(specs[name].shape)} has the free size(s) "
                             f"{', '.join(map(say, free))}: give its shape too")
    for dim, value in sizes.items():
        low, high = (bounds or {}).get(dim, (1, None))
        if value < low or (high is not None and value > high):
            raise UsageError(f"--shape: the symbolic size {say(dim)}={value} is outside dynamic_shapes()'s bounds "
                             f"[{low}, {'inf' if high is None else high}]")
    return sizes


def sized_inputs(specs: dict[str, TensorDecl], activations: tuple[str, ...], examples: dict[str, np.ndarray],
                 shapes: dict[str, tuple[int, ...]], bounds: Bounds | None, seed: int = 0,
                 names: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Every input of ``main`` at ``shapes``: the activations drawn from ``seed``, the parameters the examples'."""
    sizes = bind_sizes(specs, activations, shapes, bounds, names)
    need = sum(math.prod(sizes.get(d, d) for d in specs[name].shape) * examples[name].dtype.itemsize
               for name in activations)
    if need > physical_memory():
        raise UsageError(f"--shape: the inputs at these sizes take {need / 2**30:,.1f} GiB, more than this "
                         f"machine's {physical_memory() / 2**30:,.1f} GiB of memory")
    rng = np.random.default_rng(seed)
    out = dict(examples)
    for name in activations:
        shape = tuple(sizes.get(d, d) for d in specs[name].shape)
        like = examples[name]
        if like.dtype.kind in "iu":
            out[name] = rng.integers(int(like.min(initial=0)), int(like.max(initial=0)) + 1, shape).astype(like.dtype)
        elif like.dtype.kind == "b":
            out[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            out[name] = rng.standard_normal(shape, dtype=np.float32).astype(like.dtype)
    return out
