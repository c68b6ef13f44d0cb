"""Speed-of-light time of one problem on one accelerator: max(flops / peak[path], bytes / bandwidth)."""

from __future__ import annotations

from catalogue import registry
from catalogue.hardware import Hardware, load_hardware


def _resolve(hardware: Hardware | str) -> Hardware:
    if isinstance(hardware, Hardware):
        return hardware
    table = load_hardware()
    if hardware not in table:
        raise KeyError(f"unknown accelerator {hardware!r}; known: {', '.join(table)}")
    return table[hardware]


def roofline_time(flops: int, total_bytes: int, peak_flops: float, bandwidth: float) -> tuple[float, float, float]:
    """(t_compute_s, t_memory_s, t_roofline_s) for the given rates."""
    t_compute = flops / peak_flops if flops else 0.0
    t_memory = total_bytes / bandwidth
    return t_compute, t_memory, max(t_compute, t_memory)


def problem_roofline(operator: str, init_kwargs: dict | None, input_kwargs: dict | None,
                     hardware: Hardware | str) -> dict:
    """flops, bytes_read, bytes_written, path, t_compute_s, t_memory_s, bound, t_roofline_s (datasheet) and
    t_roofline_measured_s (measured ceilings; None where the accelerator has none) of one problem."""
    hw = _resolve(hardware)
    w = registry.work(operator, init_kwargs, input_kwargs)
    total = w["bytes_read"] + w["bytes_written"]
    t_c, t_m, t = roofline_time(w["flops"], total, hw.peak_flops(w["path"]), hw.bandwidth())
    measured = None
    if hw.has_measurements:
        measured = roofline_time(w["flops"], total, hw.measured_flops(w["path"]), hw.measured_bandwidth())[2]
    return {"operator": operator, "hardware": hw.name, **w, "bytes": total, "t_compute_s": t_c,
            "t_memory_s": t_m, "bound": "compute" if t_c > t_m else "memory", "t_roofline_s": t,
            "t_roofline_measured_s": measured}
