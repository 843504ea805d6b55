# ruff: noqa: E501 (pasted tracebacks and log lines are as long as the libraries made them)
"""Messages of Horovod, NCCL, Megatron-LM/NeMo, TransformerEngine, Colossal-AI and DeepSpeed
whose code path decides the root cause: the condition the library checks (an argument the
caller passed, an extension never built, a checkpoint from another release, what the node's
stack supports), read from the library's source. Each paste is in the library's own wording
and is read through `triage explain`."""

from __future__ import annotations

import pytest

from tests.cli_runs import assert_top, explained

# horovod/common/util.py check_extension: setup skipped the PyTorch extension
HOROVOD_NOT_BUILT = """Traceback (most recent call last):
  File "train_hvd.py", line 4, in <module>
    import horovod.torch as hvd
  File "/opt/venv/lib/python3.10/site-packages/horovod/torch/__init__.py", line 26, in <module>
    _check_extension_lambda(
  File "/opt/venv/lib/python3.10/site-packages/horovod/common/util.py", line 56, in check_extension
    raise ImportError(
ImportError: Extension horovod.torch has not been built: /opt/venv/lib/python3.10/site-packages/horovod/torch/mpi_lib_v2.cpython-310-x86_64-linux-gnu.so not found
If this is not expected, reinstall Horovod with HOROVOD_WITH_PYTORCH=1 to debug the build error."""

# horovod/torch/optimizer.py _make_hook: a second backward before step()
HOROVOD_BACKWARD_PASSES = """Traceback (most recent call last):
  File "/work/train.py", line 118, in train_epoch
    loss.backward()
  File "/opt/venv/lib/python3.9/site-packages/torch/_tensor.py", line 487, in backward
    torch.autograd.backward(
  File "/opt/venv/lib/python3.9/site-packages/horovod/torch/optimizer.py", line 229, in hook
    raise AssertionError(
AssertionError: Gradients were computed more than backward_passes_per_step times before call to step(). Increase backward_passes_per_step to accumulate gradients locally."""

# horovod/common/stall_inspector.cc: rank 1 never submitted the broadcast
HOROVOD_STALL = """[2023-05-11 09:14:02.118734: W /tmp/pip-req-build-x1/horovod/common/stall_inspector.cc:107] One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock.
Missing ranks:
1: [broadcast.best_acc]"""

# horovod/common/controller.cc ConstructResponse
HOROVOD_DEVICES = "[1,0]<stderr>:tensorflow.python.framework.errors_impl.FailedPreconditionError: Mismatched BROADCAST CPU/GPU device selection: One rank specified device GPU, but another rank specified device CPU."

# horovod/__init__.py exports only the runner
HOROVOD_TOP_LEVEL = """Traceback (most recent call last):
  File "train.py", line 12, in <module>
    torch.cuda.set_device(hvd.local_rank())
AttributeError: module 'horovod' has no attribute 'local_rank'"""

# NCCL src/misc/ibvsymbols.cc: the image has no rdma-core
NCCL_NO_IBVERBS = """node7:2211:2211 [0] NCCL INFO Bootstrap : Using eth0:10.20.0.7<0>
node7:2211:2211 [0] misc/ibvwrap.cc:89 NCCL WARN Failed to open libibverbs.so[.1]
node7:2211:2211 [0] NCCL INFO NET/Socket : Using [0]eth0:10.20.0.7<0>
node7:2211:2211 [0] NCCL INFO Using network Socket"""

# NCCL src/enqueue.cc ncclInitKernelsForDevice on a GPU the library was not built for
NCCL_NO_KERNELS = """gpu3:81234:81290 [0] enqueue.cc:112 NCCL WARN Cuda failure 209 'no kernel image is available for execution on the device'
gpu3:81234:81290 [0] NCCL INFO init.cc:1411 -> 1
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1"""

# NCCL src/misc/shmutils.cc ncclShmOpen: the peer's segment is not in this /dev/shm
NCCL_SHM_ATTACH = """worker-0:410:520 [1] misc/shmutils.cc:137 NCCL WARN Error while attaching to shared memory segment /dev/shm/nccl-Xa81Qz (size 9637888), error: No such file or directory (2)
worker-0:410:520 [1] NCCL INFO transport/shm.cc:387 -> 2
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5"""

