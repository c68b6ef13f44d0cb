"""Build and refresh: the floor that runs ingest and weighting over a trace root and writes a release."""
