"""embedding: out = weight[input_ids] (int64 ids into a [V, H] table); only the gathered rows are traffic."""

from catalogue.operators._common import Smoke, elt

INIT_KEYS = ()
INPUT_KEYS = ("token_count", "vocab_size", "hidden_size", "dtype")
PATH = "fp32_vector"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 0, "rtol": 0}
SMOKE = (Smoke({}, {"token_count": 7, "vocab_size": 50, "hidden_size": 32, "dtype": "bf16"}),)


def flops(**_):
    """Pure gather."""
    return 0


def bytes_read(*, token_count, hidden_size, dtype="bf16", **_):
    """int64 ids and one table row per token."""
    return 8 * token_count + elt(dtype) * token_count * hidden_size


def bytes_written(*, token_count, hidden_size, dtype="bf16", **_):
    """out [T, H]."""
    return elt(dtype) * token_count * hidden_size
