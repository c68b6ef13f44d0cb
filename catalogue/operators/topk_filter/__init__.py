"""topk_filter: logits with every value below the row's k-th largest set to -inf (fp32)."""

from catalogue.operators._common import Smoke

TRAITS = frozenset({"sampling"})

INIT_KEYS = ("top_k",)
INPUT_KEYS = ("seq_len", "hidden_size")
PATH = "fp32_vector"
OUTPUTS = ("out",)
INPLACE: dict[str, str] = {}
TOLERANCE = {"atol": 0, "rtol": 0}
SMOKE = (Smoke({"top_k": 5}, {"seq_len": 3, "hidden_size": 100}),)


def flops(**_):
    """Comparisons only."""
    return 0


def bytes_read(*, seq_len, hidden_size, **_):
    """fp32 logits."""
    return 4 * seq_len * hidden_size


def bytes_written(*, seq_len, hidden_size, **_):
    """fp32 filtered logits."""
    return 4 * seq_len * hidden_size
