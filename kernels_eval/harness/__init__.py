"""Evaluation harness: load a submission, run each operator file in a sandboxed worker process, judge it.

The worker (`worker.py`) imports only torch, triton and numpy; everything that compares, scores or
writes Parquet runs in the parent (`runner.py`), outside the candidate's process.
"""
