"""The agent side of the benchmark: public workspaces, a local self-check, feedback for a revising agent and
the measure-revise loop (`hotshape workspace`, `check`, `feedback`, `optimize`)."""
