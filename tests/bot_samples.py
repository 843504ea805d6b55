"""Issue bodies and settings the bot tests share."""

from __future__ import annotations

from triage.bot.rest import RetryPolicy
from triage.bot.settings import ServiceSettings

# A retry policy that keeps the tests fast; rate-limit waits the API asks for are still kept.
FAST_RETRY = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05, max_wait=5.0,
                         default_limit_wait=0.05)  # fmt: skip
# No embedding model (26 s to load cold): rules and TF-IDF neighbours decide.
SETTINGS = ServiceSettings(embeddings=False)

# The rules settle it: NCCL cannot create its shared-memory segment.
SHM_BODY = """\
Training dies right at startup on 2 nodes, torch 2.3.

```
node07:27106:27302 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment nccl-shm-recv-b79-0-3-0 (size 4460544)
[rank3]:Traceback (most recent call last):
[rank3]:  File "/workspace/train.py", line 40, in <module>
[rank3]:    dist.all_reduce(t)
[rank3]:torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error, NCCL version 2.20.5
```
"""  # noqa: E501 - log lines are as long as they are

# A watchdog timeout: a hang, named with middling confidence (the bot asks for more).
WATCHDOG_BODY = """\
Our 16-GPU job hangs and then dies after 10 minutes.

<details><summary>rank 3 log</summary>

```
[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1204, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600043 milliseconds before timing out.
```

</details>
"""  # noqa: E501

# Nothing to go on: triage abstains.
VAGUE_BODY = "My training is slow and then it stops, no error. Any idea?"

# A plain CUDA OOM traceback pasted without a fence.
OOM_BODY = """\
Got this after upgrading:

Traceback (most recent call last):
  File "/workspace/train.py", line 40, in <module>
    loss = model(batch).sum()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.15 GiB memory in use.
"""  # noqa: E501
