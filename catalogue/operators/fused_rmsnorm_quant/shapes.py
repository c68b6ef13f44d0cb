"""fused_rmsnorm_quant's kwargs are read as rms_norm's are."""

from catalogue.operators.rms_norm.shapes import extract  # noqa: F401
