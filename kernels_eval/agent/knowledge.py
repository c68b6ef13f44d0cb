"""The knowledge base of the `llm` proposer: the Triton reference kernels (one passage per top-level function
or class, with the module's notes), docs/*.md and the operator registry's notes (one passage per section),
tagged by operator and regime and retrieved with BM25.

BM25 is computed in SQL over DuckDB tables rather than with DuckDB's `fts` extension: `fts` is not bundled
with the wheel and `INSTALL fts` downloads it, which these machines cannot (checked with duckdb 2.0.1)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from catalogue import registry

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("examples/submissions/triton_reference/*.py", "examples/submissions/triton_reference/README.md",
           "docs/*.md", "kernels_eval/operators/README.md")
REGIME_WORDS = {
    "memory": ("bandwidth", "memory-bound", "bytes", "stream", "coalesc", "vector", "copy", "hbm"),
    "compute": ("tensor core", "tensor-core", "gemm", "mma", "wgmma", "flops", "tl.dot", "compute-bound"),
    "latency": ("launch", "latency", "split-k", "split-kv", "split", "occupancy", "programs", "wave", "floor"),
}
K1, B = 1.2, 0.75
MAX_PASSAGE_CHARS = 4000
TOKEN = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")


@dataclass
class Passage:
    """One retrievable piece of text and where it came from."""

    source: str
    title: str
    operator: str
    regime: str
    text: str


def tokens(text: str) -> list[str]:
    """Lower-case words; a snake_case word counts whole and by its parts (rms_norm → rms_norm, rms, norm)."""
    out = []
    for word in TOKEN.findall(text.lower()):
        out.append(word)
        if "_" in word:
            out += [p for p in word.split("_") if p]
    return out


def _regimes(text: str) -> str:
    low = text.lower()
    return ",".join(r for r, words in REGIME_WORDS.items() if any(w in low for w in words))


def _python_passages(path: Path, rel: str, operators: set[str]) -> list[Passage]:
    source = path.read_text()
    tree = ast.parse(source)
    op = path.stem if path.stem in operators else ""
    doc = ast.get_docstring(tree) or ""
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            text = ast.get_source_segment(source, node) or ""
            full = (f"{doc}\n\n" if doc else "") + text
            out.append(Passage(rel, node.name, op, _regimes(full), full[:MAX_PASSAGE_CHARS]))
    return out


def _markdown_passages(path: Path, rel: str, operators: set[str]) -> list[Passage]:
    sections = re.split(r"(?m)^(?=#{1,3} )", path.read_text())
    out = []
    for sec in sections:
        if not sec.strip():
            continue
        title = sec.splitlines()[0].lstrip("# ").strip()
        named = [o for o in operators if o in sec]
        op = max(named, key=lambda o: sec.count(o)) if named else ""
        out.append(Passage(rel, title, op, _regimes(sec), sec[:MAX_PASSAGE_CHARS]))
    return out


def collect_passages(root: Path = REPO) -> list[Passage]:
    """Every passage of the knowledge base's sources under `root`."""
    operators = set(registry.operator_names())
    out = []
    for pattern in SOURCES:
        for path in sorted(root.glob(pattern)):
            rel = path.relative_to(root).as_posix()
            out += _python_passages(path, rel, operators) if path.suffix == ".py" else \
                _markdown_passages(path, rel, operators)
    return out


class KnowledgeBase:
    """Passages in DuckDB (docs, terms) ranked by BM25, boosted for the operator and the regime asked for."""

    def __init__(self, passages: list[Passage], sealed: set[str] = frozenset()) -> None:
        import duckdb
        import pyarrow as pa

        needles = [s.lower() for s in sealed]
        kept = [p for p in passages if not any(s in p.text.lower() for s in needles)]
        self.dropped = len(passages) - len(kept)  # passages naming a sealed string never reach a prompt
        self.passages = kept
        self.db = duckdb.connect()
        docs: dict[str, list] = {"id": [], "operator": [], "regime": [], "len": []}
        terms: dict[str, list] = {"id": [], "term": [], "tf": []}
        for i, p in enumerate(kept):
            words = tokens(f"{p.title} {p.text}")
            for col, value in zip(docs, (i, p.operator, p.regime, len(words))):
                docs[col].append(value)
            counts: dict[str, int] = {}
            for w in words:
                counts[w] = counts.get(w, 0) + 1
            terms["id"] += [i] * len(counts)
            terms["term"] += list(counts)
            terms["tf"] += list(counts.values())
        docs_t, terms_t = pa.table(docs), pa.table(terms)  # noqa: F841 - read by name in the SQL below
        self.db.execute("CREATE TABLE docs AS SELECT id::INTEGER AS id, operator::VARCHAR AS operator, "
                        "regime::VARCHAR AS regime, len::INTEGER AS len FROM docs_t")
        self.db.execute("CREATE TABLE terms AS SELECT id::INTEGER AS id, term::VARCHAR AS term, tf::INTEGER AS tf "
                        "FROM terms_t")

    @classmethod
    def build(cls, root: Path = REPO, sealed: set[str] = frozenset()) -> "KnowledgeBase":
        """The knowledge base of the repository's sources, without passages that carry a sealed string."""
        return cls(collect_passages(root), sealed)

    def search(self, query: str, operator: str | None = None, regime: str | None = None,
               k: int = 4) -> list[tuple[float, Passage]]:
        """The `k` best passages for `query` (BM25), a passage of `operator` scoring 1.5x and one tagged with
        `regime` 1.2x."""
        words = sorted(set(tokens(query)))
        if not words or not self.passages:
            return []
        rows = self.db.execute(f"""
            WITH stats AS (SELECT count(*) AS n, avg(len) AS avgdl FROM docs),
            q AS (SELECT unnest(?::VARCHAR[]) AS term),
            df AS (SELECT t.term, count(*) AS df FROM terms t JOIN q USING (term) GROUP BY t.term),
            scored AS (
                SELECT t.id, sum(ln(1 + (stats.n - df.df + 0.5) / (df.df + 0.5))
                                 * t.tf * ({K1} + 1) / (t.tf + {K1} * (1 - {B} + {B} * d.len / stats.avgdl))) AS bm25
                FROM terms t JOIN df USING (term) JOIN docs d ON d.id = t.id, stats
                GROUP BY t.id)
            SELECT s.id, s.bm25 * (CASE WHEN d.operator = ? THEN 1.5 ELSE 1.0 END)
                              * (CASE WHEN ? <> '' AND contains(d.regime, ?) THEN 1.2 ELSE 1.0 END) AS score
            FROM scored s JOIN docs d ON d.id = s.id
            ORDER BY score DESC, s.id LIMIT ?""",
            [words, operator or "", regime or "", regime or "", k]).fetchall()
        return [(float(score), self.passages[i]) for i, score in rows]
