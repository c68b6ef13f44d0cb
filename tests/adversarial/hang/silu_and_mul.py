"""Exploit: never return (a harness without a deadline waits forever)."""

import time

import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            time.sleep(0.05)
