"""A Triton cache manager that reads the autotuning a file's persistent cache kept and keeps none itself: what
the lanes' workers of `hotshape eval --lanes` run with (TRITON_CACHE_MANAGER). Autotuning beside other lanes'
kernels picks other configurations than a quiet device does (seen on H200: layer_norm problems 20-25% slower
or faster), so only the timing phase, alone on the device, keeps its picks; a later run's checks reuse them
instead of autotuning every shape again (seen on H200: a warm run's checks took as long as a cold one's,
134 s against 136 s for 103 problems, the lanes autotuning each shape anew). Compiled kernels are cached as
usual. Imports Triton: loaded in a worker only."""

from __future__ import annotations

import functools

from triton.runtime.cache import FileCacheManager
from kernels_eval.harness.profiler_guard import records_paused

AUTOTUNE_SUFFIX = ".autotune.json"  # the name Triton's autotuner gives the picks it caches
MANAGER = f"{__name__}:KeptAutotuningOnly"  # the TRITON_CACHE_MANAGER value naming the class below


class KeptAutotuningOnly(FileCacheManager):
    """FileCacheManager that never writes autotuning results (reading them as usual)."""

    def put(self, data, filename, binary=True) -> str | None:
        if filename.endswith(AUTOTUNE_SUFFIX):
            return None
        return super().put(data, filename, binary)


# Triton's autotuner times each configuration with triton.testing.do_bench's defaults: 25 ms of warm-up and
# 100 ms of repetitions. Seen on H200, a cold evaluation's timing phase (one problem at a time, the device to
# itself) spent most of its ~1,100 s for 436 problems in the first timed call of each problem, which
# autotunes: unified_attention ~6 s a problem, fused_moe ~5.6 s. A worker's defaults are these instead; a
# 5 µs kernel still runs ~400 times per configuration, a 5 ms one 4 times. A submission that passes its own
# warmup and rep (or its own do_bench) gets those.
AUTOTUNE_WARMUP_MS = 5
AUTOTUNE_REP_MS = 20


def shorter_benchmarks(warmup_ms: float = AUTOTUNE_WARMUP_MS, rep_ms: float = AUTOTUNE_REP_MS):
    """Make `warmup_ms` and `rep_ms` triton.testing.do_bench's defaults in this process (what Triton's autotuner
    calls, through its driver's get_benchmarker), run each benchmark with the profiler's CUDA collection paused
    (`profiler_guard.records_paused`: its thousands of launches, L2 flushes among them, are not the call's
    result), and count them: returns a function giving the number run so far, with which the timing loop
    refuses timed calls that benchmark (a call that autotunes again is not the steady state timed, and work in
    its benchmark would not be in the records). Called in a worker before its guarded functions (harness/guarded.py) are taken,
    so the wrapper is the identity a candidate may not replace."""
    import triton.testing

    plain = getattr(triton.testing.do_bench, "__wrapped__", triton.testing.do_bench)
    count = [0]

    @functools.wraps(plain)
    def do_bench(fn, warmup=warmup_ms, rep=rep_ms, *args, **kwargs):
        count[0] += 1
        with records_paused():
            return plain(fn, warmup, rep, *args, **kwargs)

    triton.testing.do_bench = do_bench
    return lambda: count[0]
