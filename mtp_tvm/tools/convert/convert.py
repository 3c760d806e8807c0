"""``mtp-tvm convert`` and ``--weights``: a DeepSeek checkpoint's MTP weights as a case's inputs, with what the
conversion costs. ``convert`` reads a checkpoint (``spec/checkpoint.py``), converts it to the spec's W8A8
(``spec/convert_weights.py``), measures the INT8 weights against the dequantised FP8 ones and the converted
projection against the checkpoint's own (FP8 weights dequantised, FP32 math) through ``ratio_allclose``, and
writes the case's weight inputs to one safetensors file, named as ``mtp-tvm list`` names them.
``load_weights`` reads either a checkpoint (converted in memory) or such a file, for ``bind`` and ``--weights``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from ...contract.cases import get_case
from ...contract.checkpoint import Checkpoint, LayoutName, find_layout, read_header
from ...contract.convert_weights import (
    CALIBRATION_INPUTS,
    MatrixError,
    Smoothing,
    check_rank,
    convert_case,
    reference_projection,
    weight_names,
)
from ...contract.presets import DEFAULT_TP, PRESETS, Shapes, make_shapes, tp_vocab_shard
from ...support.atomic_file import require_not_input, require_writable, write_user_file
from ...support.errors import UsageError
from ...support.flags import option
from ...support.lazy import lazy_module
from ...support.text_table import text_table
from ...verify.comparators import Comparison, ratio_allclose
from ...verify.tolerances import RatioTolerance

torch = lazy_module("torch")
safetensors = lazy_module("safetensors")

CONVERTED_FORMAT = "mtp_tvm.w8a8"  # the converted file's ``__metadata__["format"]``
OUTPUT_RMS_TOLERANCE = 0.03  # the projection's default atol (times the reference's RMS) and rtol: W8A8 vs FP8
OUTPUT_MAX_ERROR_RATIO = 0.02  # the spec's outlier budget (§1.8)
SAFETENSORS_DTYPES = {"int8": "I8", "int32": "I32", "float32": "F32", "bfloat16": "BF16"}  # a case's dtypes, stored


@dataclasses.dataclass(frozen=True)
class WeightSource:
    """Where a case's weights come from and for which sizes: ``path`` a checkpoint (folder or file) or a converted
    file; ``preset`` None: the checkpoint's hidden size decides (a converted file's metadata); ``tp``/``rank``
    the LM head's TP degree and this rank (None: ``DEFAULT_TP`` and 0, a converted file's own); ``layout`` None:
    found from the tensor names; ``calibration`` an ``.npz`` with ``hidden_states`` and ``prev_hidden_states``
    for SmoothQuant with ``alpha`` (None: smoothing ones)."""

    path: str | os.PathLike
    case: str = "tail"  # these four: BuildSpec's flags (convert's, with their meaning here)
    preset: str | None = None
    tp: int | None = None
    rank: int | None = option(None, help="the TP rank whose LM-head rows are read", shown="0", type=int, metavar="R",
                              groups=("checkpoint",))
    owners: int | None = None
    layout: str | None = option(None, help="the checkpoint's layout", shown="found from its tensor names",
                                choices=LayoutName.names(), groups=("checkpoint",))
    calibration: str | os.PathLike | None = option(
        None, help="SmoothQuant from these activations (hidden_states, prev_hidden_states [N, D]; mtp-tvm inputs "
        "writes such a file)", shown="smoothing ones", metavar="FILE.npz", groups=("checkpoint",))
    alpha: float = option(0.5, help="SmoothQuant's migration strength", type=float, metavar="A",
                          groups=("checkpoint",))

    def __post_init__(self):
        get_case(self.case)
        if self.preset is not None and self.preset not in PRESETS:
            raise UsageError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        Smoothing(alpha=self.alpha)
        try:
            Path(self.path).stat()
        except (FileNotFoundError, NotADirectoryError):
            raise UsageError(f"{self.path}: no such checkpoint or converted weights file") from None
        except OSError as e:  # a folder on the way this user may not search
            raise UsageError(f"{self.path}: cannot read: {e.strerror}") from None


def converted_metadata(path: str | os.PathLike) -> dict | None:
    """The metadata of a file ``convert`` wrote; None for anything else (a checkpoint)."""
    if not Path(path).is_file():
        return None
    read_header(Path(path))  # a damaged file is named here, not by safetensors
    with safetensors.safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    return meta if meta.get("format") == CONVERTED_FORMAT else None


def _progress(log: Callable[[str], None] | None) -> Callable[[str, int, int, int], None] | None:
    """A progress line per read (per chunk of a row range): the tensor's share done, and the bytes read in all."""
    if log is None:
        return None

    def line(name: str, done: int, total: int, read: int) -> None:
        bar = "#" * (20 * done // max(total, 1))
        log(f"[read] [{bar:20s}] {done / 1e6:7.1f}/{total / 1e6:.1f} MB {name}; {read / 1e6:.1f} MB read in all")

    return line


def _calibration(path) -> dict | None:
    if path is None:
        return None
    from ...compiler.arrays import read_npz

    arrays = read_npz(path, dict.fromkeys(CALIBRATION_INPUTS, "bfloat16"))
    missing = [n for n in CALIBRATION_INPUTS if n not in arrays]
    if missing:
        raise UsageError(f"calibration file {path}: no array {missing[0]!r} (it needs {', '.join(CALIBRATION_INPUTS)}"
                         ", [N, D] each: `mtp-tvm inputs --case projection` writes such a file)")
    from ...compiler.arrays import to_numpy

    return {n: torch.from_numpy(to_numpy(arrays[n]).astype("float32")) for n in CALIBRATION_INPUTS}


def _checkpoint_shapes(ckpt: Checkpoint, layout, source: WeightSource) -> Shapes:
    """The sizes the checkpoint's MTP weights have: the preset given, or the one of its hidden size."""
    info = ckpt.info(layout.enorm)
    by_hidden = {p.hidden: p.name for p in PRESETS.values()}
    preset = source.preset
    if preset is None:
        if len(info.shape) != 1 or info.shape[0] not in by_hidden:
            raise UsageError(f"{info.where()} has shape {list(info.shape)}: no preset has that hidden size "
                             f"({', '.join(f'{n} D={h}' for h, n in by_hidden.items())})")
        preset = by_hidden[info.shape[0]]
    tp = DEFAULT_TP if source.tp is None else source.tp
    return make_shapes(preset, vocab_shard=tp_vocab_shard(PRESETS[preset], tp), owners=source.owners, tp=tp)


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A case's weights with where they came from: the sizes, and for a checkpoint its conversion (the
    calibration activations it smoothed with, None: ones)."""

    weights: dict
    shapes: Shapes
    layout: str
    smoothing: str
    errors: tuple[MatrixError, ...] = ()
    reference: dict = dataclasses.field(default_factory=dict)
    bytes_read: int = 0
    rank: int = 0
    calibration: dict | None = None

    def sized(self, spec):
        """``spec`` (a ``BuildSpec``) with the LM-head sizes of these weights (a TP shard's rows are the vocab
        shard); a vocab shard of its own that differs is refused."""
        s = self.shapes
        if spec.vocab_shard not in (None, s.vocab_shard):
            raise UsageError(f"vocab shard {spec.vocab_shard}: the weights' LM-head shard has {s.vocab_shard} rows "
                             f"(tp {s.tp}); drop the vocab shard")
        return dataclasses.replace(spec, vocab_shard=s.vocab_shard, tp=s.tp, owners=s.owners)

    def require_fits(self, shapes: Shapes, built: str) -> None:
        """Refuse running these weights in ``built`` (an artifact) made for another vocab shard."""
        if shapes.vocab_shard != self.shapes.vocab_shard:
            raise UsageError(f"{built} was built for vocab shard {shapes.vocab_shard}; the weights' LM-head shard "
                             f"has {self.shapes.vocab_shard} rows (build with --vocab-shard {self.shapes.vocab_shard})")


def read_weight_source(source: WeightSource, log: Callable[[str], None] | None = None) -> Loaded:
    """``source``'s weights for its case: a converted file read by name, a checkpoint converted."""
    case = get_case(source.case)
    meta = converted_metadata(source.path)
    if meta is not None:
        return _load_converted(source, meta, log)
    ckpt = Checkpoint(source.path, _progress(log))
    layout = find_layout(ckpt, source.layout)
    shapes = _checkpoint_shapes(ckpt, layout, source)
    rank = check_rank(0 if source.rank is None else source.rank, shapes.tp)
    smoothing = Smoothing(_calibration(source.calibration), source.alpha)
    converted = convert_case(ckpt, layout, case, shapes, rank, smoothing)
    return Loaded(converted.weights, shapes, layout.name.value, smoothing.name, converted.errors,
                  converted.reference, ckpt.bytes_read, rank, smoothing.activations)


