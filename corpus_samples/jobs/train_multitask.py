"""Multi-task model (classification + auxiliary reconstruction head), DDP over gloo.

The auxiliary loss can be switched off from the command line.
"""

from __future__ import annotations

import argparse
import datetime
import logging

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common import flight
from common.data import SyntheticClassification
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

logger = logging.getLogger("multitask")


class MultiTask(nn.Module):
    def __init__(self, dim: int, classes: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(dim, 64), nn.ReLU())
        self.cls_head = nn.Linear(64, classes)
        self.aux_head = nn.Linear(64, dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(x)
        return self.cls_head(h), self.aux_head(h)


@record
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--aux-weight", type=float, default=0.0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    ds = SyntheticClassification(512, 20, 4, seed=3)
    loader = DataLoader(ds, batch_size=16, sampler=DistributedSampler(ds, seed=3))
    torch.manual_seed(0)
    model = DDP(MultiTask(20, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    logger.info("rank %d: aux_weight=%s", rank, args.aux_weight)
    with flight.dump_on_failure():
        for step, (x, y) in enumerate(loader):
            logits, recon = model(x)
            loss = F.cross_entropy(logits, y)
            if args.aux_weight > 0:
                loss = loss + args.aux_weight * F.mse_loss(recon, x)
            opt.zero_grad()
            loss.backward()
            opt.step()
            logger.info("step %d loss %.4f", step, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
