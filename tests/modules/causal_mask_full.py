"""A causal mask made with ``torch.full((s, s), -inf).triu(1)``: TVM 0.27 cannot legalise its ``full`` with a symbolic
size ('argument of type 'PrimType' is not iterable'), a build failure that must name the pass, function and op."""

import torch


class Masked(torch.nn.Module):
    def forward(self, scores):  # scores: [seq, seq]
        s = scores.shape[0]
        mask = torch.full((s, s), float("-inf")).triu(1)
        return torch.softmax(scores + mask, dim=-1)


def model():
    return Masked()


def example_inputs():
    return (torch.randn(8, 8),)


def dynamic_shapes():
    return ({0: torch.export.Dim("seq", min=2, max=64), 1: torch.export.Dim("seq", min=2, max=64)},)
