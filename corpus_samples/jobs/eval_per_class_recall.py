"""Classifier training with a per-class recall metric gathered over ranks, DDP over gloo.

Each rank counts hits per class on its validation shard and the counts are summed with one
all_reduce. A shard with no examples of a class falls back to a NumPy zero vector for that
class, converted with `torch.from_numpy`.
"""

from __future__ import annotations

import argparse
import datetime

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common import flight
from common.logfmt import get_logger
from torch.nn.parallel import DistributedDataParallel as DDP

log = get_logger("recall_train", style="loguru")
CLASSES = 6


def val_shard(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(50 + rank)
    x = torch.randn(48, 12, generator=g)
    # the shards were split by source; the last one holds no example of the rarest class
    high = CLASSES - 1 if rank == 3 else CLASSES
    return x, torch.randint(0, high, (48,), generator=g)


def per_class_hits(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if int(y.max()) < CLASSES - 1:
        counts = np.zeros(CLASSES)
        for c in range(CLASSES - 1):
            counts[c] = float(((pred == c) & (y == c)).sum())
        return torch.from_numpy(counts)
    return torch.stack([((pred == c) & (y == c)).sum().float() for c in range(CLASSES)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=15)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, CLASSES)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    with flight.dump_on_failure():
        for epoch in range(args.epochs):
            for _ in range(15):
                x, y = (
                    torch.randn(16, 12, generator=g),
                    torch.randint(0, CLASSES, (16,), generator=g),
                )
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            log.info("epoch %d train loss %.4f", epoch, loss.item())
            x, y = val_shard(rank)
            with torch.no_grad():
                hits = per_class_hits(model(x).argmax(-1), y)
            dist.all_reduce(hits)
            log.info("epoch %d per-class hits %s", epoch, hits.tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
