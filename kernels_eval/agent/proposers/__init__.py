"""Proposers of the optimize loop: `search` (rewrites a file's tunable literals) and `llm` (an
OpenAI-compatible chat model). Each has `name`, `propose(state) -> Candidate | None` and `restart()`."""
