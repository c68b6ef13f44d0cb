"""reshape_and_cache's kwargs (the key's shape, the cache's block size and dtype) from a KV-cache write's args."""

from __future__ import annotations

import re

from catalogue.op_args import Args


def extract(a: Args) -> dict:
    ts = a.tensors
    if not ts:
        return {}
    _, key, t = ts[0]
    out = {"shape": key, "dtype": t}
    caches = [e for e in ts[2:] if len(e[1]) >= 2]
    if caches:
        cache = caches[0]
        if len(cache[1]) == 4 and len(key) == 3:
            out["block_size"] = cache[1][1]  # vLLM flash layout [blocks, block_size, heads, dim]
        if len(cache[1]) == len(key) == 2 and cache[1][1] == key[1]:
            # SGLang store_cache: rows [T, Hkv·D] into a token-granular pool [slots, Hkv·D] (one
            # token per block); the heads split is on the enclosing set_kv_buffer's [T, Hkv, D].
            out["block_size"] = 1
            split = [d for o in a.outer(re.compile("set_kv_buffer")) for _, d, _ in o.nd(3)
                     if len(d) == 3 and d[0] == key[0] and d[1] * d[2] == key[1]]
            if split:
                out["shape"] = split[0]
        if cache[2] != t:
            out["kv_dtype"] = cache[2]
    return out
