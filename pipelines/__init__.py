"""Dagster wiring of hotshape's domain packages, and the `hotshape` command line."""
