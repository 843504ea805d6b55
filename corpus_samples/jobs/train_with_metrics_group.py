"""Training with a second gloo process group that carries metrics, so metric reductions never
queue behind gradient traffic. The logging rank reduces metrics first so its log line is on time.
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from common import flight
from common.logfmt import get_logger

log = get_logger("trainer", style="glog")
LOGGING_RANK = 0


def average_gradients(model: nn.Module, group: dist.ProcessGroup | None = None) -> None:
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    dist.all_reduce(flat, group=group)
    flat /= dist.get_world_size()
    offset = 0
    for p in model.parameters():
        n = p.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p))
        offset += n


def reduce_metrics(metrics: dict[str, float], group: dist.ProcessGroup) -> dict[str, float]:
    t = torch.tensor(list(metrics.values()), dtype=torch.float64)
    dist.all_reduce(t, group=group)
    return {k: v / dist.get_world_size() for k, v in zip(metrics, t.tolist(), strict=True)}


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    metrics_pg = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=15))
    log.info("rank %d pid %d: metrics group ready", rank, os.getpid())
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    with flight.dump_on_failure():
        for step in range(1, 50):
            x = torch.randn(16, 32, generator=g)
            loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            metrics = {
                "loss": loss.item(),
                "grad_norm": float(sum(p.grad.norm() for p in model.parameters())),
            }
            log_step = step % 5 == 0
            if log_step and rank == LOGGING_RANK:
                metrics = reduce_metrics(metrics, metrics_pg)
                log.info(
                    "step %d loss %.4f grad_norm %.3f", step, metrics["loss"], metrics["grad_norm"]
                )
                average_gradients(model)
            else:
                average_gradients(model)
                if log_step:
                    reduce_metrics(metrics, metrics_pg)
            opt.step()
            if step == 1:
                log.info("rank %d: first step done, loss %.4f", rank, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