# NCCL src/misc/ibvwrap.cc wrap_ibv_reg_dmabuf_mr on a node whose stack lacks DMA-BUF
NCCL_DMABUF = """h100-12:5561:5702 [3] misc/ibvwrap.cc:204 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Operation not supported
h100-12:5561:5702 [3] NCCL INFO transport/net_ib.cc:1412 -> 2
h100-12:5561:5702 [3] NCCL INFO transport/net.cc:812 -> 2"""

# CUDA error 217 from vLLM's custom all-reduce on GPUs without peer access
PEER_ACCESS = """(VllmWorkerProcess pid=3321) Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:368 'peer access is not supported between these two devices'"""

# megatron/core/tensor_parallel/layers.py ColumnParallelLinear.__init__
MEGATRON_FUSION = """[rank0]:   File "/workspace/Megatron-LM/megatron/core/tensor_parallel/layers.py", line 735, in __init__
[rank0]:     raise RuntimeError(
[rank0]: RuntimeError: ColumnParallelLinear was called with gradient_accumulation_fusion set to True but the custom CUDA extension fused_weight_gradient_mlp_cuda module is not found. To use gradient_accumulation_fusion you must install APEX with --cpp_ext and --cuda_ext. For example: pip install --global-option="--cpp_ext" --global-option="--cuda_ext ." Note that the extension requires CUDA>=11. Otherwise, you must turn off gradient accumulation fusion."""

# the megatron-core wheel has no megatron.training
MEGATRON_TRAINING = """Traceback (most recent call last):
  File "/home/user/llm/pretrain.py", line 9, in <module>
    from megatron.training import get_args, pretrain
ModuleNotFoundError: No module named 'megatron.training'"""

# NeMo's MegatronBaseModel when `import megatron.core` failed
NEMO_NO_MCORE = """  File "/opt/NeMo/nemo/collections/nlp/models/language_modeling/megatron_base_model.py", line 118, in __init__
    raise ImportError(
ImportError: megatron-core was not found. Please see the NeMo README for installation instructions: https://github.com/NVIDIA/NeMo#megatron-gpt."""

# megatron/learning_rates.py AnnealingLR._check_and_set on a resume with other --train-iters
ANNEALING_LR = """  File "/mnt/Megatron-LM/megatron/learning_rates.py", line 105, in load_state_dict
    self.decay_steps = self._check_and_set(self.decay_steps, sd_decay_steps,
  File "/mnt/Megatron-LM/megatron/learning_rates.py", line 88, in _check_and_set
    assert cls_value == sd_value, \\
AssertionError: AnnealingLR: class input value 320000 and checkpointvalue 640000 for total number of iterations do not match"""

# ninja's line for an object it could not compile
NINJA_FAILED = """[2/3] /usr/local/cuda/bin/nvcc -DTORCH_EXTENSION_NAME=scaled_masked_softmax_cuda -c scaled_masked_softmax_cuda.cu -o scaled_masked_softmax_cuda.cuda.o
FAILED: scaled_masked_softmax_cuda.cuda.o
/usr/local/cuda/bin/nvcc -DTORCH_EXTENSION_NAME=scaled_masked_softmax_cuda -c scaled_masked_softmax_cuda.cu -o scaled_masked_softmax_cuda.cuda.o"""

# transformer_engine/pytorch/utils.py assert_dim_for_fp8_exec
TE_FP8_SHAPE = """  File "/usr/local/lib/python3.10/dist-packages/transformer_engine/pytorch/module/linear.py", line 117, in forward
    assert_dim_for_fp8_exec(inputmat, weight)
  File "/usr/local/lib/python3.10/dist-packages/transformer_engine/pytorch/utils.py", line 236, in assert_dim_for_fp8_exec
    assert tensor.dim() == 2 and tensor.size(0) % 8 == 0 and tensor.size(1) % 16 == 0, (
AssertionError: FP8 execution requires 2D input matrices with height divisible by 8 and width divisible by 16, but got tensor with dims=[3001, 4096]"""

