"""A user's own transformer block, for the own-model debugging tests (``docs/guides/own-model-debugging.md``):
RMSNorm, rotary position embedding, causal ``scaled_dot_product_attention`` and a SiLU-gated MLP, each behind a
residual, with a dynamic sequence length. Tiny sizes keep the tests fast."""

import torch

HIDDEN, HEADS, INNER, MAX_SEQ = 32, 2, 64, 64
HEAD_DIM = HIDDEN // HEADS


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = RMSNorm(HIDDEN)
        self.qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.out = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.mlp_norm = RMSNorm(HIDDEN)
        self.gate = torch.nn.Linear(HIDDEN, INNER, bias=False)
        self.up = torch.nn.Linear(HIDDEN, INNER, bias=False)
        self.down = torch.nn.Linear(INNER, HIDDEN, bias=False)
        inv_freq = 1.0 / 10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM)
        self.register_buffer("inv_freq", torch.cat((inv_freq, inv_freq)), persistent=False)

    def forward(self, x):  # x: [seq, HIDDEN]
        seq = x.shape[0]
        q, k, v = self.qkv(self.attn_norm(x)).view(seq, 3, HEADS, HEAD_DIM).transpose(0, 2).unbind(1)
        angles = torch.arange(seq, dtype=torch.float32)[:, None] * self.inv_freq
        cos, sin = angles.cos(), angles.sin()
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = x + self.out(attn.transpose(0, 1).reshape(seq, HIDDEN))
        m = self.mlp_norm(h)
        return h + self.down(torch.nn.functional.silu(self.gate(m)) * self.up(m))


def model():
    torch.manual_seed(0)
    return Block()


def example_inputs():
    return (torch.randn(8, HIDDEN, generator=torch.Generator().manual_seed(1)),)


def dynamic_shapes():
    return ({0: torch.export.Dim("seq", min=2, max=MAX_SEQ)},)
