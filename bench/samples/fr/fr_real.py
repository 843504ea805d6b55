"""Real flight-recorder dumps from a 2-rank gloo job (torch 2.13, CPU):
    TORCH_FR_BUFFER_SIZE=N torchrun --nproc_per_node 2 fr_real.py OUT COLLECTIVES
Writes, per rank, the dump before any collective, then after COLLECTIVES mixed collectives
(one more on rank 1) the default dump, one without stacks, one of active entries only, one
without collectives, and the JSON dump."""

import os
import sys
import time

import torch
import torch.distributed as dist

C = torch._C._distributed_c10d


def save(path, data):
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out, n = sys.argv[1], int(sys.argv[2])
    save(f"{out}/empty_rank_{rank}.pkl", C._dump_fr_trace())
    sub = dist.new_group([0, 1])
    t = torch.ones(1024)
    for i in range(n):
        if i % 7 == 3:
            dist.broadcast(t, 0, group=sub)
        elif i % 11 == 5:
            outs = [torch.empty(16) for _ in range(2)]
            dist.all_gather(outs, torch.ones(16, dtype=torch.float16).float())
        elif i % 13 == 6:
            dist.barrier()
        elif i % 17 == 8:
            x = torch.arange(6, dtype=torch.int64).reshape(2, 3)
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
        else:
            dist.all_reduce(t)
    if rank == 1:
        dist.all_reduce(t, async_op=True)  # one more on rank 1, never joined: rank 0 is behind
    save(f"{out}/rank_{rank}.pkl", C._dump_fr_trace())
    save(f"{out}/nostack_rank_{rank}.pkl", C._dump_fr_trace(includeStackTraces=False))
    save(f"{out}/active_rank_{rank}.pkl", C._dump_fr_trace(onlyActive=True))
    save(f"{out}/nocoll_rank_{rank}.pkl", C._dump_fr_trace(includeCollectives=False))
    save(f"{out}/rank_{rank}.json", C._dump_fr_trace_json())
    dist.barrier(group=sub, async_op=True).wait() if False else None
    time.sleep(2)  # both ranks dump before either leaves
    os._exit(0)  # rank 1's last collective never completes: no clean shutdown


main()
