"""topk_filter reference (sampler top-k masking)."""

import torch
from torch import nn

from kernels_eval.operators._common import randn


class Model(nn.Module):
    """logits with entries below the row's k-th largest value replaced by -inf."""

    def __init__(self, top_k: int = 50) -> None:
        super().__init__()
        self.top_k = int(top_k)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        k = min(self.top_k, logits.shape[-1])
        kth = logits.topk(k, dim=-1).values[..., -1:]
        return logits.masked_fill(logits < kth, float("-inf"))


def make_inputs(*, seq_len: int, hidden_size: int, device="cpu", generator=None) -> dict:
    """fp32 logits."""
    return {"logits": randn((seq_len, hidden_size), dtype=torch.float32, device=device, generator=generator,
                            scale=3.0)}
