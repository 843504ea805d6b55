"""A small DDP regression job for the fleet samples (`corpus_samples/make_fleet.py`).

One script, many runs: what goes wrong (if anything) is chosen per run by `FLEET_FAULT`,
`<kind>:<rank>:<step>`, so that a fleet of real torchrun jobs holds healthy runs and the
failures a platform team sees every week:

- `keyerror`  the collate function meets a record without its label (a data bug);
- `valueerror` a rank's config gives a tensor of the wrong width (a code bug);
- `illegal`   the GPU under the rank faults: the kernel logs an Xid and CUDA reports an illegal
  memory access to the process (a hardware fault);
- `ecc`       the GPU's memory has an uncorrectable ECC error: Xid 48 and CUDA's ECC error.

There is no GPU on the machines that make the samples, so a hardware fault is simulated in the
two places a real one shows: the process raises CUDA's own message, and the kernel line the
driver would print goes to `$FLEET_KERNEL_LOG` (what a site's epilog collects with `dmesg`).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from common import flight
from common.data import SyntheticRegression
from common.logfmt import get_logger
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

log = get_logger("fleet", style="rank")

# What the NVIDIA driver prints for each simulated fault (docs.nvidia.com/deploy/xid-errors).
KERNEL_LINES = {
    "illegal": "NVRM: Xid (PCI:{pci}): 13, pid={pid}, Graphics SM Warp Exception on "
    "(GPC 1, TPC 0, SM 1): Out Of Range Address",
    "ecc": "NVRM: Xid (PCI:{pci}): 48, pid={pid}, An uncorrectable double bit error (DBE) has "
    "been detected on GPU in the framebuffer at partition 3, subpartition 0.",
}
CUDA_ERRORS = {
    "illegal": "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.",
    "ecc": "CUDA error: uncorrectable ECC error encountered",
}


def fault() -> tuple[str, int, int] | None:
    spec = os.environ.get("FLEET_FAULT", "")
    if not spec:
        return None
    kind, rank, step = spec.split(":")
    return kind, int(rank), int(step)


def collate(batch: list[tuple[torch.Tensor, torch.Tensor]], missing: bool) -> tuple:
    if missing:
        record = {"features": batch[0][0]}  # a record written without its label
        return record["features"], record["label"]
    return torch.stack([b[0] for b in batch]), torch.stack([b[1] for b in batch])


def gpu_fault(kind: str, rank: int) -> None:
    pci = os.environ.get("FLEET_GPU_PCI", "0000:3b:00")
    kernel_log = os.environ.get("FLEET_KERNEL_LOG")
    if kernel_log:
        stamp = time.strftime("%a %b %d %H:%M:%S %Y")
        with open(kernel_log, "a", encoding="utf-8") as fh:
            fh.write(f"[{stamp}] {KERNEL_LINES[kind].format(pci=pci, pid=os.getpid())}\n")
    raise RuntimeError(CUDA_ERRORS[kind])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--timeout", type=int, default=30)
    args = ap.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    host = os.environ.get("CORPUS_HOST", "localhost")
    log.info(f"rank {rank}/{world} on {host}, device cuda:{os.environ.get('LOCAL_RANK', '0')}")
    planned = fault()
    width = args.width
    if planned and planned[0] == "valueerror" and planned[1] == rank:
        width = args.width + 8  # this rank read an older config

    data = SyntheticRegression(64 * args.steps, args.width, seed=1)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(args.width, 32), nn.SiLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)

    with flight.dump_on_failure():
        for step in range(args.steps):
            here = planned is not None and planned[1] == rank and planned[2] == step
            missing = here and planned is not None and planned[0] == "keyerror"
            batch = [data[i] for i in list(sampler)[step * 8 : step * 8 + 8]]
            x, y = collate(batch, missing)
            if here and planned is not None and planned[0] in CUDA_ERRORS:
                gpu_fault(planned[0], rank)
            if here and planned is not None and planned[0] == "valueerror":
                x = torch.cat([x, torch.zeros(x.shape[0], width - args.width)], dim=1)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            log.info(f"step {step} loss {loss.item():.4f}")
            time.sleep(float(os.environ.get("FLEET_STEP_S", "0.05")))
        dist.barrier()
    log.info(f"rank {rank} done after {args.steps} steps")
    dist.destroy_process_group()
    sys.exit(0)


if __name__ == "__main__":
    main()
