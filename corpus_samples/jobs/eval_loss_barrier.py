"""Classifier training with a validation pass every epoch, DDP over gloo.

The validation loop is wrapped so that every rank meets at a barrier before the next epoch,
whatever happened in it (the pattern of `accelerator.wait_for_everyone()` in a `finally:`).
Validation batches come from a per-rank list of (inputs, labels) pairs read from shards.
"""

from __future__ import annotations

import argparse
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common import flight
from common.logfmt import get_logger
from torch.nn.parallel import DistributedDataParallel as DDP

log = get_logger("cls_train", style="plain")


def val_shard(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(100 + rank)
    shard = [
        (torch.randn(8, 16, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(4)
    ]
    if rank == 2:
        # the last shard of rank 2 was written with one label row short
        x, y = shard[-1]
        shard[-1] = (x, y[:7])
    return shard


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=12)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    with flight.dump_on_failure():
        for epoch in range(args.epochs):
            for _step in range(20):
                x, y = torch.randn(8, 16, generator=g), torch.randint(0, 3, (8,), generator=g)
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            log.info("epoch %d train loss %.4f", epoch, loss.item())
            try:
                total = torch.zeros(2)
                with torch.no_grad():
                    for x, y in val_shard(rank):
                        total[0] += F.cross_entropy(model(x), y, reduction="sum")
                        total[1] += len(y)
                dist.all_reduce(total)
                log.info("epoch %d val loss %.4f", epoch, (total[0] / total[1]).item())
            finally:
                dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
