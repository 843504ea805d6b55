# ruff: noqa: E501 (pasted tracebacks and log lines are as long as the libraries made them)
"""The check a training stack's library makes names the mechanism (issue 21): nccl-tests setting a
device past the node's last GPU is the launch, NCCL failing to bind NVLS multicast memory is the
node's NVLink fabric, Open MPI's TCP transport refused at a peer's docker0 address is the network
set-up, the deepspeed runner without its multi-node backend is a missing tool, its MPI backends'
even-nodes check is the hostfile, a pipeline engine called like a module is the training loop,
NCCL's bootstrap root hearing ranks of different sizes is the launch, NCCL finding different
numbers of NICs per node is the network set-up, a DeepSpeed config asking for apex's amp where
apex is missing is the dependency, a 16-bit consolidation without ZeRO-3 is the save call,
Megatron's bucket check is how buckets shard over the data-parallel ranks, and megatron-core
0.12's (misspelled) sequence-parallel check is the parallel set-up. Each is read through
`triage explain`."""

from __future__ import annotations

import pytest

from tests.cli_runs import (
    assert_the_check_decides,
    assert_the_check_names,
)

NCCL_TESTS_DEVICE_PAST_THE_NODE = """$ mpirun -np 16 --host g0010:8,g0016:8 ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8
# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
g0010: Test CUDA failure common.cu:941 'invalid device ordinal'
 .. g0010 pid 888386: Test failure common.cu:891
g0016: Test CUDA failure common.cu:941 'invalid device ordinal'
 .. g0016 pid 3645592: Test failure common.cu:891"""

NVLS_BIND_FAILED = """[rank3]: Traceback (most recent call last):
[rank3]:   File "/workspace/train.py", line 88, in <module>
[rank3]:     dist.all_reduce(torch.ones(1, device="cuda"))
[rank3]:   File "/usr/local/lib/python3.12/dist-packages/torch/distributed/distributed_c10d.py", line 2806, in all_reduce
[rank3]:     work = group.allreduce([tensor], opts)
[rank3]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3
[rank3]: ncclUnhandledCudaError: Call to CUDA function failed.
[rank3]: Last error:
[rank3]: Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 'the operation cannot be performed in the present state'.
[rank3]: This is usually caused by a system or configuration error in the Fabric Manager or NVSwitches."""

OPENMPI_CONNECT_TO_DOCKER_BRIDGE = """$ horovodrun -np 8 -H node1:4,node2:4 python train_hvd.py
[node1][[38971,1],2][btl_tcp_endpoint.c:796:mca_btl_tcp_endpoint_complete_connect] connect() to 172.17.0.1 failed: Connection refused (111)
[node1][[38971,1],3][btl_tcp_endpoint.c:796:mca_btl_tcp_endpoint_complete_connect] connect() to 172.17.0.1 failed: Connection refused (111)"""

DEEPSPEED_WITHOUT_PDSH = """$ deepspeed --hostfile hostfile train.py --deepspeed ds_config.json
[2024-05-02 10:11:12,345] [INFO] [runner.py:463:main] Using IP address of 10.0.0.11 for node worker-0
Traceback (most recent call last):
  File "/opt/conda/bin/deepspeed", line 6, in <module>
    main()
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/launcher/runner.py", line 572, in main
    raise RuntimeError(f"launcher '{args.launcher}' not installed.")
RuntimeError: launcher 'pdsh' not installed."""

DEEPSPEED_MPICH_UNEVEN_NODES = """$ deepspeed --launcher mpich --hostfile hostfile train.py
Traceback (most recent call last):
  File "/usr/local/bin/deepspeed", line 6, in <module>
    main()
  File "/usr/local/lib/python3.10/dist-packages/deepspeed/launcher/runner.py", line 588, in main
    cmd = runner.get_cmd(env, active_resources)
  File "/usr/local/lib/python3.10/dist-packages/deepspeed/launcher/multinode_runner.py", line 228, in get_cmd
    raise ValueError("MPICH requires same number of devices per node")
ValueError: MPICH requires same number of devices per node"""

PIPELINE_ENGINE_CALLED_LIKE_A_MODULE = """Traceback (most recent call last):
  File "/home/me/train_pipe.py", line 131, in <module>
    outputs = engine(inputs)
  File "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py", line 1518, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
  File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/pipe/engine.py", line 1292, in forward
    raise PipelineError("Only train_batch() is accessible in pipeline mode.")
deepspeed.runtime.pipe.engine.PipelineError: Only train_batch() is accessible in pipeline mode."""

MEGATRON_BUCKET_NOT_DIVISIBLE = """  File "/workspace/Megatron-LM/megatron/core/optimizer/distrib_optimizer.py", line 136, in _build_model_gbuf_range
    assert bucket.numel() % data_parallel_world_size == 0, \\
AssertionError: Each bucket's buffer size should be divisible by 6"""