def _load_converted(source: WeightSource, meta: dict, log) -> Loaded:
    path = Path(source.path)
    counts = _stored_counts(path, meta)
    for key in ("preset", "tp", "rank", "owners"):
        given, stored = getattr(source, key), meta.get(key)
        if given is not None and str(given) != stored:
            raise UsageError(f"{path}: converted for {key} {stored}, not {given} (convert the checkpoint again, or "
                             f"drop the {key})")
    if source.calibration is not None or source.layout is not None:
        raise UsageError(f"{path} is already converted ({meta.get('smoothing')} smoothing); --calibration and "
                         "--layout apply to a checkpoint")
    try:
        shapes = make_shapes(meta["preset"], vocab_shard=counts["vocab_shard"], owners=counts["owners"],
                             tp=counts["tp"])
    except UsageError as e:
        raise UsageError(f"{path}: its metadata does not fit: {e}") from None
    case = get_case(source.case)
    names, specs = weight_names(case, shapes), case.input_specs(shapes)
    ckpt = Checkpoint(path, _progress(log))
    missing = [n for n in names if n not in ckpt.names()]
    if missing:
        raise UsageError(f"{path}: no tensor {missing[0]!r}: converted for case {meta.get('case')!r}, which does not "
                         f"take every weight of case {source.case!r}")
    for n in names:
        ckpt.expect(n, SAFETENSORS_DTYPES[specs[n].dtype], specs[n].shape, f" (case {source.case!r})")
    return Loaded({n: ckpt.read(n) for n in names}, shapes, meta["layout"], meta["smoothing"],
                  bytes_read=ckpt.bytes_read, rank=counts["rank"])


