"""fastkernels 0.4.1: fused CPU/GPU kernels (cluster build)."""

import torch

__version__ = "0.4.1"


def fused_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def fused_gelu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x)