# transformer_engine/pytorch/module/base.py set_extra_state of a checkpoint from another TE
TE_EXTRA_STATE = """  File "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py", line 2041, in _load_from_state_dict
    self.set_extra_state(state_dict[extra_state_key])
  File "/usr/local/lib/python3.10/dist-packages/transformer_engine/pytorch/module/base.py", line 612, in set_extra_state
    self.fp8_meta["scaling_fwd"].scale_inv.copy_(state["scale_inv_fwd"])
KeyError: 'scale_inv_fwd'"""

# colossalai/kernel/extensions/cpp_extension.py: the JIT build reads sources the package lacks
COLOSSAL_SOURCES = """[extension] Compiling the JIT cpu_adam_x86 kernel during runtime now
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/colossalai/kernel/extensions/cpp_extension.py", line 94, in load
    op_kernel = self.build_jit()
FileNotFoundError: [Errno 2] No such file or directory: '/opt/conda/lib/python3.10/site-packages/colossalai/kernel/extensions/csrc/x86/cpu_adam.cpp'"""

# colossalai/booster/booster.py Booster.backward with the optimizer made before boost()
COLOSSAL_BACKWARD = """Traceback (most recent call last):
  File "/home/user/sft/train.py", line 88, in train_epoch
    booster.backward(loss, optimizer)
  File "/opt/conda/lib/python3.10/site-packages/colossalai/booster/booster.py", line 176, in backward
    optimizer.backward(loss)
AttributeError: 'AdamW' object has no attribute 'backward'"""

# deepspeed/runtime/zero/parameter_offload.py _apply_to_tensors_only
ZERO3_OUTPUT_TYPE = "[2024-08-02 11:20:41,552] [WARNING] [parameter_offload.py:104:_apply_to_tensors_only] A module has unknown inputs or outputs type (<class 'transformers.cache_utils.HybridCache'>) and the tensors embedded in it cannot be detected. The ZeRO-3 hooks designed to trigger before or after backward pass of the module relies on knowing the input and output tensors and therefore may not get triggered properly."

# deepspeed/runtime/engine.py _configure_basic_optimizer: a torch optimizer with offload
ZERO_OFFLOAD_CLIENT = """  File "/opt/venv/lib/python3.11/site-packages/deepspeed/runtime/engine.py", line 1270, in _configure_optimizer
    basic_optimizer = self._configure_basic_optimizer(model_parameters)
deepspeed.runtime.zero.utils.ZeRORuntimeException: You are using ZeRO-Offload with a client provided optimizer (<class 'torch.optim.sgd.SGD'>) which in most cases will yield poor performance. Please either use deepspeed.ops.adam.DeepSpeedCPUAdam or set an optimizer in your ds-config (https://www.deepspeed.ai/docs/config-json/#optimizer-parameters). If you really want to use a custom optimizer w. ZeRO-Offload and understand the performance impacts you can also set <"zero_force_ds_cpu_optimizer": false> in your configuration file."""

