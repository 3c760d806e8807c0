"""Small torch blocks a user's model is made of, one operator (or an everyday idiom) each, for the importer's
coverage test: ``ZOO`` maps a name to ``(forward, input shapes)``; a forward takes float32 tensors and returns
a tensor or a tuple of them. None of them is in ``examples/`` (the MLP block's LayerNorm, Linear, GELU, softmax)."""

import torch
import torch.nn.functional as F


def _values_indices(pair):
    return pair[0], pair[1]


ZOO = {
    "max.dim": (lambda x: _values_indices(x.max(dim=1)), [(4, 8)]),
    "min.dim": (lambda x: _values_indices(x.min(dim=-1, keepdim=True)), [(4, 8)]),
    "argmax": (lambda x: x.argmax(dim=1), [(4, 8)]),
    "argmin": (lambda x: x.argmin(dim=0), [(4, 8)]),
    "topk": (lambda x: _values_indices(x.topk(3, dim=-1)), [(4, 8)]),
    "topk smallest": (lambda x: _values_indices(torch.topk(x, 2, dim=0, largest=False)), [(4, 8)]),
    "sort": (lambda x: _values_indices(x.sort(dim=-1)), [(4, 8)]),
    "sort descending": (lambda x: _values_indices(torch.sort(x, dim=0, descending=True)), [(4, 8)]),
    "argsort": (lambda x: x.argsort(dim=-1), [(4, 8)]),
    "cumsum": (lambda x: x.cumsum(dim=1), [(4, 8)]),
    "cumprod": (lambda x: (x * 0.1 + 1).cumprod(dim=0), [(4, 8)]),
    "amin": (lambda x: x.amin(dim=1), [(4, 8)]),
    "logsumexp": (lambda x: torch.logsumexp(x, dim=-1), [(4, 8)]),
    "var": (lambda x: x.var(dim=-1), [(4, 8)]),
    "log_softmax": (lambda x: F.log_softmax(x, dim=-1), [(4, 8)]),
    "silu": (F.silu, [(4, 8)]),
    "hardswish": (F.hardswish, [(4, 8)]),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), [(4, 8)]),
    "elu": (F.elu, [(4, 8)]),
    "mish": (F.mish, [(4, 8)]),
    "tanh": (torch.tanh, [(4, 8)]),
    "sigmoid": (torch.sigmoid, [(4, 8)]),
    "rms_norm": (lambda x: F.rms_norm(x, (8,)), [(4, 8)]),
    "group_norm": (lambda x: F.group_norm(x, 2), [(2, 4, 8)]),
    "batch_norm eval": (lambda x: F.batch_norm(x, torch.zeros(4), torch.ones(4)), [(2, 4, 8)]),
    "conv1d": (lambda x: F.conv1d(x, torch.ones(3, 4, 3) * 0.1), [(2, 4, 8)]),
    "conv2d": (lambda x: F.conv2d(x, torch.ones(2, 3, 3, 3) * 0.1, padding=1), [(1, 3, 6, 6)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [(1, 3, 6, 6)]),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), [(1, 3, 6, 6)]),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 1), [(1, 3, 6, 6)]),
    "embedding": (lambda x: F.embedding(torch.tensor([[0, 2], [1, 3]]), x), [(4, 8)]),
    "gather": (lambda x: x.gather(1, torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7]])), [(4, 8)]),
    "index_select": (lambda x: x.index_select(0, torch.tensor([3, 0])), [(4, 8)]),
    "where": (lambda x: torch.where(x > 0, x, x * 0.5), [(4, 8)]),
    "masked_fill": (lambda x: x.masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf")),
                    [(4, 4)]),
    "tril": (torch.tril, [(4, 4)]),
    "pad": (lambda x: F.pad(x, (1, 2)), [(4, 8)]),
    "einsum": (lambda a, b: torch.einsum("ij,kj->ik", a, b), [(4, 8), (3, 8)]),
    "bmm": (torch.bmm, [(2, 4, 8), (2, 8, 3)]),
    "cat and stack": (lambda a, b: torch.stack([torch.cat([a, b], 0), torch.cat([b, a], 0)]), [(4, 8), (4, 8)]),
    "flip": (lambda x: x.flip(-1), [(4, 8)]),
    "roll": (lambda x: x.roll(1, dims=1), [(4, 8)]),
    "repeat": (lambda x: x.repeat(2, 1), [(4, 8)]),
    "chunk": (lambda x: _values_indices(x.chunk(2, dim=-1)), [(4, 8)]),
    "clamp": (lambda x: x.clamp(-0.5, 0.5), [(4, 8)]),
    "interpolate": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), [(1, 2, 4, 4)]),
    "outer": (lambda a, b: torch.outer(a, b), [(4,), (8,)]),
    "norm": (lambda x: torch.linalg.vector_norm(x, dim=-1), [(4, 8)]),
    "abs and sign": (lambda x: x.abs() * x.sign(), [(4, 8)]),
    "pow and sqrt": (lambda x: x.abs().sqrt() + x.pow(3), [(4, 8)]),
}


class Block(torch.nn.Module):
    """One zoo entry as a module for ``torch.export``."""

    def __init__(self, forward):
        super().__init__()
        self.fn = forward

    def forward(self, *xs):
        return self.fn(*xs)


def inputs(shapes) -> tuple:
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(*s, generator=gen) for s in shapes)
