"""The roofline lives in catalogue.roofline; this name is kept for the evaluator's runner."""

from catalogue.roofline import problem_roofline, roofline_time  # noqa: F401
