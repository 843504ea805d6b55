"""Sensor-to-target regression, DDP over gloo. Each batch is standardized on the fly with its own
mean and std (cheap, and no global statistics pass). Every rank logs its local loss each step.
"""

from __future__ import annotations

import argparse
import datetime
import math

import torch
import torch.distributed as dist
import torch.nn as nn
from common import flight
from common.logfmt import get_logger
from torch.nn.parallel import DistributedDataParallel as DDP

log = get_logger("sensors", style="rank")
N_SENSORS = 12


def read_shard(rank: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(500 + rank)
    x = torch.randn(rows, N_SENSORS, generator=g)
    if rank == 1:
        # Sensor 7 on the rig behind shard 1 was stuck at its last value for a while.
        x[736:768, 7] = 0.731
    y = x.sum(1, keepdim=True) + 0.05 * torch.randn(rows, 1, generator=g)
    return x, y


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = read_shard(rank, args.steps * args.batch_size)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(N_SENSORS, 64), nn.Tanh(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    log.info("shard of %d rows, %d sensors, world size %d", len(x), N_SENSORS, world)
    with flight.dump_on_failure():
        for step in range(args.steps):
            xb = x[step * args.batch_size : (step + 1) * args.batch_size]
            yb = y[step * args.batch_size : (step + 1) * args.batch_size]
            xb = (xb - xb.mean(0)) / xb.std(0)
            loss = nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            log.info("step %d local_loss %.4f", step, loss.item())
            avg = loss.detach().clone()
            dist.all_reduce(avg)
            avg /= world
            if not math.isfinite(avg.item()):
                raise FloatingPointError(f"loss became {avg.item()} at step {step}; stopping")
            if rank == 0 and step % 5 == 0:
                log.info("step %d mean loss %.4f", step, avg.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
