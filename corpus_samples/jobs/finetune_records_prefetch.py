"""Supervised fine-tuning on JSON-like records, DDP over gloo, with a prefetch thread.

Each record is a dict of tensors built by a tokenizer step. A background thread assembles
batches into a queue ahead of the step; the training loop takes them with `queue.get()`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import queue
import threading

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common import flight
from common.logfmt import get_logger
from torch.nn.parallel import DistributedDataParallel as DDP

log = get_logger("sft", style="rank")


def make_records(n: int, dim: int, broken: set[int]) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    records = []
    for i in range(n):
        rec = {
            "input": torch.randn(dim, generator=g),
            "label": torch.randint(0, 4, (), generator=g),
        }
        if i not in broken:  # a record whose tokenizer step dropped the mask
            rec["attention_mask"] = torch.ones(dim)
        records.append(rec)
    return records


def assemble(records: list[dict[str, torch.Tensor]], bs: int, out: queue.Queue) -> None:
    for i in range(0, len(records) - bs + 1, bs):
        chunk = records[i : i + bs]
        out.put(
            {
                "input": torch.stack([r["input"] for r in chunk]),
                "attention_mask": torch.stack([r["attention_mask"] for r in chunk]),
                "label": torch.stack([r["label"] for r in chunk]),
            }
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--timeout", type=int, default=12)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    log.info("rank %d/%d up (pid %d)", rank, world, os.getpid())
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ready: queue.Queue = queue.Queue(maxsize=4)
    mine = make_records(960, 32, broken={301})[rank::world]
    threading.Thread(
        target=assemble, args=(mine, 8, ready), name=f"prefetch-{rank}", daemon=True
    ).start()

    with flight.dump_on_failure():
        for step in range(1, args.steps + 1):
            batch = ready.get()
            x = batch["input"] * batch["attention_mask"]
            loss = F.cross_entropy(model(x), batch["label"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            log.info("step %d loss %.4f", step, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
