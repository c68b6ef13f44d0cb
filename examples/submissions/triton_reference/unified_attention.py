"""unified_attention in Triton: varlen causal attention of q [sum q_len, Hq, D] over a paged KV cache
[blocks, bs, Hkv, D] through block_table (vLLM V1's unified kernel contract), bottom-right causal, GQA,
scale 1/sqrt(D).

Flash attention over pages with the GQA group packed into the query tile (as vLLM's Triton kernel does): a
program owns BLOCK_Q query tokens of one sequence and one kv head, and its BLOCK_M rows are token × head-in-group
(row r is token r // GROUP, query head kv_head·GROUP + r % GROUP), so each K/V page tile is loaded once per kv
head rather than once per query head, and a decode token fills GROUP rows instead of one padded row.

The grid's first axis runs over query tiles laid out as tile(s, i) = cu_seqlens_q[s] // BLOCK_Q + s + i, so its
size, total_q // BLOCK_Q + num_seqs, needs no device sync; the second is the kv head. With MAP_MIN_SEQS or more
sequences a first small launch writes each tile's sequence into a map (sequence s owns the tiles from its first up
to the next sequence's first) and a program reads it there; with fewer, each program binary-searches
cu_seqlens_q. A program past its sequence's queries leaves. On an H200 the map was 1.07x faster on 699 and 1192
sequences of 256 tokens and 10-15 us slower on 8 sequences (benchmarks/results/variants/ua/ and
results/triton_reference/run11_*); a program per (sequence, kv head) walking all its query tiles (0.98x) and
64-row tiles for two programs per SM (0.93x) lost.

A program keeps its Q tile in registers and walks the keys it may see (up to the causal limit of its last token)
BLOCK_N at a time, looking each key's page up in the block table (unmasked steps for the keys every row sees,
masked ones near the diagonal), with an online softmax (exp2, fp32 statistics) and both products on tensor cores
(tl.dot; P cast to the cache dtype as flash attention does). Rows that see no key give zeros. A head that is not a
power of two is split into a power of two and a power-of-two tail (72 and 80: 64 + 16 columns, 192: 128 + 64)
with a dot and an accumulator each, rather than padded to the next power of two (128 for 72, 44% of it waste).

The autotuner keys on the group, the head, the tile rows and the grid's size to a power of two (programs_log2,
unused in the kernel): keyed without the size, the config picked on a group's first problem, 18 sequences, stayed
for its 2056-sequence ones. Strides are passed in units of VEC elements (8 when every stride is a multiple of 8
and the tensors are 16-byte aligned, else 1), so Triton can prove each row start 16-byte aligned and use vector
loads and asynchronous copies even for heads of 72 (on an H200 before this, D = 72 ran at 0.11 of the roofline
against 0.30 at D = 128).
"""

import math

import torch
import triton
import triton.language as tl
from torch import nn

# At least this many sequences: a first launch maps tiles to sequences; fewer: each program's binary search is a
# few dependent loads, cheaper than that launch (8 sequences of 256-4096 tokens took 10-15 us longer with the map)
MAP_MIN_SEQS = 32
MAX_ROWS = 128  # rows of one tile (token × head-in-group) when the head fits 128 columns; 64 above


