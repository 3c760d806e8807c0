"""A torch MLP block for ``mtp-tvm check --module examples/torch_mlp_block.py``: LayerNorm, a linear layer,
GELU, a second linear layer and a residual; it returns the block's output and its softmax, with a dynamic batch
(any number of rows runs).

The contract of a module file: ``model()`` returns the ``torch.nn.Module``, ``example_inputs()`` the tuple of
inputs it is exported, built and checked on, and the optional ``dynamic_shapes()`` says which sizes are free
(``torch.export``'s form).
"""

import torch

HIDDEN, INNER = 64, 256


class MLPBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.up = torch.nn.Linear(HIDDEN, INNER)
        self.down = torch.nn.Linear(INNER, HIDDEN)

    def forward(self, x):
        y = x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
        return y, torch.softmax(y, dim=-1)


def model():
    torch.manual_seed(0)
    return MLPBlock()


def example_inputs():
    return (torch.randn(8, HIDDEN, generator=torch.Generator().manual_seed(1)),)


def dynamic_shapes():
    return ({0: torch.export.Dim("batch", min=1, max=4096)},)
