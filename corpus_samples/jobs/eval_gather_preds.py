"""Distributed evaluation: every rank scores its slice of the test set, rank 0 computes metrics.

Predictions are collected with all_gather into buffers shaped like the local predictions.
"""

from __future__ import annotations

import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from common import flight


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"[eval] rank={rank} world={world} pid={os.getpid()}", flush=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 5)).eval()

    n_test = 1000
    per_rank = -(-n_test // world)  # ceil: the last rank gets what is left over
    start = rank * per_rank
    stop = min(n_test, start + per_rank)
    g = torch.Generator().manual_seed(42)
    test_x = torch.randn(n_test, 16, generator=g)
    print(f"[eval] rank {rank} scores samples {start}..{stop - 1} ({stop - start})", flush=True)

    with flight.dump_on_failure():
        dist.barrier()
        for chunk in range(3):
            with torch.no_grad():
                local = model(test_x[start:stop]).argmax(-1)
            gathered = [torch.zeros_like(local) for _ in range(world)]
            dist.all_gather(gathered, local)
            if rank == 0:
                preds = torch.cat(gathered)
                print(f"[eval] pass {chunk}: gathered {preds.numel()} predictions", flush=True)
        dist.barrier()
    if rank == 0:
        print("[eval] done", flush=True)
    dist.destroy_process_group()
    sys.exit(0)


if __name__ == "__main__":
    main()