def _configs():
    return [triton.Config({"BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bn, w, s in ((64, 4, 3), (64, 8, 3), (64, 8, 4), (32, 4, 3), (128, 8, 2), (128, 8, 3), (32, 8, 2),
                             (64, 8, 2))]


def prune_configs(configs, named_args, **kwargs):
    """Wide heads keep the narrower key tiles (K, V and the fp32 accumulator must fit); short tiles keep 4 warps."""
    args = {**named_args, **kwargs}
    keep = [c for c in configs
            if (args["BLOCK_D"] + args["TAIL_D"] * args["HAS_TAIL"] <= 128 or c.kwargs["BLOCK_N"] * c.num_stages <= 128)
            and (args["BLOCK_M"] >= 64 or c.num_warps == 4)]
    return keep or configs[:1]


@triton.jit
def _kv_step(q, qt, acc, acct, m, l, k_base, kt_base, v_base, vt_base, table_row, start, kv_end, limit, scale_log2,
             k_s0, k_s1, v_s0, v_s1, d_ok, dt_ok, BS: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
             VEC: tl.constexpr, HAS_TAIL: tl.constexpr):
    """One BLOCK_N-key step of the online softmax over the head's first BLOCK_D columns (q, acc) and, with
    HAS_TAIL, its next TAIL_D (qt, acct). MASKED applies the key range and the causal limit; the tiles that every
    row of the Q tile sees in full skip both."""
    n = start + tl.arange(0, BLOCK_N)
    if MASKED:
        n_ok = n < kv_end
    else:
        n_ok = n >= 0
    phys = tl.load(table_row + n // BS, mask=n_ok, other=0).to(tl.int64)
    rows_k = ((phys * k_s0 + (n % BS) * k_s1) * VEC)[None, :]
    kt = tl.load(k_base + rows_k, mask=d_ok[:, None] & n_ok[None, :], other=0.0)
    scores = tl.dot(q, kt)
    if HAS_TAIL:
        scores = tl.dot(qt, tl.load(kt_base + rows_k, mask=dt_ok[:, None] & n_ok[None, :], other=0.0), scores)
    scores = scores * scale_log2
    if MASKED:
        scores = tl.where(n_ok[None, :] & (n[None, :] <= limit[:, None]), scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that see no key yet
    else:
        m_new = tl.maximum(m, tl.max(scores, 1))
        m_use = m_new
    alpha = tl.exp2(m - m_use)
    p = tl.exp2(scores - m_use[:, None])
    l = l * alpha + tl.sum(p, 1)
    rows_v = ((phys * v_s0 + (n % BS) * v_s1) * VEC)[:, None]
    v = tl.load(v_base + rows_v, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
    p = p.to(v.dtype)
    acc = acc * alpha[:, None] + tl.dot(p, v)
    if HAS_TAIL:
        vt = tl.load(vt_base + rows_v, mask=n_ok[:, None] & dt_ok[None, :], other=0.0)
        acct = acct * alpha[:, None] + tl.dot(p, vt)
    return acc, acct, m_new, l


@triton.jit
def tile_sequence_kernel(cu_q_ptr, map_ptr, num_seqs, num_tiles, BLOCK_Q: tl.constexpr, CHUNK: tl.constexpr):
    """map[tile] = the sequence owning tile: sequence s owns tiles cu_q[s] // BLOCK_Q + s up to the next
    sequence's first tile (the last one up to num_tiles), so every tile is written once."""
    s = tl.program_id(0)
    first = tl.load(cu_q_ptr + s) // BLOCK_Q + s
    if s + 1 < num_seqs:
        stop = tl.load(cu_q_ptr + s + 1) // BLOCK_Q + s + 1
    else:
        stop = num_tiles
    offs = tl.arange(0, CHUNK)
    for at in range(first, stop, CHUNK):
        tl.store(map_ptr + at + offs, tl.zeros((CHUNK,), dtype=tl.int32) + s, mask=at + offs < stop)


@triton.jit
def _attend_tile(q_ptr, k_ptr, v_ptr, table_ptr, out_ptr, s, local, q_start, q_len, kv_len, hk, scale_log2, q_s0,
                 q_s1, k_s0, k_s1, k_s2, v_s0, v_s1, v_s2, table_stride, out_s0, out_s1, GROUP: tl.constexpr,
                 HEAD_DIM: tl.constexpr, BS: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, TAIL_D: tl.constexpr, HAS_TAIL: tl.constexpr,
                 VEC: tl.constexpr):
    """Query tile `local` (BLOCK_Q tokens x the group's heads) of sequence s against its keys. The head's columns
    are BLOCK_D then, with HAS_TAIL, TAIL_D more (a head of 80 is 64 + 16, not padded to 128)."""
    r = tl.arange(0, BLOCK_M)
    rows = local * BLOCK_Q + r // GROUP  # query index inside the sequence
    head = hk * GROUP + r % GROUP
    row_ok = (r < BLOCK_Q * GROUP) & (rows < q_len)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    dt = BLOCK_D + tl.arange(0, TAIL_D)  # the tail's columns (unused without a tail)
    dt_ok = dt < HEAD_DIM
    tok = (q_start + rows).to(tl.int64)
    q_rows = q_ptr + ((tok * q_s0 + head * q_s1) * VEC)[:, None]
    q = tl.load(q_rows + d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    if HAS_TAIL:
        qt = tl.load(q_rows + dt[None, :], mask=row_ok[:, None] & dt_ok[None, :], other=0.0)
    else:
        qt = tl.zeros((BLOCK_M, TAIL_D), dtype=q.dtype)
    shift = kv_len - q_len
    limit = rows + shift  # row r sees keys j <= limit[r]
    # keys below full_end are seen by every row of the tile; the rest up to kv_end need masks
    full_end = tl.maximum(tl.minimum(local * BLOCK_Q + shift + 1, kv_len), 0) // BLOCK_N * BLOCK_N
    kv_end = tl.minimum(kv_len, local * BLOCK_Q + BLOCK_Q + shift)
    k_head = k_ptr + hk.to(tl.int64) * k_s2 * VEC
    v_head = v_ptr + hk.to(tl.int64) * v_s2 * VEC
    k_base, kt_base = k_head + d[:, None], k_head + dt[:, None]
    v_base, vt_base = v_head + d[None, :], v_head + dt[None, :]
    table_row = table_ptr + s.to(tl.int64) * table_stride
    m = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    acct = tl.zeros((BLOCK_M, TAIL_D), dtype=tl.float32)
    for start in range(0, full_end, BLOCK_N):
        acc, acct, m, l = _kv_step(q, qt, acc, acct, m, l, k_base, kt_base, v_base, vt_base, table_row, start,
                                   kv_end, limit, scale_log2, k_s0, k_s1, v_s0, v_s1, d_ok, dt_ok, BS, BLOCK_N, False,
                                   VEC, HAS_TAIL)
    for start in range(full_end, kv_end, BLOCK_N):
        acc, acct, m, l = _kv_step(q, qt, acc, acct, m, l, k_base, kt_base, v_base, vt_base, table_row, start,
                                   kv_end, limit, scale_log2, k_s0, k_s1, v_s0, v_s1, d_ok, dt_ok, BS, BLOCK_N, True,
                                   VEC, HAS_TAIL)
    inv = tl.where(l > 0, 1.0 / tl.where(l > 0, l, 1.0), 0.0)[:, None]  # rows that saw no key give zeros
    out_rows = out_ptr + ((tok * out_s0 + head * out_s1) * VEC)[:, None]
    tl.store(out_rows + d[None, :], (acc * inv).to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    if HAS_TAIL:
        tl.store(out_rows + dt[None, :], (acct * inv).to(out_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & dt_ok[None, :])


@triton.autotune(configs=_configs(), key=["GROUP", "HEAD_DIM", "BLOCK_M", "programs_log2"],
                 prune_configs_by={"early_config_prune": prune_configs})
@triton.jit
def unified_attention_kernel(q_ptr, k_ptr, v_ptr, cu_q_ptr, kv_lens_ptr, table_ptr, map_ptr, out_ptr, scale_log2,
                             num_seqs, programs_log2, q_s0, q_s1, k_s0, k_s1, k_s2, v_s0, v_s1, v_s2, table_stride,
                             out_s0, out_s1, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BS: tl.constexpr,
                             BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             BLOCK_D: tl.constexpr, TAIL_D: tl.constexpr, HAS_TAIL: tl.constexpr,
                             VEC: tl.constexpr, HAS_MAP: tl.constexpr):
    # element strides (not table_stride) come in units of VEC: every row start below is a multiple of VEC
    tile = tl.program_id(0)
    hk = tl.program_id(1)
    if HAS_MAP:  # the tile's sequence, written by tile_sequence_kernel
        s = tl.load(map_ptr + tile)
    else:  # few sequences: the largest s with cu_q[s] // BLOCK_Q + s <= tile, by binary search
        lo = tl.zeros((), dtype=tl.int32)
        hi = tl.zeros((), dtype=tl.int32) + num_seqs - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            go_up = tl.load(cu_q_ptr + mid) // BLOCK_Q + mid <= tile
            lo = tl.where(go_up, mid, lo)
            hi = tl.where(go_up, hi, mid - 1)
        s = lo
    q_start = tl.load(cu_q_ptr + s)
    q_len = tl.load(cu_q_ptr + s + 1) - q_start
    kv_len = tl.load(kv_lens_ptr + s)
    local = tile - (q_start // BLOCK_Q + s)
    if local * BLOCK_Q < q_len:
        _attend_tile(q_ptr, k_ptr, v_ptr, table_ptr, out_ptr, s, local, q_start, q_len, kv_len, hk, scale_log2, q_s0,
                     q_s1, k_s0, k_s1, k_s2, v_s0, v_s1, v_s2, table_stride, out_s0, out_s1, GROUP, HEAD_DIM, BS,
                     BLOCK_Q, BLOCK_M, BLOCK_N, BLOCK_D, TAIL_D, HAS_TAIL, VEC)


def head_columns(d: int) -> tuple[int, int]:
    """(BLOCK_D, TAIL_D): the head's columns as a power of two plus a power-of-two tail of at least 16 (tl.dot's
    smallest K) when that covers it in fewer columns than the next power of two: 72 and 80 -> 64 + 16 (80 columns,
    not 128), 192 -> 128 + 64; 128 -> 128 + 0."""
    whole = max(16, triton.next_power_of_2(d))
    head = whole // 2
    tail = max(16, triton.next_power_of_2(d - head)) if d > head >= 16 else 0
    return (head, tail) if tail and head + tail < whole else (whole, 0)


def tile_rows(group: int, total_q: int, num_seqs: int, block_d: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_Q): rows of a tile and query tokens per tile. Enough rows for the mean query length
    times the group, between 16 (the smallest tl.dot) and MAX_ROWS; a group wider than that gets one token."""
    mean_q = -(-total_q // num_seqs)  # from shapes alone: no device sync
    cap = MAX_ROWS if block_d <= 128 else MAX_ROWS // 2
    rows = min(max(16, triton.next_power_of_2(group * mean_q)), cap)
    rows = max(rows, triton.next_power_of_2(group))
    return rows, rows // group


class Model(nn.Module):
    """Causal (bottom-right) attention of each sequence's q rows over its seqused_k paged keys."""

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
                seqused_k: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
        total_q, hq, d = q.shape
        _, bs, hkv, _ = k_cache.shape
        if q.stride(-1) != 1:
            q = q.contiguous()
        if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
            k_cache, v_cache = k_cache.contiguous(), v_cache.contiguous()
        cu_seqlens_q, seqused_k = cu_seqlens_q.contiguous(), seqused_k.contiguous()
        block_table = block_table.contiguous()
        out = torch.empty_like(q)
        num_seqs = seqused_k.shape[0]
        if total_q == 0 or num_seqs == 0:
            return out
        group = hq // hkv
        block_d, tail_d = head_columns(d)
        block_m, block_q = tile_rows(group, total_q, num_seqs, block_d + tail_d)
        tiles = total_q // block_q + num_seqs
        grid = (tiles, hkv)
        has_map = num_seqs >= MAP_MIN_SEQS
        tile_seq = torch.empty(tiles if has_map else 1, dtype=torch.int32, device=q.device)
        if has_map:
            tile_sequence_kernel[(num_seqs,)](cu_seqlens_q, tile_seq, num_seqs, tiles, BLOCK_Q=block_q, CHUNK=128)
        strides = (q.stride(0), q.stride(1), *k_cache.stride()[:3], *v_cache.stride()[:3])
        # 8 elements = 16 bytes, the widest vector load, when every row start is a multiple of it: a head of 72
        # otherwise gets 2-byte loads and no asynchronous copies (Triton cannot prove the alignment of hk * 72)
        aligned = (all(x % 8 == 0 for x in strides + (out.stride(0), out.stride(1)))
                   and all(t.data_ptr() % 16 == 0 for t in (q, k_cache, v_cache, out)))
        vec = 8 if aligned else 1
        q_s0, q_s1, k_s0, k_s1, k_s2, v_s0, v_s1, v_s2 = (x // vec for x in strides)
        unified_attention_kernel[grid](
            q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, tile_seq, out, d ** -0.5 * math.log2(math.e),
            num_seqs, (grid[0] * grid[1]).bit_length(), q_s0, q_s1, k_s0, k_s1, k_s2, v_s0, v_s1, v_s2,
            block_table.stride(0), out.stride(0) // vec, out.stride(1) // vec, GROUP=group, HEAD_DIM=d, BS=bs,
            BLOCK_Q=block_q, BLOCK_M=block_m, BLOCK_D=block_d, TAIL_D=max(tail_d, 16), HAS_TAIL=tail_d > 0, VEC=vec,
            HAS_MAP=has_map)
        return out

