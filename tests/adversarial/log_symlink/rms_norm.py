"""Hostile: swaps its worker's log for a symlink to a file outside the sandbox, then dies, so that the
evaluator (outside) reads that file into the error text of the result. The target is a fixed host path the
test writes a secret to; inside the sandbox it does not exist, but a symlink's target need not."""

import os

import torch

SECRET = "/tmp/hotshape-sandbox-log-secret"


class Model(torch.nn.Module):
    def __init__(self, hidden_size: int = 0, eps: float = 1e-6, **_):
        super().__init__()

    def forward(self, x, weight=None, **_):
        scratch = os.path.dirname(os.environ.get("TRITON_CACHE_DIR", "/nonexistent/x"))
        for name in os.listdir(scratch):
            if name.endswith(".log"):
                log = os.path.join(scratch, name)
                os.unlink(log)
                os.symlink(SECRET, log)
        os._exit(3)
