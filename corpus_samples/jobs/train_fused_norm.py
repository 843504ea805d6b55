"""Transformer-ish block using the cluster's fused kernel package ``fastkernels``."""

from __future__ import annotations

import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
from common import flight
from fastkernels import __version__ as fk_version
from fastkernels import fused_rmsnorm
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ff(fused_rmsnorm(x, self.weight))


def main() -> None:
    print(f"{socket.gethostname()} pid {os.getpid()}: fastkernels {fk_version}", flush=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=25))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Block(64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with flight.dump_on_failure():
        for step in range(20):
            x = torch.randn(8, 16, 64)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
