"""Embedding pretraining with a token co-occurrence metric, DDP over gloo.

Every few steps rank 0 computes a co-occurrence statistic of the batch's tokens over the whole
vocabulary for the run's dashboard. When a step fails, every rank meets at a barrier and writes
an emergency checkpoint before exiting, so a crash never loses more than one step.
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
from common.logfmt import get_logger
from torch.nn.parallel import DistributedDataParallel as DDP

log = get_logger("embed_pretrain", style="glog")
VOCAB = 131072
DIM = 32


def cooccurrence(tokens: torch.Tensor) -> torch.Tensor:
    counts = torch.zeros(VOCAB, VOCAB)  # dense vocab x vocab: 64 GiB of float32
    for row in tokens:
        counts[row[:-1], row[1:]] += 1
    return counts


def emergency_checkpoint(model: nn.Module, step: int) -> None:
    log.warning("step %d failed; syncing ranks for an emergency checkpoint", step)
    dist.barrier()
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), os.path.join(os.getcwd(), f"emergency_step{step}.pt"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--metric-every", type=int, default=10)
    ap.add_argument("--timeout", type=int, default=12)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Embedding(512, DIM), nn.Linear(DIM, 512)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    step = 0
    with flight.dump_on_failure():
        try:
            for step in range(1, args.steps + 1):
                tokens = torch.randint(0, 512, (16, 9), generator=g)
                logits = model(tokens[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, 512), tokens[:, 1:].reshape(-1))
                opt.zero_grad()
                loss.backward()
                opt.step()
                log.info("step %d loss %.4f", step, loss.item())
                if rank == 0 and step % args.metric_every == 0:
                    stats = cooccurrence(tokens)
                    log.info("step %d co-occurrence mass %.1f", step, stats.sum().item())
        except Exception:
            emergency_checkpoint(model.module, step)
            raise
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
