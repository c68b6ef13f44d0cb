"""Operator registry, hardware table, roofline, evaluation harness and scoring.

Only the modules that need torch import it; this package's top level stays light.
"""
