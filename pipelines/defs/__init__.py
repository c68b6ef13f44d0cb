"""Dagster definitions per domain package: assets, their checks, jobs, sensors and schedules.

No `from __future__ import annotations` in these modules: Dagster reads the `context` type hints at runtime.
"""