MCORE_012_SEQUENCE_PARALLEL_WITHOUT_TP = """  File "/usr/local/lib/python3.10/dist-packages/megatron/core/transformer/transformer_config.py", line 547, in __post_init__
    super().__post_init__()
  File "/usr/local/lib/python3.10/dist-packages/megatron/core/model_parallel_config.py", line 353, in __post_init__
    raise ValueError("Can not use sequence paralllelism without tensor parallelism")
ValueError: Can not use sequence paralllelism without tensor parallelism"""

NCCL_BOOTSTRAP_ROOT_SIZES_DIFFER = """node-a:20311:20390 [0] NCCL INFO Bootstrap : Using eth0:10.0.3.11<0>
node-a:20311:20402 [0] bootstrap.cc:335 NCCL WARN Bootstrap Root : mismatch in info from procs, nranks 8 vs 16, nroots 1 vs 1, iroot 0 vs 0, offset 0 vs 0
node-a:20311:20402 [0] NCCL INFO bootstrap.cc:361 -> 3"""

NCCL_NET_DEVICE_COUNTS_DIFFER = """node-b:9917:9981 [3] init.cc:1339 NCCL WARN Detected mixed local Net device counts across ranks (min 4, max 8). Set NCCL_IGNORE_NET_MISMATCH=1 to continue.
node-b:9917:9981 [3] NCCL INFO init.cc:1401 -> 2"""

DEEPSPEED_AMP_WITHOUT_APEX = """  File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1330, in _configure_distributed_model
    raise RuntimeError("Unable to import apex/amp, please make sure it is installed")
RuntimeError: Unable to import apex/amp, please make sure it is installed"""

DEEPSPEED_16BIT_SAVE_WITHOUT_ZERO3 = """  File "/home/me/finetune.py", line 212, in save
    state_dict = engine._zero3_consolidated_16bit_state_dict()
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 3706, in _zero3_consolidated_16bit_state_dict
    raise ValueError("this function requires ZeRO-3 mode")
ValueError: this function requires ZeRO-3 mode"""

# (name, paste, top symptom, top root cause (or causes, "/"), what the fixes must tell the user)
CASES = [
    ("nccl-tests-device-past-the-node", NCCL_TESTS_DEVICE_PAST_THE_NODE, "S13", "R06", "-g 1"),
    (
        "openmpi-connect-to-docker-bridge",
        OPENMPI_CONNECT_TO_DOCKER_BRIDGE,
        "S11",
        "R07",
        "btl_tcp_if_exclude lo,docker0",
    ),
    ("deepspeed-runner-without-pdsh", DEEPSPEED_WITHOUT_PDSH, "S05", "R02", "apt-get install pdsh"),
    ("deepspeed-mpich-uneven-nodes", DEEPSPEED_MPICH_UNEVEN_NODES, "S05", "R06", "same `slots=N`"),
    (
        "deepspeed-pipeline-engine-called",
        PIPELINE_ENGINE_CALLED_LIKE_A_MODULE,
        "S18",
        "R14",
        "engine.train_batch",
    ),
    (
        "nccl-bootstrap-root-sizes-differ",
        NCCL_BOOTSTRAP_ROOT_SIZES_DIFFER,
        "S10",
        "R06",
        "same world size",
    ),
    (
        "nccl-net-device-counts-differ",
        NCCL_NET_DEVICE_COUNTS_DIFFER,
        "S12",
        "R07",
        "same NCCL_IB_HCA",
    ),
    (
        "deepspeed-amp-without-apex",
        DEEPSPEED_AMP_WITHOUT_APEX,
        "S02",
        "R02",
        "DeepSpeed's own mixed precision",
    ),
    (
        "deepspeed-16bit-save-without-zero3",
        DEEPSPEED_16BIT_SAVE_WITHOUT_ZERO3,
        "S28",
        "R14",
        "engine.module.state_dict()",
    ),
    ("megatron-bucket-not-divisible", MEGATRON_BUCKET_NOT_DIVISIBLE, "S09", "R19", "Megatron-Core"),
    (
        "mcore-012-sequence-parallel-without-tp",
        MCORE_012_SEQUENCE_PARALLEL_WITHOUT_TP,
        "S09",
        "R13",
        "drop `--sequence-parallel`",
    ),
]


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "advice"),
    [pytest.param(*c[1:], id=c[0]) for c in CASES],
)
def test_a_training_stacks_check_decides_the_root_cause_and_the_advice(
    text: str, symptom: str, cause: str, advice: str
) -> None:
    assert_the_check_decides(text, symptom, cause, advice)


# The check names the mechanism, not whose fault it is: NVLS's multicast bind fails on a node
# whose NVLink fabric (fabric manager, NVSwitch) is not up, and in some NCCL releases by a bug
# of their own; after the refit on this round's rules the fabric reading leads at ~0.78, under
# the 0.8 a settled cause needs. The top cause and the advice are what the user acts on.
def test_an_nvls_bind_failure_is_read_as_the_fabric_with_its_advice() -> None:
    assert_the_check_names(NVLS_BIND_FAILED, "S12", "R28", "NCCL_NVLS_ENABLE=0")
