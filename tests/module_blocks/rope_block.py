"""A user's own transformer block, written for the tests (not an example): RMSNorm, RoPE with constant
frequencies (FoldConstant folds them, running a TIR pipeline per constant), causal scaled-dot-product
attention, a SiLU-gated MLP, residuals; a dynamic sequence length."""

import torch

HIDDEN, HEADS, INNER = 32, 2, 64
HEAD = HIDDEN // HEADS


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def rope(x, positions):
    """Rotary embedding: the frequencies are a constant of the graph."""
    freqs = 1.0 / (10000.0 ** (torch.arange(0, HEAD, 2, dtype=torch.float32) / HEAD))
    angles = positions[:, None].float() * freqs[None, :]
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(HIDDEN), RMSNorm(HIDDEN)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(HIDDEN, HIDDEN, bias=False) for _ in range(4))
        self.gate, self.up = torch.nn.Linear(HIDDEN, INNER, bias=False), torch.nn.Linear(HIDDEN, INNER, bias=False)
        self.down = torch.nn.Linear(INNER, HIDDEN, bias=False)

    def forward(self, x):
        seq = x.shape[0]
        positions = torch.arange(seq)
        h = self.attn_norm(x)
        q, k, v = (proj(h).view(seq, HEADS, HEAD).transpose(0, 1) for proj in (self.q, self.k, self.v))
        q, k = rope(q, positions), rope(k, positions)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(0, 1).reshape(seq, HIDDEN))
        h = self.mlp_norm(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


def model():
    torch.manual_seed(0)
    return Block()


def example_inputs():
    return (torch.randn(8, HIDDEN, generator=torch.Generator().manual_seed(1)),)


def dynamic_shapes():
    return ({0: torch.export.Dim("seq", min=2, max=64)},)
