"""Which token rows a CPU GEMM kernel runs: only the rows that matter, for every T, in one binary.

A GEMM kernel's rows are independent and padded rows past the real ones are never read into a real row, so the
schedule phase may cut the row loops before scheduling:

- ``trim_token_rows``: the loops over the padded rows ``ceil(T / 16) * 16`` cut to ``ceil(T / q) * q``, q the
  register rows of the kernel's tile (the Relax frontend's legalised GEMMs; the TIR kernels are written so).
- ``row_variants``: the kernel's body once per small T, chosen at run time on the bound T (``T <= 1``,
  ``T <= 2``, ``T <= 4``, then the general ``ceil(T / q) * q`` rows): decode sizes run 1, 2 or 4 rows instead
  of q. A variant's blocks are named ``<block>_rows<r>``; the general body keeps the block names, so schedules,
  traces and tuning records of the general kernel apply unchanged. The rows of each output element reduce in
  the same order in every variant (only the rows differ), so the outputs are bitwise those of the general body.

The schedule rules find a block's variants with ``row_variant_blocks`` (the kernel lists them in its
``VARIANTS_ATTR``) and fit a register tile to each.
"""

from __future__ import annotations

import functools

import tvm
from tvm import s_tir, tirx
from tvm.sym import Analyzer

from ..contract.presets import TOKEN_TILE

VARIANTS_ATTR = "mtp_tvm.row_variants"  # the small row counts a kernel has variants for, smallest first
SMALL_ROWS = (1, 2, 4)  # decode sizes with a variant of their own (below the kernel's register rows)


def variant_name(block: str, rows: int) -> str:
    return f"{block}_rows{rows}"


def token_count(func: tirx.PrimFunc) -> tirx.Var | None:
    """The kernel's symbolic token count: its one scalar int parameter (the TIR GEMMs' ``tokens``; Relax passes
    it to kernels whose buffers are shaped by it), or None."""
    scalars = [p for p in func.params if not isinstance(p.ty, tirx.BufferType) and "int" in str(p.ty)]
    return scalars[0] if len(scalars) == 1 else None


def _root(func: tirx.PrimFunc) -> s_tir.SBlock | None:
    return func.body.block if isinstance(func.body, s_tir.SBlockRealize) else None


def _rounded(tokens, quantum: int):
    return tirx.floordiv(tokens + (quantum - 1), quantum) * quantum


def _cut(stmt, is_rows, rows, suffix: str):
    """``stmt`` with every outer loop whose extent ``is_rows`` now running ``rows`` rows (the block iterator it
    binds gets the same domain) and every block under it renamed with ``suffix``."""
    def bind(s, loop_var):
        if isinstance(s, tirx.For):
            return tirx.For(s.loop_var, s.min, s.extent, s.kind, bind(s.body, loop_var), s.thread_binding,
                            s.annotations)
        if isinstance(s, tirx.SeqStmt):
            return tirx.SeqStmt([bind(x, loop_var) for x in s.seq])
        if isinstance(s, s_tir.SBlockRealize):
            b = s.block
            iters = [tirx.IterVar(tvm.ir.Range.from_min_extent(0, rows), iv.var, iv.iter_type, iv.thread_tag)
                     if isinstance(v, tirx.Var) and v.same_as(loop_var) else iv
                     for iv, v in zip(b.iter_vars, s.iter_values)]
            block = s_tir.SBlock(iters, b.reads, b.writes, b.name_hint + suffix, b.body, b.init, b.alloc_buffers,
                                 b.match_buffers, b.annotations)
            return s_tir.SBlockRealize(s.iter_values, s.predicate, block)
        return s

    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_cut(s, is_rows, rows, suffix) for s in stmt.seq])
    if isinstance(stmt, tirx.For) and is_rows(stmt.extent):
        return tirx.For(stmt.loop_var, stmt.min, rows, stmt.kind, bind(stmt.body, stmt.loop_var),
                        stmt.thread_binding, stmt.annotations)
    return stmt


def _with_root_body(func: tirx.PrimFunc, body, attrs: dict | None = None, allocs: bool = True) -> tirx.PrimFunc:
    root, realize = _root(func), func.body
    new_root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, body, root.init,
                            root.alloc_buffers if allocs else [], root.match_buffers, root.annotations)
    out = func.with_body(s_tir.SBlockRealize(realize.iter_values, realize.predicate, new_root))
    for key, value in (attrs or {}).items():
        out = out.with_attr(key, value)
    return out


