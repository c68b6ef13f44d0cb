"""Pinning a configuration of a candidate's `triton.autotune` in the worker, and seeing which (kernel, key) a call
tuned: the worker's half of the evaluator's autotuning protocol (autotune_protocol.py).

`install()` wraps `Autotuner.run` (before the worker takes its guarded functions (harness/guarded.py), so the wrapper is the
identity a candidate may not replace). The wrapper gives each autotuner a `PinnedCache` in place of its `cache`
dict: for a (kernel, key) in `PINS` it answers with the pinned configuration, so Triton runs it and benchmarks
nothing; with `Watch.active` (the protocol's discovery call) it notes each (kernel, key) a call reaches, the
configurations the autotuner's own pruning keeps for it (indices into its `configs`) and the one that ran, and
answers a key it has not decided with the first configuration the pruning keeps, so that the discovery call
benchmarks nothing (the protocol times every configuration anyway). Keys are Triton's tuning keys (the
autotuner's `key` arguments, then each tensor argument's dtype), written with repr().

Nothing here is believed by the parent: the parent times what ran (the records between its markers) and the
row records what the parent asked for. Imports Triton: loaded in a worker (and CPU tests) only.
"""

from __future__ import annotations

import functools
from typing import ClassVar

# kernel name -> key text -> config index; the worker sets it from each command's "pins"
PINS: dict[str, dict[str, int]] = {}


class Watch:
    """What the calls made while `active` tuned: [{kernel, key, indices, used}] in first-use order."""

    active: ClassVar[bool] = False
    tuned: ClassVar[list[dict]] = []

    @classmethod
    def start(cls) -> None:
        cls.active, cls.tuned = True, []

    @classmethod
    def stop(cls) -> list[dict]:
        cls.active = False
        return list(cls.tuned)


def kernel_name(tuner) -> str:
    """The autotuned kernel's name (its @triton.jit function's), which is also its name in the GPU records."""
    fn = getattr(tuner, "base_fn", None) or getattr(tuner, "fn", None)
    while fn is not None and not hasattr(fn, "__name__") and hasattr(fn, "fn"):
        fn = fn.fn
    return getattr(fn, "__name__", "?")


def _index(configs: list, config) -> int:
    for i, c in enumerate(configs):
        if c is config:
            return i
    return configs.index(config)


class PinnedCache(dict):
    """An autotuner's cache that answers pinned keys with the pinned configuration and notes what is reached."""

    def __init__(self, tuner, kept: dict) -> None:
        super().__init__(kept)
        self.tuner = tuner
        self.kernel = kernel_name(tuner)
        self.kwargs: dict = {}

    def _pinned(self, key):
        index = PINS.get(self.kernel, {}).get(repr(key))
        if index is None or not 0 <= index < len(self.tuner.configs):
            return None
        return self.tuner.configs[index]

    def __contains__(self, key) -> bool:
        # watching (the protocol's discovery call), every key is answered here: Triton benchmarks nothing
        return Watch.active or self._pinned(key) is not None or dict.__contains__(self, key)

    def __getitem__(self, key):
        config = self._pinned(key)
        pruned = None
        if config is None and Watch.active and not dict.__contains__(self, key):
            # not decided in this process: the first configuration its pruning keeps runs, untimed
            configs = self.tuner.configs
            pruned = self.tuner.prune_configs(self.kwargs) if len(configs) > 1 else configs
            config = pruned[0]
        elif config is None:
            config = dict.__getitem__(self, key)
        if Watch.active:
            text = repr(key)
            if not any(t["kernel"] == self.kernel and t["key"] == text for t in Watch.tuned):
                configs = self.tuner.configs
                if pruned is None:
                    pruned = self.tuner.prune_configs(self.kwargs) if len(configs) > 1 else configs
                Watch.tuned.append({"kernel": self.kernel, "key": text,
                                    "indices": [_index(configs, c) for c in pruned],
                                    "configs": [str(c) for c in pruned], "used": _index(configs, config)})
        return config


def install() -> None:
    """Wrap Triton's Autotuner.run once in this process (see the module's docstring)."""
    from triton.runtime.autotuner import Autotuner

    plain = getattr(Autotuner.run, "__wrapped__", Autotuner.run)

    @functools.wraps(plain)
    def run(self, *args, **kwargs):
        cache = self.__dict__.get("cache")
        if not isinstance(cache, PinnedCache):
            cache = self.cache = PinnedCache(self, cache or {})
        cache.kwargs = kwargs
        return plain(self, *args, **kwargs)

    Autotuner.run = run