_STORED_COUNTS = ("tp", "rank", "owners", "vocab_shard")  # what ``write_converted`` stores as decimal strings


def _stored_counts(path: Path, meta: dict) -> dict[str, int]:
    """The sizes a converted file's metadata records, each refused in one line when missing or not a count (a
    file edited by hand, or not written by ``convert``)."""
    for key in ("preset", "layout", "smoothing", *_STORED_COUNTS):
        if key not in meta:
            raise UsageError(f"{path}: its metadata has no {key!r} (convert the checkpoint again)")
    for key in _STORED_COUNTS:
        value = meta[key]
        if not (value.isascii() and value.isdigit() and len(value) < 10):
            raise UsageError(f"{path}: its metadata's {key} is {value[:40]!r}, not a count (convert the checkpoint "
                             "again)")
    return {key: int(meta[key]) for key in _STORED_COUNTS}


def load_weights(path: str | os.PathLike, case: str = "tail", preset: str | None = None, tp: int | None = None,
                 rank: int | None = None, **options) -> dict:
    """Every weight input of ``case`` (the inputs after its activations: a dict ready for ``bind``), from a
    DeepSeek checkpoint (converted to the spec's W8A8 in memory, smoothing ones unless ``calibration``) or from
    a file ``mtp-tvm convert`` wrote. ``options``: the other fields of ``WeightSource`` (owners, layout,
    calibration, alpha) and ``log`` (a progress line per read)."""
    log = options.pop("log", None)
    return read_weight_source(WeightSource(path, case, preset, tp, rank, **options), log).weights


@dataclasses.dataclass(frozen=True)
class ConvertResult:
    """What ``convert`` did and what it cost: per-matrix errors with their bounds, the projection's output
    against the checkpoint's own (``projection``: None for a case without the projection)."""

    source: str
    out: str | None
    case: str
    loaded: Loaded
    projection: Comparison | None
    output_rms_rel: float | None
    tokens: int

    @property
    def passed(self) -> bool:
        return self.projection is None or self.projection.passed

    def table(self) -> str:
        lo, s = self.loaded, self.loaded.shapes
        lines = [f"{self.source}: layout {lo.layout}, case {self.case}, preset {s.preset.name} (D={s.hidden}), "
                 f"tp {s.tp} rank {lo.rank} (LM-head rows {lo.rank * s.vocab_shard}..{(lo.rank + 1) * s.vocab_shard}"
                 f"), smoothing {lo.smoothing}; {lo.bytes_read / 1e6:.1f} MB read"]
        if lo.errors:
            rows = [("matrix", "max rel err", "bound", "rms rel err", "bound", "")]
            rows += [(e.name, f"{e.max_rel:.4g}", f"{e.max_rel_bound:.4g}", f"{e.rms_rel:.4g}",
                      f"{e.rms_rel_bound:.4g}", "within bound" if e.within_bound else "OVER BOUND") for e in lo.errors]
            lines += ["INT8 weights vs the checkpoint's dequantised FP8 (relative to each row's max |w|; RMS: "
                      "Frobenius)", *text_table(rows)]
        if self.projection is not None:
            p = self.projection
            lines.append(f"projection hidden_states_out vs the checkpoint's FP8 math (T={self.tokens}): {p.comparator}"
                         f" {p.mismatches}/{p.numel} outliers, max |diff| {p.max_abs_diff:.3g}, RMS rel "
                         f"{self.output_rms_rel:.3g}: {'PASS' if p.passed else 'FAIL'}")
        if self.out:
            lines.append(f"weights: {self.out}")
        return "\n".join(lines)


