"""Does the fp8 quantisers' reference divide the same way on the GPU as on the CPU? Prints, for 16M random
amax values on CUDA, the share where `fp8_scale` and PyTorch's division by the Python scalar 448 agree with
IEEE division (computed in float64 and rounded once). Run on a GPU machine from the repo root:
    PYTHONPATH=$PWD python3 benchmarks/fp8_division_check.py
"""

import torch

from kernels_eval.operators._common import FP8_MAX, fp8_scale


def main() -> None:
    g = torch.Generator(device="cuda")
    g.manual_seed(0)
    amax = torch.rand(1 << 24, device="cuda", generator=g) * 16
    ieee = (amax.double() / FP8_MAX).float()
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print(f"fp8_scale(amax) == IEEE amax/448:         {(fp8_scale(amax) == ieee).float().mean().item():.6f}")
    print(f"amax / 448 (Python scalar) == IEEE:       {(amax / FP8_MAX == ieee).float().mean().item():.6f}")


if __name__ == "__main__":
    main()
