"""per_token_group_quant_fp8's kwargs are read as fp8_dynamic_per_token_quant's are."""

from catalogue.operators.fp8_dynamic_per_token_quant.shapes import extract  # noqa: F401
