"""Trace readers and kernel→op attribution: profiler traces in, one row per GPU activity out."""
