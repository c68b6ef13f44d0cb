"""A Triton cache manager that reads the autotuning a file's persistent cache kept and keeps none itself: what
the lanes' workers of `hotshape eval --lanes` run with (TRITON_CACHE_MANAGER). Autotuning beside other lanes'
kernels picks other configurations than a quiet device does (seen on H200: layer_norm problems 20-25% slower
or faster), so only the timing phase, alone on the device, keeps its picks; a later run's checks reuse them
instead of autotuning every shape again (seen on H200: a warm run's checks took as long as a cold one's,
134 s against 136 s for 103 problems, the lanes autotuning each shape anew). Compiled kernels are cached as
usual. Imports Triton: loaded in a worker only."""

from __future__ import annotations

from triton.runtime.cache import FileCacheManager

AUTOTUNE_SUFFIX = ".autotune.json"  # the name Triton's autotuner gives the picks it caches
MANAGER = f"{__name__}:KeptAutotuningOnly"  # the TRITON_CACHE_MANAGER value naming the class below


class KeptAutotuningOnly(FileCacheManager):
    """FileCacheManager that never writes autotuning results (reading them as usual)."""

    def put(self, data, filename, binary=True) -> str | None:
        if filename.endswith(AUTOTUNE_SUFFIX):
            return None
        return super().put(data, filename, binary)