# (id, paste, symptom or None, root cause, words of an action among the first two fixes)
CASES = [
    (
        "horovod-backward-passes",
        HOROVOD_BACKWARD_PASSES,
        "S18",
        "R14",
        "backward_passes_per_step=N",
    ),
    ("horovod-stalled-tensors", HOROVOD_STALL, "S17", "R08", "same collectives in the same order"),
    ("horovod-device-selection", HOROVOD_DEVICES, "S21", "R06", "hvd.local_rank()"),
    ("horovod-top-level-module", HOROVOD_TOP_LEVEL, None, "R14", "import horovod.torch as hvd"),
    ("nccl-no-libibverbs", NCCL_NO_IBVERBS, None, "R02", "libibverbs1"),
    ("nccl-no-kernels-for-gpu", NCCL_NO_KERNELS, "S12", "R04", "NVCC_GENCODE"),
    ("nccl-shm-segment-not-found", NCCL_SHM_ATTACH, "S12", "R05", "RemoveIPC=no"),
    ("nccl-dmabuf-unsupported", NCCL_DMABUF, "S12", "R01", "NCCL_DMABUF_ENABLE=0"),
    ("cuda-peer-access-unsupported", PEER_ACCESS, "S12", "R04", "--disable-custom-all-reduce"),
    (
        "megatron-fusion-needs-apex",
        MEGATRON_FUSION,
        None,
        "R02",
        "--no-gradient-accumulation-fusion",
    ),
    (
        "megatron-training-not-in-wheel",
        MEGATRON_TRAINING,
        "S02",
        "R02",
        "pip install -e Megatron-LM",
    ),
    # NeMo's guarded import reports a missing and a too-old megatron-core alike: the threads
    # hold both (xmg-031: installed but too old), so either cause may lead
    ("nemo-megatron-core-not-found", NEMO_NO_MCORE, "S02", "R02|R01", "import megatron.core"),
    ("megatron-annealing-lr-resume", ANNEALING_LR, "S29", "R20", "--override-opt_param-scheduler"),
    ("ninja-object-failed", NINJA_FAILED, "S01", "R03", "first compiler `error:`"),
    ("te-fp8-input-shape", TE_FP8_SHAPE, "S18", "R15", "multiple of 8"),
    ("te-extra-state", TE_EXTRA_STATE, "S29", "R01", "TransformerEngine release that wrote it"),
    ("colossalai-kernel-sources", COLOSSAL_SOURCES, "S01", "R02", "must exist after the install"),
    (
        "zero-offload-client-optimizer",
        ZERO_OFFLOAD_CLIENT,
        "S09",
        "R14",
        "zero_force_ds_cpu_optimizer",
    ),
]


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "advice"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_condition_the_library_checks_decides_the_root_cause_and_the_advice(
    text: str, symptom: str | None, cause: str, advice: str
) -> None:
    d = explained(text, "--no-embed")
    if symptom is not None:
        assert_top(d, "symptoms", symptom)
    assert_top(d, "root_causes", *cause.split("|"))
    actions = [a for f in d["fix_patterns"][:2] for a in f["actions"]]
    assert any(advice in a for a in actions), actions


def test_horovod_shut_down_after_a_rank_finished_is_a_collective_mismatch() -> None:
    shut_down = (
        "RuntimeError: Horovod has been shut down. This was caused by an exception on one of the "
        "ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks "
        "finished execution. If the shutdown was caused by an exception, you should see the "
        "exception in the log before the first shutdown message."
    )
    d = explained(shut_down, "--no-embed")
    assert d["root_causes"][0]["id"] in {"R08", "R09"}, d["summary"]
    assert d["root_causes"][0]["id"] != "R25"


def test_an_extension_horovod_never_built_is_not_a_version_mismatch() -> None:
    d = explained(HOROVOD_NOT_BUILT, "--no-embed")
    assert d["symptoms"][0]["id"] == "S02", d["summary"]
    # the install skipped the framework's extension: a build or a missing part, not versions
    assert d["root_causes"][0]["id"] in {"R03", "R02"}, d["summary"]
    actions = [a for f in d["fix_patterns"][:1] for a in f["actions"]]
    assert any("HOROVOD_WITH_PYTORCH=1" in a for a in actions), actions


def test_zero3_hooks_blind_to_a_cache_object_are_told_to_turn_the_cache_off() -> None:
    d = explained(ZERO3_OUTPUT_TYPE, "--no-embed")
    actions = [a for f in d["fix_patterns"][:2] for a in f["actions"]]
    assert any("use_cache=False" in a for a in actions), actions


def test_colossalai_backward_with_the_unboosted_optimizer_says_to_use_what_boost_returned() -> None:
    d = explained(COLOSSAL_BACKWARD, "--no-embed")
    assert d["symptoms"][0]["id"] == "S18", d["summary"]
    assert "R14" in [c["id"] for c in d["root_causes"][:2]], d["summary"]
    actions = [a for f in d["fix_patterns"][:1] for a in f["actions"]]
    assert any("booster.boost" in a for a in actions), actions
