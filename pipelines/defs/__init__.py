"""Dagster definitions per domain package: assets, their checks, jobs, sensors and schedules."""
