"""The hardware table lives in catalogue.hardware; this name is kept for the evaluator's runner."""

from catalogue.hardware import DEFAULT_PATH, Hardware, load_hardware  # noqa: F401
