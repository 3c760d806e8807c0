"""Arrays as numpy, whatever they came as (torch, TVM or numpy; BF16 as ``ml_dtypes.bfloat16``), the dtype names
TVM gives them, and the project's one ``.npz`` convention (ml_dtypes arrays stored as raw bytes, their dtypes
recorded). Neither TVM nor torch is imported: bench's peer workers read their inputs through this module, and
importing TVM (which imports torch) cost each of them about 2 s of CPU before any work."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

import ml_dtypes
import numpy as np

from ..support import plain_files
from ..support.atomic_file import write_user_file
from ..support.errors import UsageError

NUMPY_DTYPES = {"bfloat16": np.dtype(ml_dtypes.bfloat16),  # every dtype a kernel can take or return, by TVM's name
                **{name: np.dtype(name) for name in ("float64", "float32", "float16", "int64", "int32", "int16",
                                                     "int8", "uint8", "bool")}}


def to_numpy(x) -> np.ndarray:
    """A torch tensor, TVM tensor or numpy array as numpy, a view where it can be; torch BF16 becomes
    ``ml_dtypes.bfloat16`` bit-exactly. Only the torch calls needed are made: each costs tens of microseconds per
    call of a decode loop (a kernel that streams the weights leaves every cache cold). A torch or TVM tensor
    exists only once its library is imported, so neither is imported here."""
    torch, tvm_runtime = sys.modules.get("torch"), sys.modules.get("tvm.runtime")
    if torch is not None and isinstance(x, torch.Tensor):
        require_values(x)
        x = x.detach() if x.requires_grad else x
        x = x if x.device.type == "cpu" else x.cpu()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    if tvm_runtime is not None and isinstance(x, tvm_runtime.Tensor):
        return x.numpy()
    return np.asarray(x)


def require_values(x) -> None:
    """Refuse a torch tensor with no values to run on (on torch's ``meta`` device, or sparse) in one line: before
    ``to_numpy`` reads it, and where ``tensors.input_placement`` finds one on ``meta``."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor) and (x.device.type == "meta" or x.layout != torch.strided):
        raise UsageError(f"a {x.layout} tensor on the {x.device.type} device {tuple(x.shape)} has no values to run "
                         "on: give dense tensors with data (on the CPU or the target's device)")


def dtype_name(x: np.ndarray) -> str:
    return "bfloat16" if x.dtype == NUMPY_DTYPES["bfloat16"] else str(x.dtype)


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip archive's first bytes: a member, or an empty archive
_NPY_MAGIC = b"\x93NUMPY"


def _open_npz(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened, when it is a regular file (a FIFO would block for ever), and refused if it is not an
    ``.npz`` by its first bytes, with the reason a user can act on (numpy would call random bytes "pickled
    data")."""
    try:
        f = plain_files.open_regular(path)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None
    try:
        head = f.read(6)
        if not head:
            raise UsageError(f"cannot read {path}: the file is empty")
        if head.startswith(_NPY_MAGIC):
            raise UsageError(f"cannot read {path}: it is a single .npy array, not an .npz archive of named arrays "
                             "(write one with numpy.savez)")
        if head[:4] not in _ZIP_MAGIC:
            raise UsageError(f"cannot read {path}: not an .npz file (a zip archive of .npy arrays)")
        f.seek(0)
    except BaseException:
        f.close()
        raise
    return f


# numpy saves an ml_dtypes array (bfloat16, float8_*) as raw bytes (``|V2``, ``|V1``): ``write_npz`` records
# their dtypes in this member, a JSON string, which ``read_npz`` reads and drops
DTYPES_MEMBER = "__mtp_dtypes__"


_USER_DTYPE_NUM = 256  # numpy numbers the dtypes a library registers (ml_dtypes') from here on


def _extended_dtype(name: str) -> np.dtype | None:
    """An ml_dtypes dtype by name (``bfloat16``, ``float8_e4m3fn``...), None for numpy's own."""
    found = getattr(ml_dtypes, name, None)
    return np.dtype(found) if isinstance(found, type) and np.dtype(found).num >= _USER_DTYPE_NUM else None


def _restored(path, name: str, a: np.ndarray, dtype: str | None) -> np.ndarray:
    """Array ``name`` of ``path`` with its raw-byte dtype restored: from ``dtype`` (the record's or the caller's)
    or, for a file without a record, ``|V2`` as BF16 (the one 2-byte ml_dtypes type)."""
    if a.dtype.kind != "V":
        return a
    dtype = dtype or ("bfloat16" if a.dtype.itemsize == 2 else None)
    wanted = _extended_dtype(dtype) if dtype else None
    if wanted is None or wanted.itemsize != a.dtype.itemsize:
        raise UsageError(f"cannot read {path}: array {name!r} is raw bytes ({a.dtype.str}) and the file does not "
                         f"say its dtype" + (f" ({dtype!r} is not a {a.dtype.itemsize}-byte ml_dtypes type)"
                                             if dtype else "; write it with mtp_tvm.write_inputs"))
    return a.view(wanted)


def read_npz(path: str | os.PathLike, dtypes: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Arrays from an ``.npz``; numpy stores ``ml_dtypes.bfloat16`` (and float8) as raw bytes (``|V2``), read
    back as that dtype where the file's own record (``write_npz``) or ``dtypes`` (name -> dtype name) says so.
    The one ``.npz`` convention of the project: ``mtp-tvm inputs``/``run``'s inputs and outputs and the
    reproducers' arrays alike. A file that is not a sound ``.npz`` (empty, truncated, corrupted, an ``.npy``,
    a zip without arrays) is one ``UsageError``."""
    try:
        with _open_npz(path) as f, np.load(f, allow_pickle=False) as z:
            others = [n for n in z.zip.namelist() if not n.endswith(".npy")]
            if others:
                raise UsageError(f"cannot read {path}: {others[0]!r} in the archive is not an .npy array")
            arrays = {k: z[k] for k in z.files}
    except UsageError:
        raise
    except Exception as e:  # zipfile, zlib and numpy's format errors: a damaged file, whichever layer noticed
        raise UsageError(f"cannot read {path}: the archive is damaged ({type(e).__name__}: {e})") from None
    record = arrays.pop(DTYPES_MEMBER, None)
    if not arrays:
        raise UsageError(f"cannot read {path}: the archive holds no arrays")
    try:
        recorded = {} if record is None else dict(json.loads(str(record)))
    except (ValueError, TypeError, RecursionError):
        recorded = None
    if recorded is None or not all(isinstance(v, str) for v in recorded.values()):
        raise UsageError(f"cannot read {path}: its {DTYPES_MEMBER} member is not a JSON object of dtype names")
    given = {**recorded, **(dtypes or {})}
    return {k: _restored(path, k, a, given.get(k)) for k, a in arrays.items()}


def write_npz(path: str | os.PathLike, arrays: Mapping[str, object]) -> None:
    """Write ``arrays`` (numpy or torch) atomically (a temp file renamed into place); an ml_dtypes array (BF16,
    float8) lands as raw bytes with its dtype recorded (see ``read_npz``)."""
    arrays = {k: to_numpy(v) for k, v in arrays.items()}
    if DTYPES_MEMBER in arrays:
        raise UsageError(f"an array may not be named {DTYPES_MEMBER} (the file's dtype record)")
    extended = {k: str(a.dtype) for k, a in arrays.items() if _extended_dtype(str(a.dtype)) is not None}
    # as raw bytes: numpy writes some ml_dtypes types with a descriptor it cannot read back (float8_e5m2: '<f1')
    raw = {k: np.ascontiguousarray(a).view(f"V{a.dtype.itemsize}") if k in extended else a
           for k, a in arrays.items()}

    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **raw, **({DTYPES_MEMBER: np.array(json.dumps(extended))} if extended else {}))

    write_user_file(path, save)
