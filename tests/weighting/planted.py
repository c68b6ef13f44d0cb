"""A planted fleet for weighting tests: real public traces cut into profiles, ingested, under a trace root."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")

# source trace (under tests/fixtures/traces) → (stand-in phase, pieces to cut it into)
SOURCES = {
    "sglang_decode": ("tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz", "decode", 3),
    "sglang_extend": ("tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz", "prefill", 2),
    "vllm_decode": ("tracelens/inference/vllm_decode_full/graph_execution.json.gz", "decode", 2),
    "b200_eager": ("tracelens/b200/eager_trace.json.gz", "mixed", 2),
    "mi210": ("tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz", "unknown", 3),
    "alexnet": ("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", "unknown", 1),
}


def cut_trace(src: Path, dst_dir: Path, pieces: int) -> list[Path]:
    """`src` cut into `pieces` Kineto files, each keeping every host event and the GPU events of one time window."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    events = doc["traceEvents"]
    gpu_ts = sorted(float(e["ts"]) for e in events if e.get("cat") in GPU_CATS and e.get("ph") == "X")
    bounds = [gpu_ts[(len(gpu_ts) * i) // pieces] for i in range(pieces)] + [float("inf")]
    out = []
    dst_dir.mkdir(parents=True, exist_ok=True)
    for i in range(pieces):
        lo, hi = bounds[i], bounds[i + 1]
        keep = [e for e in events if e.get("cat") not in GPU_CATS or lo <= float(e.get("ts", 0)) < hi]
        path = dst_dir / f"part{i}.json.gz"
        # mtime=0: the same cut gives the same bytes, hence the same content-addressed trace_id.
        path.write_bytes(gzip.compress(json.dumps({**doc, "traceEvents": keep}).encode(), mtime=0))
        out.append(path)
    return out


def gpu_ns_of(path: Path) -> float:
    """Σ dur of the GPU activities of a Kineto file, in ns, read straight from the JSON."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return sum(float(e["dur"]) * 1000 for e in doc["traceEvents"] if e.get("cat") in GPU_CATS and e.get("ph") == "X")


def stand_in_op_shape_time(events: pl.DataFrame, phase: str) -> pl.DataFrame:
    """op_shape_time with kernel name as operator and the launching op's input dims as shape.

    Used while ingest's classifier is not installed; memcpy/memset stay unattributed.
    """
    rows = events.filter(pl.col("category") == "kernel").with_columns(
        pl.col("kernel").alias("operator"),
        pl.when(pl.col("input_dims").is_null())
        .then(pl.lit("{}"))
        .otherwise(pl.lit('{"dims":') + pl.col("input_dims") + pl.lit("}"))
        .alias("shape"),
        pl.lit(phase).alias("phase"),
    )
    return rows.group_by("trace_id", "operator", "shape", "phase").agg(
        pl.col("dur_ns").sum().alias("gpu_ns"), pl.len().cast(pl.Int64).alias("calls")
    )


def build_root(public: Path, root: Path, names: list[str]) -> dict[str, list[str]]:
    """Cut the named sources into `root/<name>/part*.json.gz`; name → relative paths."""
    out = {}
    for name in names:
        rel, _phase, pieces = SOURCES[name]
        out[name] = [p.relative_to(root).as_posix() for p in cut_trace(public / rel, root / name, pieces)]
    return out


def ingest_root(root: Path, rels: dict[str, list[str]], out: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """traces and op_shape_time of the cut files, written to `out` as Parquet by ingest and read back."""
    try:
        import ingest.classify  # noqa: F401  (the classifier is installed)
        from ingest.output import write_ingest
    except ImportError:
        write_ingest = None
    if write_ingest is not None:
        # The real `hotshape ingest --out DIR` path: DIR/traces.parquet and DIR/op_shape_time.parquet.
        write_ingest([root / rel for paths in rels.values() for rel in paths], out, root=root)
        return pl.read_parquet(out / "traces.parquet"), pl.read_parquet(out / "op_shape_time.parquet")
    from ingest.pipeline import ingest_trace

    summaries, parts = [], []
    for name, paths in sorted(rels.items()):
        for rel in paths:
            result = ingest_trace(root / rel, rel)
            summaries.append(result.summary)
            if "operator" in result.events.columns:
                from ingest.classify import op_shape_time

                parts.append(op_shape_time(result.events))
            else:
                parts.append(stand_in_op_shape_time(result.events, SOURCES[name][1]))
    out.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(summaries).write_parquet(out / "traces.parquet")
    pl.concat(parts, how="vertical_relaxed").write_parquet(out / "op_shape_time.parquet")
    return pl.read_parquet(out / "traces.parquet"), pl.read_parquet(out / "op_shape_time.parquet")