def _token_loops(func: tirx.PrimFunc, quantum: int):
    """``(tokens, is_rows)`` where ``is_rows(extent)`` says a loop runs the token rows (the padded
    ``ceil(T / 16) * 16``, or already ``ceil(T / quantum) * quantum``); None when the kernel has no such loop,
    or another outer loop has a symbolic extent (e.g. ``T`` rows of an unpad fused into the kernel: TVM could
    not prove the cut rows cover them)."""
    tokens, root = token_count(func), _root(func)
    if tokens is None or root is None:
        return None
    analyzer = Analyzer()
    forms = (_rounded(tokens, TOKEN_TILE), _rounded(tokens, quantum))

    def is_rows(extent) -> bool:
        return any(analyzer.can_prove_equal(extent, f) for f in forms)

    body = root.body
    outer = [s for s in (body.seq if isinstance(body, tirx.SeqStmt) else [body]) if isinstance(s, tirx.For)]
    if not any(is_rows(s.extent) for s in outer) or any(
            not isinstance(s.extent, tirx.IntImm) and not is_rows(s.extent) for s in outer):
        return None
    return tokens, is_rows


def trim_token_rows(func: tirx.PrimFunc, quantum: int) -> tirx.PrimFunc:
    """``func`` with every outer loop over the token rows cut to ``ceil(T / quantum) * quantum``; the buffers
    keep their padded shape. Unchanged when it has no such loop, ``quantum`` is the whole tile, or another outer
    loop has a symbolic extent (``_token_loops``)."""
    found = None if quantum >= TOKEN_TILE else _token_loops(func, quantum)
    if found is None:
        return func
    tokens, is_rows = found
    return _with_root_body(func, _cut(_root(func).body, is_rows, _rounded(tokens, quantum), ""))


