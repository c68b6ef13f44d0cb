"""The leak check finds sealed strings in public files: raw bytes, decoded Parquet, metadata, card."""

from __future__ import annotations

import io
import shutil
import zlib

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from release.bundle import read_release
from release.sealing import LeakError, assert_no_leak, leak_check, public_vocabulary, sealed_strings


def _sealed(release):
    rel = read_release(release)
    return sealed_strings(rel.sealed("provenance")), public_vocabulary(rel.manifest)


@pytest.fixture
def copy(atrex_release, tmp_path):
    dst = tmp_path / "release"
    shutil.copytree(atrex_release, dst)
    return dst


def test_imported_release_is_clean_and_its_sealed_names_are_real(atrex_release):
    sealed, vocab = _sealed(atrex_release)
    # Names from the published metadata that must never be public.
    assert {"vllm", "sglang", "fused_experts", "w8a8_triton_block_scaled_mm"} <= sealed
    report = assert_no_leak(atrex_release, sealed, vocab)
    assert report.ok and report.sealed > 50
    assert "README.md" in report.files and not any(f.startswith("sealed/") for f in report.files)
    # An upstream name equal to a public operator name cannot be hidden: exempt, not a leak.
    assert "rms_norm" in report.exempt and "vllm" not in report.exempt


def test_sealed_string_in_release_card_is_found(copy):
    sealed, vocab = _sealed(copy)
    (copy / "README.md").write_text((copy / "README.md").read_text() + "\nMeasured on vLLM.\n")
    with pytest.raises(LeakError, match="README.md"):
        assert_no_leak(copy, sealed, vocab)


def test_sealed_string_in_compressed_parquet_value_is_found_by_decoding(copy):
    sealed, vocab = _sealed(copy)
    # Earlier values hold both halves, so zstd encodes the name as back-references.
    table = pa.table({"note": ["fused_moe_ab" * 3, "ccc_kernel" * 3, "fused_moe_kernel"]})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", use_dictionary=False, write_statistics=False)
    assert b"fused_moe_kernel" not in sink.getvalue()  # invisible in the raw bytes
    (copy / "public" / "extra.parquet").write_bytes(sink.getvalue())
    report = leak_check(copy, sealed, vocab)
    assert ("public/extra.parquet", "column note", "fused_moe_kernel") in report.findings


def test_sealed_string_in_parquet_metadata_and_column_names_is_found(copy):
    sealed, vocab = _sealed(copy)
    table = pa.table({"sglang_time": [1.0]}).replace_schema_metadata({"origin": "rtp-llm"})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    (copy / "public" / "weights" / "v9.parquet").write_bytes(sink.getvalue())
    found = {(where, s) for _, where, s in leak_check(copy, sealed, vocab).findings}
    assert ("column name", "sglang") in found
    assert ("key-value metadata", "rtp-llm") in found


def test_sealed_strings_come_from_every_provenance_column():
    prov = pl.DataFrame({
        "deployments": [["chat-llama3-8b"]], "models": [["llama3-8b"]], "frameworks": [["vllm"]],
        "raw_ops": [["aten::mm"]], "kernels": [["ampere_bf16_gemm"]], "trace_ids": [["0123456789abcdef"]],
        "trace_files": [["llama3/rank0-2026.json.gz"]],
    })
    got = sealed_strings(prov, extra=["x"])  # too short to search for
    assert got == {"chat-llama3-8b", "llama3-8b", "vllm", "aten::mm", "ampere_bf16_gemm", "0123456789abcdef",
                   "llama3/rank0-2026.json.gz", "rank0-2026.json.gz"}


def test_png_text_chunks_are_checked_but_pixels_are_not(copy):
    sealed, vocab = _sealed(copy)
    png = (copy / "plots" / "phase_split.png").read_bytes()
    assert leak_check(copy, sealed, vocab).ok
    # A tEXt chunk (as matplotlib's metadata= would write) right after IHDR.
    body = b"Comment\0profiled with sglang"
    chunk = len(body).to_bytes(4, "big") + b"tEXt" + body + zlib.crc32(b"tEXt" + body).to_bytes(4, "big")
    ihdr_end = 8 + 12 + int.from_bytes(png[8:12], "big")
    (copy / "plots" / "phase_split.png").write_bytes(png[:ihdr_end] + chunk + png[ihdr_end:])
    assert ("plots/phase_split.png", "raw bytes", "sglang") in leak_check(copy, sealed, vocab).findings
