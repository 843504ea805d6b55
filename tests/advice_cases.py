# ruff: noqa: E501 (pasted log lines are as long as the logs made them)
"""Pasted errors as users paste them, each with the frameworks the job really ran on.

The frameworks are the truth of the case, written by hand from the paste: the advice check
(tests/test_advice_everywhere.py) holds every fix triage lists against them, so triage's own
framework detection is tested too, not trusted.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paste:
    name: str
    frameworks: frozenset[str]  # what the job ran on: ddp, fsdp, deepspeed, megatron, ...
    text: str
    launchers: frozenset[str] = frozenset()


def _p(name: str, frameworks: str, text: str, launchers: str = "") -> Paste:
    return Paste(name, frozenset(frameworks.split()), text, frozenset(launchers.split()))


PASTES: tuple[Paste, ...] = (
    _p(
        "ddp_cuda_oom",
        "ddp",
        """Traceback (most recent call last):
  File "/workspace/train.py", line 88, in <module>
    loss = model(batch).loss
  File "/opt/venv/lib/python3.11/site-packages/torch/nn/parallel/distributed.py", line 1639, in forward
    return self._run_ddp_forward(*inputs, **kwargs)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.15 GiB memory in use.
""",
    ),
    _p(
        "ddp_sigkill_host_oom",
        "ddp",
        """E1202 10:11:50.809000 21145 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 21192) of binary: /opt/venv/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_10:11:50
  host      : node11
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 21192)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 21192
""",
        "torchrun",
    ),
    _p(
        "deepspeed_cuda_oom",
        "deepspeed",
        """  File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1976, in backward
    self.optimizer.backward(loss, retain_graph=retain_graph)
  File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/zero/stage3.py", line 2213, in backward
    self.loss_scaler.backward(loss.float(), retain_graph=retain_graph)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 7 has a total capacity of 79.19 GiB of which 1.02 GiB is free.
""",
    ),
    _p(
        "deepspeed_host_oom",
        "deepspeed",
        """[2024-05-02 10:11:12,345] [INFO] [launch.py:146:main] WORLD INFO DICT: {'localhost': [0, 1, 2, 3]}
[2024-05-02 10:20:03,001] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 4242
[2024-05-02 10:20:03,002] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=2', '--deepspeed', 'ds_config.json'] exits with return code = -9
""",
        "deepspeed",
    ),
    _p(
        "fsdp_save_timeout",
        "fsdp",
        """  File "/usr/lib/python3/site-packages/torch/distributed/fsdp/_state_dict_utils.py", line 301, in _full_post_state_dict_hook
    state_dict = _full_pre_state_dict_hook(fsdp_state, module, *args, **kwargs)
[rank1]:[E1202 08:27:55.251] [PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5121, OpType=_ALLGATHER_BASE, NumelIn=2048, NumelOut=16384, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.
""",
    ),
    _p(
        "ddp_watchdog_timeout",
        "ddp",
        """[rank2]:[E1202 08:27:55.251] [PG ID 0 PG GUID 0(default_pg) Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.
[rank2]:[E1202 08:27:55.252] [PG ID 0 PG GUID 0(default_pg) Rank 2] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
""",
    ),
    _p(
        "hf_trainer_barrier_timeout",
        "transformers ddp",
        """  File "/usr/local/lib/python3.10/dist-packages/transformers/trainer.py", line 1859, in _inner_training_loop
    self.accelerator.wait_for_everyone()
torch.distributed.DistBackendError: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800436 milliseconds before timing out.
""",
    ),
    _p(
        "accelerate_store_timeout",
        "accelerate",
        """  File "/opt/conda/lib/python3.10/site-packages/accelerate/state.py", line 212, in __init__
    torch.distributed.init_process_group(backend=self.backend, **kwargs)
torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.
""",
    ),
    _p(
        "store_socket_timeout_no_counts",
        "",
        """Traceback (most recent call last):
  File "/workspace/train.py", line 12, in <module>
    dist.init_process_group("nccl")
torch.distributed.DistStoreError: Socket Timeout
""",
    ),
    _p(
        "ninja_missing",
        "",
        """Traceback (most recent call last):
  File "/workspace/setup_ops.py", line 8, in <module>
    load(name="fused_norm", sources=["norm.cpp", "norm.cu"])
RuntimeError: Ninja is required to load C++ extensions
""",
    ),
    _p(
        "deepspeed_op_build_failed",
        "deepspeed",
        """Using /root/.cache/torch_extensions/py310_cu121 as PyTorch extensions root...
  File "/opt/venv/lib/python3.10/site-packages/deepspeed/ops/op_builder/builder.py", line 520, in jit_load
    op_module = load(name=self.name, sources=self.strip_empty_entries(sources))
RuntimeError: Error building extension 'fused_adam'
""",
    ),
    _p(
        "extension_build_failed_no_name",
        "",
        """/usr/local/cuda/bin/nvcc -c kernel.cu -o build/kernel.o
kernel.cu(12): error: identifier "__hfma2" is undefined
ninja: build stopped: subcommand failed.
""",
    ),
    _p(
        "gloo_peer_closed",
        "ddp",
        """RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.3]:19653. This is typically caused by a remote worker crashing.
""",
    ),
    _p(
        "gloo_size_mismatch",
        "ddp",
        """RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] op.preamble.length <= op.nbytes. 8 vs 4
