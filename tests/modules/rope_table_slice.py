"""RoPE from a precomputed table sliced to the sequence (``self.cos[:s]``, ``s`` at most the table's rows by
``dynamic_shapes()``): TVM 0.27's importer gave the slice the size ``min(s, 64)``, every op after it an unknown
shape, and FoldConstant failed ('emit_te now only supports Tensor that has ShapeExpr shape')."""

import torch


class RopeTable(torch.nn.Module):
    def __init__(self, rows: int = 64, dim: int = 16):
        super().__init__()
        angles = torch.arange(rows, dtype=torch.float32)[:, None] * torch.arange(dim, dtype=torch.float32)[None, :]
        self.register_buffer("cos", torch.cos(angles))
        self.register_buffer("sin", torch.sin(angles))

    def forward(self, x):  # x: [seq, dim]
        s = x.shape[0]
        return x * self.cos[:s] + x.flip(-1) * self.sin[:s]


def model():
    return RopeTable()


def example_inputs():
    return (torch.randn(8, 16),)


def dynamic_shapes():
    return ({0: torch.export.Dim("seq", min=2, max=64)},)
