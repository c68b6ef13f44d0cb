"""The `llm` proposer: any OpenAI-compatible chat-completions endpoint (HOTSHAPE_LLM_URL, HOTSHAPE_LLM_KEY,
HOTSHAPE_LLM_MODEL), over plain urllib. The prompt holds what a workspace holds (contract, reference, public
problems), the accepted file, the evaluator's feedback and the knowledge base's top passages; the
conversation since the last dropout is the proposer's context. Token counts come from each response's usage."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request

from kernels_eval.agent.optimize import Candidate, LoopState
from kernels_eval.agent.records import as_builtins
from kernels_eval.agent.contract import operator_contract, reference_source
from kernels_eval.agent.proposers.search import regime

CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
SYSTEM = ("You write Triton kernels. Reply with one complete Python file in a ```python block: it defines "
          "class Model(nn.Module) with the reference's constructor and forward, and does its work in its own "
          "@triton.jit kernels (PyTorch compute ops count as fallbacks). Keep what is correct; make it faster.")
MAX_FEEDBACK_CHARS = 6000


class LLMError(RuntimeError):
    """The endpoint could not be reached or answered something that is not a chat completion."""


def endpoint_from_env() -> tuple[str, str | None, str]:
    """(url, key, model) from HOTSHAPE_LLM_URL, HOTSHAPE_LLM_KEY, HOTSHAPE_LLM_MODEL."""
    url = os.environ.get("HOTSHAPE_LLM_URL")
    if not url:
        raise LLMError("HOTSHAPE_LLM_URL is not set (an OpenAI-compatible base URL, e.g. http://host:8000/v1)")
    return url, os.environ.get("HOTSHAPE_LLM_KEY"), os.environ.get("HOTSHAPE_LLM_MODEL", "default")


def chat(url: str, key: str | None, model: str, messages: list[dict], timeout_s: float = 300.0,
         temperature: float = 0.2) -> dict:
    """One chat completion: the parsed response (choices, usage)."""
    target = url.rstrip("/")
    if not target.endswith("/chat/completions"):
        target += "/chat/completions"
    body = json.dumps({"model": model, "messages": messages, "temperature": temperature}).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(target, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            data = json.loads(reply.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise LLMError(f"{target}: {exc}") from exc
    if not isinstance(data, dict) or not data.get("choices"):
        raise LLMError(f"{target}: the reply has no choices")
    return data


def extract_code(content: str) -> str | None:
    """The last fenced Python block that defines class Model, else the whole reply if it does."""
    blocks = [b for b in CODE_BLOCK.findall(content) if "class Model" in b]
    if blocks:
        return blocks[-1].strip() + "\n"
    return content.strip() + "\n" if "class Model" in content else None


def task_prompt(operator: str, problems: list[dict]) -> str:
    """The workspace's content for one operator as prompt text: contract, reference, heaviest problems."""
    contract = operator_contract(operator, [p.get("dtypes") or {} for p in problems])
    heavy = sorted(problems, key=lambda p: -(p.get("weight") or 0.0))[:12]
    shapes = "\n".join(f"- weight {p.get('weight') or 0:.4g}: init {json.dumps(p['init_kwargs'])}, "
                       f"inputs {json.dumps(p['input_kwargs'])}" for p in heavy)
    return (f"Operator: {operator}\n\nContract:\n{json.dumps(contract, indent=1)}\n\n"
            f"PyTorch reference:\n```python\n{reference_source(operator)}```\n\n"
            f"Heaviest of its {len(problems)} problems (the score weights them so):\n{shapes}\n")


def feedback_text(state: LoopState, feedback) -> str:
    """The evaluator's feedback on a file, as JSON: the distinct verdicts first (CPU repeats one per problem)."""
    seen, records = set(), []
    for f in feedback:
        record = as_builtins(f)
        key = json.dumps({k: record[k] for k in ("stage", "error", "t_measured_s")}, default=str)
        if key not in seen:
            seen.add(key)
            records.append(record)
    return json.dumps(records, default=str)[:MAX_FEEDBACK_CHARS]


class LLMProposer:
    """Candidates from a chat model, the conversation since the last dropout as its memory."""

    name = "llm"

    def __init__(self, operator: str, problems: list[dict], *, url: str, key: str | None, model: str,
                 knowledge=None, sealed: set[str] = frozenset(), passages: int = 4, timeout_s: float = 300.0) -> None:
        self.operator, self.url, self.key, self.model = operator, url, key, model
        self.knowledge, self.passages, self.timeout_s = knowledge, passages, timeout_s
        self.sealed = {s.lower() for s in sealed}
        self.task = task_prompt(operator, problems)
        self.messages: list[dict] = []
        self.seen_history = 0

    def restart(self) -> None:
        """Optimization dropout: the conversation goes; the next prompt starts from the accepted file."""
        self.messages, self.seen_history = [], 0

    def _retrieved(self, state: LoopState) -> str:
        if self.knowledge is None:
            return ""

        mode = regime(state)
        errors = " ".join(f.error or "" for f in state.accepted_feedback[:3])
        hits = self.knowledge.search(f"{self.operator} {mode} triton kernel {errors}", operator=self.operator,
                                     regime=mode, k=self.passages)
        return "".join(f"\n--- {p.source} ({p.title}) ---\n{p.text}\n" for _, p in hits)

    def _first_prompt(self, state: LoopState) -> str:
        notes = self._retrieved(state)
        return (f"{self.task}\nThe accepted file:\n```python\n{state.accepted_source}```\n\n"
                f"The evaluator's feedback on it:\n{feedback_text(state, state.accepted_feedback)}\n"
                + (f"\nNotes from the knowledge base:\n{notes}" if notes else "")
                + "\nWrite a faster file that stays correct and native.")

    def _check_clean(self, text: str) -> None:
        leaked = [s for s in self.sealed if s in text.lower()]
        if leaked:
            raise LLMError(f"the prompt would carry {len(leaked)} sealed strings; refusing to send it")

    def propose(self, state: LoopState) -> Candidate | None:
        """Ask the model for the next file (the new feedback since the last ask appended to the talk)."""
        if not self.messages:
            self.messages = [{"role": "system", "content": SYSTEM},
                             {"role": "user", "content": self._first_prompt(state)}]
            self.seen_history = len(state.history)
        else:
            for h in state.history[self.seen_history:]:
                verdict = "accepted" if h["accepted"] else f"not accepted: {h['reason']}"
                self.messages.append({"role": "user", "content": f"Your file was {verdict}.\nFeedback:\n"
                                      f"{feedback_text(state, h['feedback'])}\nTry again from the accepted file."})
            if self.messages[-1]["role"] == "assistant":  # the last file was a duplicate: never judged
                self.messages.append({"role": "user", "content": "That file was judged before; write a different one."})
            self.seen_history = len(state.history)
        self._check_clean(json.dumps(self.messages))
        reply = chat(self.url, self.key, self.model, self.messages, self.timeout_s)
        content = reply["choices"][0].get("message", {}).get("content") or ""
        self.messages.append({"role": "assistant", "content": content})
        usage = reply.get("usage") or {}
        code = extract_code(content)
        return Candidate(source=code or content, note=(content.split("```")[0].strip()[:200] or "model reply")
                         if code else "the reply had no Python file with class Model",
                         tokens_prompt=usage.get("prompt_tokens"), tokens_completion=usage.get("completion_tokens"),
                         tokens_total=usage.get("total_tokens"))