def _projection_verdict(loaded: Loaded, activations: dict, tolerance: RatioTolerance | None
                        ) -> tuple[Comparison, float]:
    from ...contract import golden

    s = loaded.shapes
    out = golden.mtp_projection({**activations, **loaded.weights}, s.eps).float()
    ref = reference_projection(loaded.reference, activations, s.eps).float()
    ref_rms = float(ref.pow(2).mean().sqrt())
    if tolerance is None:
        tolerance = RatioTolerance(float(f"{OUTPUT_RMS_TOLERANCE * ref_rms:.3g}"), OUTPUT_RMS_TOLERANCE,
                                   OUTPUT_MAX_ERROR_RATIO)
    rms_rel = float((out - ref).pow(2).mean().sqrt()) / max(ref_rms, 1e-30)
    return ratio_allclose(tolerance)(out.numpy(), ref.numpy()), rms_rel


def _activations(loaded: Loaded, seed: int, tokens: int | None) -> dict:
    """The projection's activations: the calibration file's, or the seeded ones ``check`` draws."""
    if loaded.calibration is not None:
        return {n: loaded.calibration[n].to(torch.bfloat16) for n in CALIBRATION_INPUTS}
    projection = get_case("projection")
    inputs = projection.make_inputs(make_shapes(loaded.shapes.preset, tokens=tokens), seed)
    return {n: inputs[n] for n in CALIBRATION_INPUTS}


def write_converted(out: str | os.PathLike, loaded: Loaded, case: str, source: str) -> None:
    """The weights as one safetensors file, with what they were converted for in its metadata; written by
    ``write_user_file`` (``save_file`` would rename its own temp file over a device node)."""
    from safetensors.torch import save

    s = loaded.shapes
    meta = {"format": CONVERTED_FORMAT, "case": case, "preset": s.preset.name, "tp": str(s.tp),
            "rank": str(loaded.rank), "owners": str(s.owners), "vocab_shard": str(s.vocab_shard),
            "layout": loaded.layout, "smoothing": loaded.smoothing, "source": str(source)}
    tensors = {n: t.contiguous() for n, t in loaded.weights.items()}
    write_user_file(out, lambda tmp: tmp.write_bytes(save(tensors, metadata=meta)), "weights ")


def convert(source: WeightSource, out: str | os.PathLike | None = None, *, seed: int = 0, tokens: int | None = None,
            tolerance: RatioTolerance | None = None, force: bool = False,
            log: Callable[[str], None] | None = print) -> ConvertResult:
    """Convert ``source`` (a checkpoint) for its case and measure the cost: per-matrix weight errors, and the
    projection on the calibration activations or seeded ones (``seed``, ``tokens``) against the checkpoint's
    own, through ``ratio_allclose`` (``tolerance``; default ``OUTPUT_RMS_TOLERANCE`` times the reference's RMS
    and as rtol, the spec's 2 % budget). ``out``: written only when the projection passes (atomically); refused
    before any tensor is read when it cannot be written, exists (unless ``force``) or is one of the files read
    (a shard, the index, the calibration file)."""
    require_writable(out, "--out", force=force)
    if converted_metadata(source.path) is not None:
        raise UsageError(f"{source.path} is already converted; convert reads a checkpoint")
    if tokens is not None and source.calibration is not None:
        raise UsageError("--tokens sizes the seeded activations; with --calibration the file's rows are used")
    ckpt = Checkpoint(source.path)  # its index and headers: no tensor is read
    require_not_input(out, "--out", [*(("a file of the checkpoint", f) for f in ckpt.files()),
                                     ("the --calibration file", source.calibration)])
    loaded = read_weight_source(source, log)
    projection, rms_rel, tokens_used = None, None, 0
    if loaded.reference:
        activations = _activations(loaded, seed, tokens)
        tokens_used = int(activations["hidden_states"].shape[0])
        projection, rms_rel = _projection_verdict(loaded, activations, tolerance)
    passed = projection is None or projection.passed
    if out is not None and passed:
        write_converted(out, loaded, source.case, str(source.path))
    return ConvertResult(str(source.path), str(out) if out is not None and passed else None, source.case, loaded,
                         projection, rms_rel, tokens_used)
