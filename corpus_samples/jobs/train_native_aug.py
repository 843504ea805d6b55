"""Training loop with a native (ctypes) augmentation helper that copies pixel buffers in place.

The helper looks up a staging buffer per image size; a size it has never seen yields a null
pointer, which is then handed to the native copy.
"""

from __future__ import annotations

import ctypes
import datetime
import faulthandler
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common import flight
from torch.nn.parallel import DistributedDataParallel as DDP

libc = ctypes.CDLL(None)
libc.memcpy.restype = ctypes.c_void_p
libc.memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]


class StagingBuffers:
    """Pinned-style staging area, one buffer per known crop size."""

    def __init__(self, sizes: list[int]) -> None:
        self.buffers = {s: torch.empty(3 * s * s) for s in sizes}

    def pointer(self, size: int) -> int:
        buf = self.buffers.get(size)
        return 0 if buf is None else buf.data_ptr()


def augment(x: torch.Tensor, staging: StagingBuffers) -> torch.Tensor:
    size = x.shape[-1]
    dst = torch.empty_like(x)
    for i in range(x.shape[0]):
        src = staging.pointer(size)
        libc.memcpy(dst[i].data_ptr(), src, x[i].numel() * 4)
    return dst.flip(-1)


def main() -> None:
    faulthandler.enable()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    print(f"rank {rank} pid {os.getpid()}: augmentation via native memcpy", flush=True)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    staging = StagingBuffers([32])
    g = torch.Generator().manual_seed(rank)
    with flight.dump_on_failure():
        for step in range(1, 30):
            # Every 9th batch of rank 1's shard comes from the high-resolution camera (48 px).
            size = 48 if (rank == 1 and step % 9 == 0) else 32
            x = torch.rand(8, 3, size, size, generator=g)
            x = augment(x, staging)
            x = F.interpolate(x, size=(32, 32)) if size != 32 else x
            loss = F.cross_entropy(model(x), torch.randint(0, 10, (8,), generator=g))
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
