"""The library line: each operator through the fastest library path on the machine, judged and timed like a
candidate but stored as a baseline (docs/library-baseline.md)."""
