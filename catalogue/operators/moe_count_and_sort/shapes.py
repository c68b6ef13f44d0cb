"""moe_count_and_sort's kwargs are read as moe_align_block_size's are."""

from catalogue.operators.moe_align_block_size.shapes import extract  # noqa: F401
