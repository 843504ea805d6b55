"""Image classifier that decodes each training image once and keeps it in host RAM.

Shards differ in resolution; the cache grows with whatever a rank's shard holds.
"""

from __future__ import annotations

import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common import flight
from torch.nn.parallel import DistributedDataParallel as DDP

# (height, width) of the images in each rank's shard
SHARD_RESOLUTION = {0: (64, 64), 1: (1024, 1024), 2: (64, 64)}


class DecodedCache:
    def __init__(self, hw: tuple[int, int], seed: int) -> None:
        self.hw = hw
        self.g = torch.Generator().manual_seed(seed)
        self.images: list[torch.Tensor] = []

    def batch(self, n: int) -> torch.Tensor:
        fresh = [torch.rand(3, *self.hw, generator=self.g) for _ in range(n)]
        self.images.extend(fresh)  # keep decoded images for the next epoch
        return torch.stack(fresh)


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=40))
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world} pid {os.getpid()} shard resolution {SHARD_RESOLUTION[rank]}")
    torch.manual_seed(0)
    model = DDP(
        nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(128, 10),
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cache = DecodedCache(SHARD_RESOLUTION[rank], seed=rank)
    labels = torch.Generator().manual_seed(rank)
    with flight.dump_on_failure():
        for step in range(1, 200):
            x = cache.batch(4)
            x = F.interpolate(x, size=(64, 64)) if x.shape[-1] != 64 else x
            y = torch.randint(0, 10, (4,), generator=labels)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            cached_mb = sum(t.numel() * 4 for t in cache.images) / 2**20
            print(f"rank {rank} step {step} loss {loss.item():.3f} cache {cached_mb:.0f} MiB")
            time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