def rows_from_tokens(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its buffers' symbolic row count (``m``, bound by the caller's padded tensors) stated as
    ``ceil(T / 16) * 16`` of its token count T (T >= 1), which the caller's padding makes it. A schedule that tiles the
    token rows (``gpu_gemv``'s 16-row tiles) then covers its buffers exactly: with an unrelated ``m``, TVM
    guards every tile with ``row < m`` predicates that break its cross-thread reduction. The host code checks
    the stated shape on every call. Unchanged without a token count or a symbolic row count."""
    tokens = token_count(func)
    first = next((p for p in func.params if isinstance(p.ty, tirx.BufferType) and p.shape
                  and isinstance(p.shape[0], tirx.Var)), None)
    if tokens is None or first is None:
        return func
    # T >= 1 (spec presets refuse 0): stated so that TVM can bound a tile's rows by the buffer's statically
    one = tirx.IntImm(str(tokens.ty.dtype), 1)
    rows = tirx.decl_buffer([_rounded(tirx.max(tokens, one), TOKEN_TILE), *first.shape[1:]], first.dtype, first.name)
    return func.specialize({first: rows})


def block_columns(block: s_tir.SBlock):
    """A GEMM block's output columns: the extent of its second iterator (``t, n, k``)."""
    return block.iter_vars[1].dom.extent


def _scope(func: tirx.PrimFunc, name: str, body) -> s_tir.SBlockRealize:
    """``body`` in an opaque block of its own that allocates the kernel's intermediate buffers: a branch's blocks
    are then the only writers of their buffers in their scope (``cache_write``, the register tiles, requires
    it) and the root sees no intermediate (``cache_read`` of a weight at the root requires its region cover).
    Its access regions are derived from ``body``."""
    params = [p for p in func.params if isinstance(p.ty, tirx.BufferType)]
    own = list(_root(func).alloc_buffers)
    draft = s_tir.SBlock([], [], [], name, body)
    reads, writes = s_tir.analysis.get_sblock_read_write_region(draft, {b: b for b in (*params, *own)})
    outside = [[r for r in regions if not any(r.source.same_as(b) for b in own)] for regions in (reads, writes)]
    return s_tir.SBlockRealize([], True, s_tir.SBlock([], *outside, name, body, alloc_buffers=own))


def row_variants(func: tirx.PrimFunc, quantum: int, small_rows: tuple[int, ...] | None = None) -> tirx.PrimFunc:
    """``func`` as an if-chain on its token count T: for each small row count r of ``small_rows`` below
    ``quantum`` that divides it, ``if T <= r`` runs the body on r rows (blocks renamed ``<block>_rows<r>``, in a
    scope block ``rows<r>``); else the body on ``ceil(T / quantum) * quantum`` rows (block names kept, scope
    block ``rows``). Every branch then gets its own loop, block and buffer variables (a TVMScript round trip).
    Only trimmed when no small row count applies. ``small_rows`` None: a CPU register tile of ``quantum`` rows,
    ``SMALL_ROWS`` below it (a 16-row AMX tile too: T = 1 then loads one row per tile, not 16). On a GPU each branch is a kernel of its own, chosen by
    the host on the bound T (``quantum`` the 16-row tile, ``small_rows`` the decode sizes: ``gpu_gemv``)."""
    if small_rows is None:
        small_rows = SMALL_ROWS if quantum <= TOKEN_TILE else ()
    small = [r for r in small_rows if r < quantum and quantum % r == 0]
    found = None if quantum > TOKEN_TILE or (quantum == TOKEN_TILE and not small) else _token_loops(func, quantum)
    if found is None:
        return func
    if not small:
        return trim_token_rows(func, quantum)
    tokens, is_rows = found
    body = _root(func).body
    chain = _scope(func, scope_name(None), _cut(body, is_rows, _rounded(tokens, quantum), ""))
    for r in reversed(small):
        then = _scope(func, scope_name(r), _cut(body, is_rows, tirx.IntImm(str(tokens.ty.dtype), r),
                                                variant_name("", r)))
        chain = tirx.IfThenElse(tokens <= tirx.IntImm(str(tokens.ty.dtype), r), then, chain)
    out = _with_root_body(func, chain, {VARIANTS_ATTR: small}, allocs=False)  # each scope allocates its own
    # each branch its own loop, block and buffer variables: TVMScript parses every definition anew (TVM has
    # no Python IR substitution; ConvertSSA renames loop variables but not a block's buffers)
    return s_tir.renew_defs(_parsed(out.script()))  # a copy: a schedule rewrites the nodes it alone holds in place


@functools.lru_cache(maxsize=64)
def _parsed(text: str) -> tirx.PrimFunc:
    """TVMScript ``text`` parsed, once per text in a process: a parse takes 0.05-0.5 s a kernel (printing it
    ms; ``renew_defs``' copy under 1 ms), and a process that builds a case again (the Python API in a loop, a
    tune, a bisection) gets the same kernels again."""
    return tvm.script.from_source(text)


def token_branches(mod: tvm.IRModule) -> dict[str, int]:
    """PrimFunc -> its branches on T, for those with small-T variants (a call runs one branch)."""
    return {gv.name_hint: len(func.attrs[VARIANTS_ATTR]) + 1 for gv, func in mod.functions_items()
            if isinstance(func, tirx.PrimFunc) and func.attrs is not None and VARIANTS_ATTR in func.attrs}


def scope_name(rows: int | None) -> str:
    """The scope block of a branch of ``row_variants``: ``rows<r>`` for a small T, ``rows`` for the rest."""
    return "rows" if rows is None else f"rows{rows}"


def _variant_rows(sch: s_tir.Schedule) -> list[int]:
    func = sch.mod[sch.func_working_on] if sch.func_working_on is not None else sch.mod["main"]
    return [int(r) for r in func.attrs.get(VARIANTS_ATTR, [])] if func.attrs is not None else []


def row_variant_blocks(sch: s_tir.Schedule, name: str) -> list[tuple[object, int | None]]:
    """``(block, rows)`` for block ``name`` of the scheduled kernel and each of its small-T variants: ``rows``
    the variant's static row count, None for the general block. The general block comes first."""
    return [(sch.get_sblock(name), None)] + [(sch.get_sblock(variant_name(name, r)), r) for r in _variant_rows(sch)]


def outermost_reader(sch: s_tir.Schedule, block):
    """Where a weight every variant reads is cached (packed) once: the root-level scope block of ``block``'s
    branch when the kernel has variants (the cache then lands at the root, read by every branch), else
    ``block`` itself."""
    return sch.get_sblock(scope_name(None)) if _variant_rows(sch) else block
