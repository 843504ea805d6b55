"""A small gloo job that hangs: every rank but one waits in an all_reduce while the straggler
(rank $STALL_RANK) is stuck loading its next shard. Used by the snapshot tests.

When the job sets TORCH_NCCL_DEBUG_INFO_PIPE_FILE and TORCH_FR_DUMP_TEMP_FILE, each rank serves
`<stem><rank>.pipe` and writes its flight-recorder dump to `<prefix><rank>` when a line arrives:
what ProcessGroupNCCL does for NCCL groups, which gloo groups lack.
"""

from __future__ import annotations

import datetime
import os
import threading
import time

import torch
import torch._C._distributed_c10d as c10d
import torch.distributed as dist


def serve_dump_pipe(rank: int) -> None:
    stem = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if not stem or not prefix:
        return
    pipe = f"{stem}{rank}.pipe"
    os.mkfifo(pipe)

    def serve() -> None:
        while True:
            with open(pipe, "rb") as fh:
                if not fh.read():
                    continue
            with open(f"{prefix}{rank}", "wb") as out:
                out.write(c10d._dump_fr_trace())

    threading.Thread(target=serve, daemon=True).start()


def load_next_shard() -> None:
    # stands for a read from a stuck network file system; bounded, so that a job a test
    # failed to stop still ends by itself
    time.sleep(150)


def main() -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    serve_dump_pipe(rank)
    grads = torch.ones(64)
    for _ in range(3):
        dist.all_reduce(grads)
    with open(os.path.join(os.environ["READY_DIR"], f"ready_{rank}"), "w"):
        pass
    if rank == int(os.environ.get("STALL_RANK", "2")):
        load_next_shard()
    dist.all_reduce(grads)


if __name__ == "__main__":
    main()
