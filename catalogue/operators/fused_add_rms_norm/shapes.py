"""fused_add_rms_norm's kwargs are read as rms_norm's are."""

from catalogue.operators.rms_norm.shapes import extract  # noqa: F401