""",
    ),
    _p(
        "nccl_socket_interface",
        "ddp",
        """node01:30:31 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.3<43567> failed : Software caused connection abort
node01:30:31 [0] NCCL INFO transport/net_socket.cc:412 -> 6
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
""",
    ),
    _p(
        "master_port_in_use",
        "",
        """torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use
""",
        "torchrun",
    ),
    _p(
        "device_side_assert",
        "",
        """../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [2,0,0], thread: [96,0,0] Assertion `srcIndex < srcSelectDimSize` failed.
RuntimeError: CUDA error: device-side assert triggered
""",
    ),
    _p(
        "gpu_ecc_xid",
        "",
        """[Mon Dec  2 10:00:01 2026] NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.
RuntimeError: CUDA error: uncorrectable ECC error encountered
""",
        "slurm",
    ),
    _p(
        "illegal_memory_access_alone",
        "",
        """RuntimeError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
""",
    ),
    _p(
        "ddp_unused_parameters",
        "ddp",
        """RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error indicates that your module has parameters that were not used in producing loss. You can enable unused parameter detection by passing the keyword argument `find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`.
""",
    ),
    _p(
        "fp16_loss_scale_deepspeed",
        "deepspeed",
        """[2024-05-02 11:00:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1
  File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/fp16/loss_scaler.py", line 175, in update_scale
    raise Exception("Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.")
Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.
""",
    ),
    _p(
        "import_name_moved",
        "",
        """Traceback (most recent call last):
  File "/workspace/train.py", line 5, in <module>
    from fastkernels import fused_rmsnorm
ImportError: cannot import name 'fused_rmsnorm' from 'fastkernels' (/opt/venv/lib/python3.11/site-packages/fastkernels/__init__.py)
""",
    ),
    _p(
        "megatron_bucket",
        "megatron",
        """  File "/workspace/Megatron-LM/megatron/core/distributed/param_and_grad_buffer.py", line 620, in __init__
    assert self.numel % self.data_parallel_world_size == 0
AssertionError: bucket size 12345 is not divisible by the data-parallel size 8
""",
    ),
    _p(
        "lightning_nccl_not_built",
        "lightning",
        """  File "/opt/conda/lib/python3.10/site-packages/lightning/pytorch/strategies/ddp.py", line 201, in setup_distributed
    _init_dist_connection(self.cluster_environment, self._process_group_backend)
RuntimeError: Distributed package doesn't have NCCL built in
""",
    ),
    _p(
        "shm_exhausted",
        "ddp",
        """node08:27106:27302 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment nccl-shm-recv-b79-0-3-0 (size 4460544)
""",
    ),
    _p(
        "vague_paste",
        "",
        "my job just stopped after a few hours and I don't know why\n",
    ),
)
