"""Regression on pre-sharded data files, DDP over gloo.

Each rank reads its own shard files (``shard-XXXX``) instead of using a DistributedSampler, so the
number of batches per rank is whatever its files hold.
"""

from __future__ import annotations

import argparse
import datetime
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from common import flight
from common.data import SyntheticRegression
from common.logfmt import get_logger
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import ConcatDataset, DataLoader

log = get_logger("regress", style="loguru")

# Samples per shard file, as listed in the dataset manifest.
SHARD_SIZES = [384, 384, 384, 384, 384, 384, 384, 160]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--timeout", type=int, default=1800)
    args = ap.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    my_shards = list(range(len(SHARD_SIZES)))[rank::world]
    data = ConcatDataset([SyntheticRegression(SHARD_SIZES[s], 24, seed=s) for s in my_shards])
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    log.info(f"rank {rank}: shards {my_shards}, {len(data)} samples, {len(loader)} batches/epoch")

    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(24, 64), nn.SiLU(), nn.Linear(64, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()

    with flight.dump_on_failure():
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            log.info(f"step {step} loss {loss.item():.4f}")
        log.info(f"rank {rank} finished epoch after {len(loader)} steps, waiting for peers")
        dist.barrier()
        if rank == 0:
            torch.save(model.module.state_dict(), os.path.join(os.getcwd(), "regressor.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
