"""fp8_blockscale_fused_moe's kwargs are read as fused_moe's are."""

from catalogue.operators.fused_moe.shapes import extract  # noqa: F401
