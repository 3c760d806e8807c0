"""Tiny DeepSeek checkpoints written by the tests, in both layouts, with the real tensor names, dtypes and
128 x 128 FP8 blocks, sharded over several files with ``model.safetensors.index.json`` (the head in a shard of
its own, as in DeepSeek-V4-Flash)."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import torch
from safetensors.torch import save_file

from mtp_tvm.contract.checkpoint import FP8_BLOCK, INDEX_FILE, LAYOUTS, LayoutName
from mtp_tvm.contract.presets import get_preset

E4M3_MAX = 448.0


def fp8_blocks(w: torch.Tensor, scale_dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``w`` as FP8 e4m3 with one scale per 128 x 128 block (amax / 448, rounded up to a power of two for
    E8M0), as DeepSeek's checkpoints store it."""
    n, k = w.shape
    bn, bk = math.ceil(n / FP8_BLOCK), math.ceil(k / FP8_BLOCK)
    blocks = torch.nn.functional.pad(w.abs(), (0, bk * FP8_BLOCK - k, 0, bn * FP8_BLOCK - n))
    amax = blocks.reshape(bn, FP8_BLOCK, bk, FP8_BLOCK).amax(dim=(1, 3)).clamp_min(1e-12)
    scale = amax / E4M3_MAX
    if scale_dtype == "F8_E8M0":
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    full = scale.repeat_interleave(FP8_BLOCK, 0)[:n].repeat_interleave(FP8_BLOCK, 1)[:, :k]
    q = (w / full).to(torch.float8_e4m3fn)
    return q, scale.to(torch.float8_e8m0fnu if scale_dtype == "F8_E8M0" else torch.float32)


def checkpoint_tensors(layout: LayoutName, preset: str = "tiny", seed: int = 0) -> dict[str, torch.Tensor]:
    """Every tensor of the MTP tail in ``layout`` at ``preset``'s sizes (weights ~ randn / sqrt(D))."""
    lay, p = LAYOUTS[layout], get_preset(preset)
    d, gen = p.hidden, torch.Generator().manual_seed(seed)
    tensors = {}
    linears = [lay.e_proj] if lay.e_proj.weight == lay.h_proj.weight else [lay.e_proj, lay.h_proj]
    for lin in linears:
        w = torch.randn(d, d * (2 if lin.half is not None else 1), generator=gen) / math.sqrt(d)
        tensors[lin.weight], tensors[lin.scale] = fp8_blocks(w, lin.scale_dtype)
    for name in (lay.enorm, lay.hnorm, lay.norm):
        tensors[name] = (1 + 0.1 * torch.randn(d, generator=gen)).to(torch.bfloat16)
    tensors[lay.head] = (torch.randn(p.vocab, d, generator=gen) / math.sqrt(d)).to(torch.bfloat16)
    return tensors


def write_checkpoint(folder: Path, layout: LayoutName, preset: str = "tiny", seed: int = 0,
                     tensors: dict | None = None) -> Path:
    """``tensors`` (default ``checkpoint_tensors``) in three shards: the FP8 weights, the norms, the head; and
    the index naming each tensor's shard."""
    tensors = checkpoint_tensors(layout, preset, seed) if tensors is None else tensors
    folder.mkdir(parents=True, exist_ok=True)
    head = LAYOUTS[layout].head
    groups = {"model-00001-of-00003.safetensors": [n for n, t in tensors.items() if t.element_size() == 1
                                                    or t.dtype == torch.float32],
              "model-00003-of-00003.safetensors": [head]}
    groups["model-00002-of-00003.safetensors"] = [n for n in tensors if n not in sum(groups.values(), [])]
    weight_map = {}
    for file, names in groups.items():
        save_file({n: tensors[n].contiguous() for n in names}, str(folder / file))
        weight_map.update(dict.fromkeys(names, file))
    (folder / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
    return folder


def read_shard(shard: Path) -> tuple[dict, bytes]:
    """A safetensors file's header (JSON) and data bytes, to damage and write back with ``write_shard``."""
    data = shard.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_shard(shard: Path, header: dict | bytes, data: bytes) -> None:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    shard.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
