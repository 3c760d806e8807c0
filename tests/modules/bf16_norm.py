"""A user's RMSNorm returning BF16, for the tolerance tests: ``tests/modules/loose_epsilon.py`` moves its output
by about 5e-4, well inside BF16's default tolerance (rtol 1.6e-2), so only a tightened one finds it."""

import torch

HIDDEN = 64


class Norm(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(1.0 + 0.1 * torch.randn(HIDDEN, generator=torch.Generator().manual_seed(1)))

    def forward(self, x):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(torch.bfloat16)


def model():
    return Norm()


def example_inputs():
    return (torch.randn(16, HIDDEN, generator=torch.Generator().manual_seed(0)),)
