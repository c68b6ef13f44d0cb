"""embedding reference: row gather from the token-embedding table."""

import torch
from torch import nn

from kernels_eval.operators._common import dtype_of, randn


class Model(nn.Module):
    """out[t] = weight[input_ids[t]]."""

    def forward(self, input_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return weight.index_select(0, input_ids.long().flatten()).reshape(*input_ids.shape, weight.shape[1])


def make_inputs(*, token_count: int, vocab_size: int, hidden_size: int, dtype: str = "bf16", device="cpu",
                generator=None) -> dict:
    """int64 token ids (uniform over the vocabulary) and the table."""
    u = randn((token_count,), dtype=torch.float32, device=device, generator=generator)
    ids = ((torch.special.ndtr(u) * vocab_size).long()).clamp(0, vocab_size - 1)
    return {"input_ids": ids,
            "weight": randn((vocab_size, hidden_size), dtype=dtype_of(dtype), device=device, generator=generator)}
