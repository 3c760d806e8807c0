"""Moving tensors between torch, numpy and TVM without copies through FP32 (BF16 stays BF16)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch
import tvm

NUMPY_DTYPES = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float32": np.dtype(np.float32),
                "float16": np.dtype(np.float16), "int8": np.dtype(np.int8), "int32": np.dtype(np.int32)}


def to_numpy(x) -> np.ndarray:
    """A torch tensor or numpy array as numpy; torch BF16 becomes ``ml_dtypes.bfloat16`` bit-exactly."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            return x.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    return np.asarray(x)


def to_torch(x: np.ndarray) -> torch.Tensor:
    if x.dtype == NUMPY_DTYPES["bfloat16"]:
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(x))


def dtype_name(x: np.ndarray) -> str:
    return "bfloat16" if x.dtype == NUMPY_DTYPES["bfloat16"] else str(x.dtype)


def to_device(x: np.ndarray, dev) -> tvm.runtime.Tensor:
    return tvm.runtime.tensor(np.ascontiguousarray(x), dev)
