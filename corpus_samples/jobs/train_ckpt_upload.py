"""Training that checkpoints to object storage every few steps. Rank 0 writes and uploads the
checkpoint (the uploader is rate-limited to be a good neighbour on the shared link); the other
ranks carry on with the next step. Logs are JSON lines for the log shipper.
"""

from __future__ import annotations

import datetime
import io
import json
import logging
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from common import flight
from torch.nn.parallel import DistributedDataParallel as DDP

UPLOAD_BYTES_PER_S = 1.5 * 2**20
CHUNK = 256 * 2**10


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            {
                "ts": round(record.created, 3),
                "level": record.levelname.lower(),
                "rank": int(os.environ.get("RANK", -1)),
                "logger": record.name,
                "msg": record.getMessage(),
            }
        )


handler = logging.StreamHandler(sys.stdout)
handler.setFormatter(JsonLines())
log = logging.getLogger("ckpt_train")
log.addHandler(handler)
log.setLevel(logging.INFO)


def upload(blob: bytes, key: str) -> None:
    """Send the checkpoint in chunks, sleeping to stay under the bandwidth budget."""
    sent = 0
    start = time.monotonic()
    while sent < len(blob):
        sent += len(blob[sent : sent + CHUNK])
        ahead = sent / UPLOAD_BYTES_PER_S - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
    log.info("uploaded %s (%.1f MiB)", key, len(blob) / 2**20)


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    log.info("ready, %d parameters", sum(p.numel() for p in model.parameters()))
    with flight.dump_on_failure():
        for step in range(1, 40):
            x = torch.randn(16, 512, generator=g)
            loss = (model(x) - x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            log.info("step %d loss %.5f", step, loss.item())
            if step % 10 == 0 and rank == 0:
                buf = io.BytesIO()
                torch.save({"model": model.module.state_dict(), "opt": opt.state_dict()}, buf)
                log.info("checkpoint step %d: %.1f MiB, uploading", step, buf.tell() / 2**20)
                upload(buf.getvalue(), f"s3://team-bucket/run-17/step{step:06d}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
