"""MLP classifier with a validation pass at the end of every epoch (DDP, gloo).

Validation files are split across ranks by index; each rank reports its validation loss and the
job averages it before rank 0 writes the checkpoint.
"""

from __future__ import annotations

import argparse
import datetime
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common import flight
from common.data import SyntheticClassification
from common.logfmt import get_logger
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

log = get_logger("trainer", style="glog")

VAL_FILES = ["val-00000.pt", "val-00001.pt"]


def evaluate(model: nn.Module, files: list[str], dim: int, classes: int) -> torch.Tensor | None:
    """Summed loss and sample count over this rank's validation files, or None if it has none."""
    batches = [SyntheticClassification(64, dim, classes, seed=100 + i) for i, _ in enumerate(files)]
    if not batches:
        return None
    total = torch.zeros(2)
    model.eval()
    with torch.no_grad():
        for ds in batches:
            total[0] += F.cross_entropy(model(ds.x), ds.y, reduction="sum")
            total[1] += len(ds)
    model.train()
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    log.info("initialised rank %d of %d, pid %d", rank, world, os.getpid())

    train = SyntheticClassification(1536, args.dim, args.classes, seed=7)
    sampler = DistributedSampler(train, shuffle=True, seed=7)
    loader = DataLoader(train, batch_size=32, sampler=sampler)
    net = nn.Sequential(nn.Linear(args.dim, 128), nn.ReLU(), nn.Linear(128, args.classes))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    my_val_files = VAL_FILES[rank::world]

    with flight.dump_on_failure():
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            for step, (x, y) in enumerate(loader):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if step % 4 == 0:
                    log.info("epoch %d step %d loss %.4f", epoch, step, loss.item())
            log.info("epoch %d done, evaluating on %d file(s)", epoch, len(my_val_files))
            val = evaluate(model.module, my_val_files, args.dim, args.classes)
            if val is not None:
                dist.all_reduce(val)
                log.info("epoch %d val_loss %.4f", epoch, (val[0] / val[1]).item())
            dist.barrier()
            if rank == 0:
                torch.save(model.module.state_dict(), f"ckpt_epoch{epoch}.pt")
                log.info("saved ckpt_epoch%d.pt", epoch)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
