"""Typed schedule knobs: one frozen dataclass per rule (paired with its function in ``rules.py``), built from
a schedule file's JSON.

A schedule file is data a user edits, so every key is checked: an unknown key, a missing required one, a value
of the wrong JSON type or outside its allowed set is a one-line ``UsageError`` naming the file, the schedule and
the key. Knobs left ``None`` are derived from the target when the rule runs (``CpuIsa``: vector lanes and the
register budget), so one file serves AVX2, AVX-512 and NEON.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Literal

from ..support.errors import UsageError

# Knob fields that name parts of the kernel they schedule: its blocks, or its buffers. ``schedule/names.py`` checks
# every such name against the kernel before a rule runs, so a renamed block is one clear line, not a TVM error.
BLOCKS, BUFFERS = {"names": "block"}, {"names": "buffer"}


def _blocks(default=()):
    return dataclasses.field(default=default, metadata=BLOCKS)


@dataclasses.dataclass(frozen=True)
class GemmOperands:
    """What a GEMM block multiplies: its activation and weight buffers (by name); ``widen``: copy the
    activation once per call into a kernel-local FP32 buffer (BF16 activations)."""

    activation: str = dataclasses.field(metadata=BUFFERS)
    weight: str = dataclasses.field(metadata=BUFFERS)
    widen: bool = False


@dataclasses.dataclass(frozen=True)
class CpuGemm:
    """``cpu_gemm``: a register tile of ``register_rows`` token rows x ``column_vectors`` vectors of columns,
    K streamed in ``k_chunk`` order, the weight packed column-blocked once (``pack_weight``), strips in parallel
    over ``parallel``. ``register_rows``/``column_vectors`` None: from the target's register budget. With
    ``dot_products`` (and a packed weight), BF16 and int8 blocks use the target's dot-product instructions
    (``bf16_dot.py``, ``int8_dot.py``) with their own tile of ``dot_rows`` x ``dot_vectors`` accumulators (None:
    ``cpu_rules.dot_tile`` picks; set on a block the ISA has no dot product for, an error), and the FMA knobs do
    not apply to them."""

    blocks: dict[str, GemmOperands] = dataclasses.field(metadata=BLOCKS)
    epilogue: tuple[str, ...] = _blocks()
    inline: tuple[str, ...] = _blocks()  # spatial blocks computed into their consumers first (a fused epilogue)
    k_chunk: int = 128
    register_rows: int | None = None
    column_vectors: int | None = None
    parallel: Literal["columns", "tokens"] = "columns"
    unroll: bool = True
    accumulator: Literal["global", "local"] = "local"  # local: a register tile (passes.register_tiles)
    pack_weight: bool = True
    dot_products: bool = True  # the ISA's BF16/int8 dot products where the operands allow (int8_dot, bf16_dot)
    dot_rows: int | None = None
    dot_vectors: int | None = None


@dataclasses.dataclass(frozen=True)
class CpuRows:
    """``cpu_rows``: rows in parallel (``parallel``), columns vectorised ``vector_width`` lanes (None: the
    target's FP32 lanes); ``compute_at_row`` producers move under the row loop (consumer first);
    ``lane_reductions``: row reductions whose result does not depend on their order (a max) kept as one partial
    result per lane, then reduced across the lanes; ``interleaved_chains``: blocks reducing several outputs of a
    row (the norms' chunk sums) run ``cpu_rules.CHAINS`` of them side by side, each in its own order."""

    row_block: str = dataclasses.field(metadata=BLOCKS)
    compute_at_row: tuple[str, ...] = _blocks()
    parallel_blocks: tuple[str, ...] = _blocks()
    lane_reductions: tuple[str, ...] = _blocks()
    interleaved_chains: tuple[str, ...] = _blocks()
    vector_width: int | None = None
    parallel: Literal["rows", "none"] = "rows"


@dataclasses.dataclass(frozen=True)
class CpuGeneric:
    """``cpu_generic``: a kernel no schedule file names, matched by pattern (``patterns.py``): ``inline`` blocks
    computed into their consumers (in order), each ``vectorize`` block's innermost loop split by the vector
    width (``vector_width``; None: the target's FP32 lanes, narrowed to divide the loop) and vectorised, each
    ``parallel`` block's outer loop run in parallel."""

    inline: tuple[str, ...] = _blocks()
    vectorize: tuple[str, ...] = _blocks()
    parallel: tuple[str, ...] = _blocks()
    vector_width: int | None = None


@dataclasses.dataclass(frozen=True)
class CpuBatchedGemm:
    """``cpu_batched_gemm``: a batched matmul ``Y[b..., i, j] += A[b..., i, k] * B[b..., k, j]`` matched by
    pattern (``patterns.py``: attention's ``bmm``/``einsum``): per batch a register tile of ``register_rows`` rows
    x ``column_vectors`` vectors of ``j`` (None: from the ISA's register file and the shapes), K in order, the
    batches and row blocks in parallel; ``inline``/``epilogue`` as in ``cpu_generic``."""

    block: str = dataclasses.field(metadata=BLOCKS)
    inline: tuple[str, ...] = _blocks()
    epilogue: tuple[str, ...] = _blocks()
    register_rows: int | None = None
    column_vectors: int | None = None


@dataclasses.dataclass(frozen=True)
class CpuLmHead:
    """``cpu_lm_head``: the TP LM head with an owner's selected rows innermost, in one vector register (their
    count is the kernel's 8 rows); vocab columns in parallel, K in chunk order (bitwise the plain kernel)."""

    select_block: str = _blocks("select_rows")
    logits_block: str = _blocks("logits")


@dataclasses.dataclass(frozen=True)
class GpuGemm:
    """``gpu_gemm``: a thread block per 16-token tile x ``column_tile`` columns, 16 row-warps x ``k_threads``
    K lanes, ``vector_width`` elements per load, the weight K chunk staged in shared memory (``stage_weight``)."""

    blocks: dict[str, GemmOperands] = dataclasses.field(metadata=BLOCKS)
    column_tile: int
    k_threads: int
    vector_width: int
    stage_weight: Literal["shared"] | None = None
    epilogue: tuple[str, ...] = _blocks()
    epilogue_threads: int = 256


@dataclasses.dataclass(frozen=True)
class GpuGemv:
    """``gpu_gemv``: decode GEMMs streaming the weight once. A warp per ``warp_columns`` output columns,
    ``warps`` warps a block, 32 lanes splitting K in ``vector_width``-element (16-byte) loads; each lane keeps
    rows x columns partial sums in registers, the warp finishes with shuffles; no shared memory, no barrier.
    ``row_variants``: the token counts with a kernel of their own (only the real rows run); above them, tiles
    of 16 rows. ``dot``: ``dp4a`` for int8 x int8 -> int32 blocks (4 products a lane per instruction).
    ``fuse``: the GEMMs and their one ``epilogue`` block in one kernel (else the epilogue is flat, its own)."""

    blocks: dict[str, GemmOperands] = dataclasses.field(metadata=BLOCKS)
    warp_columns: int
    warps: int
    vector_width: int
    row_variants: tuple[int, ...] = (1, 2, 4, 8)
    k_unroll: int = 1
    dot: Literal["dp4a"] | None = None
    fuse: bool = False
    epilogue: tuple[str, ...] = _blocks()
    epilogue_threads: int = 256


@dataclasses.dataclass(frozen=True)
class GpuRows:
    """``gpu_rows``: a thread block per row, ``threads`` lanes over its columns; see ``gpu_rules.gpu_rows``."""

    row_block: str = dataclasses.field(metadata=BLOCKS)
    threads: int
    compute_at_row: tuple[str, ...] = _blocks()
    cross_thread: tuple[str, ...] = _blocks()
    own_kernel: tuple[str, ...] = _blocks()


@dataclasses.dataclass(frozen=True)
class GpuFlat:
    """``gpu_flat``: every loop of each block fused over blocks x ``threads`` (copies)."""

    blocks: tuple[str, ...] = dataclasses.field(metadata=BLOCKS)
    threads: int


def _convert(value, hint, where: str):
    """``value`` (decoded JSON) as type ``hint``, or a UsageError naming ``where``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(value, arg, where)
            except UsageError:
                continue
        raise UsageError(f"{where}: {value!r} is not a {hint}")
    if origin is Literal:
        if value not in args:
            raise UsageError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise UsageError(f"{where}: expected a list, got {value!r}")
        return tuple(_convert(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise UsageError(f"{where}: expected an object, got {value!r}")
        return {k: _convert(v, args[1], f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise UsageError(f"{where}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{where}: expected a positive integer, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise UsageError(f"{where}: expected a string, got {value!r}")
        return value
    raise TypeError(f"no JSON conversion for {hint}")  # pragma: no cover - a knob type this module lacks


def from_json(cls, data, where: str):
    """An instance of knob dataclass ``cls`` from a JSON object; ``where`` prefixes every error."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected an object, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UsageError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(fields)})")
    missing = [n for n, f in fields.items() if n not in data
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise UsageError(f"{where}: missing key {missing[0]!r}")
    return cls(**{k: _convert(v, hints[k], f"{where}: key {k!r}") for k, v in data.items()})

