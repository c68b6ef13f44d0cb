"""block_scaled_mm's kwargs are read as gemm's are."""

from catalogue.operators.gemm.shapes import extract  # noqa: F401
