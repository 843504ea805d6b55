# ruff: noqa: E501 (pasted tracebacks and log lines are as long as the libraries made them)
"""What a parallel training stack checks names the mechanism (issue 21, lane A of h33): a
zero_to_fp32 command that hands DeepSpeed >= 0.15.3 a file name where it now takes a folder is
the script's changed interface, not a broken checkpoint; DeepSpeed's hybrid engine indexing an
empty list of inference containers is a model it has no injection policy for; TransformerEngine
without its `pytorch` attribute is an import of its PyTorch part that failed and was swallowed
(an import error, not a missing API); a converter that finds no 'model' entry reads another
checkpoint layout than the one it was given; Colossal-AI's Gemini refusing to reduce a gradient whose
parameter its chunk hooks never saw used is a model Gemini does not support; DeepSpeed >= 0.16
refusing the `no_sync()` that the Trainer and Accelerate call while accumulating is the releases;
DeepSpeed deriving a micro batch of 0 and Megatron's global batch not dividing into micro batches
over the data-parallel ranks are the batch settings against the layout; NCCL_NET naming a network
that did not come up is the node's network set-up; NCCL unable to open NVML is a container without
the driver's libraries; NCCL's 'Failed to CUDA calloc async' is GPU memory; and DeepSpeed refusing
to load its async_io op is libaio missing where the op is built; and an `apex` that imports Pyramid
is PyPI's namesake in place of NVIDIA's apex; an InfiniBand work completion in error is the fabric,
also where NCCL prints no peer address; NCCL's socket transport refusing a message larger than the
posted receive is ranks (or their NCCL settings) that disagree; and NCCL refusing a rank outside
0..nranks-1 is the launch's numbers; and DeepSpeed-Inference refusing meta-tensor loading or CUDA
graphs for a model is that model's injection container. Lane C of h34: NCCL's kernel setup failing with
'invalid device function' is a build without this GPU's architecture (the libibverbs fallback
warning beside it is not the cause); a CUDA math-library symbol left undefined with no version
is an op never linked against that library; a compiler killed while building an extension is
parallel jobs exhausting host memory; NCCL finding no reverse path in the topology it detected
is a release older than the machine; CUDA's 'system not yet initialized' under NCCL is a node
whose fabric manager is missing (a dependency, not the launch); newer NCCL's 'Multiple Ranks are
using the same GPU/Partition' is its duplicate-GPU check; and generate() under ZeRO-3 is a wait only where the
stack stopped in it, not where it raised another error. Each is read through `triage explain`."""

from __future__ import annotations

import pytest

from tests.cli_runs import (
    advice_of,
    assert_the_check_decides,
    assert_top,
    cases_with_known_misses,
    explained,
)

ZERO_TO_FP32_GIVEN_A_FILE_NAME = """$ python zero_to_fp32.py . ../pytorch_model.bin
[2024-11-02 09:14:51,210] [INFO] [real_accelerator.py:219:get_accelerator] Setting ds_accelerator to cuda (auto detect)
Processing zero checkpoint './global_step1200'
Detected checkpoint of type zero stage 3, world_size: 8
Parsing checkpoint created by deepspeed==0.15.4
Reconstructed Trainable fp32 state dict with 291 params 6738415616 elements
Traceback (most recent call last):
  File "/data/ckpt/checkpoint-1200/zero_to_fp32.py", line 760, in <module>
    convert_zero_checkpoint_to_fp32_state_dict(args.checkpoint_dir,
  File "/data/ckpt/checkpoint-1200/zero_to_fp32.py", line 658, in convert_zero_checkpoint_to_fp32_state_dict
    torch.save(shard_state_dict, output_path)
  File "/usr/local/lib/python3.10/dist-packages/torch/serialization.py", line 849, in save
    with _open_zipfile_writer(f) as opened_zipfile:
  File "/usr/local/lib/python3.10/dist-packages/torch/serialization.py", line 716, in _open_zipfile_writer
    return container(name_or_buffer)
  File "/usr/local/lib/python3.10/dist-packages/torch/serialization.py", line 687, in __init__
    super().__init__(torch._C.PyTorchFileWriter(self.name))
RuntimeError: Parent directory ../pytorch_model.bin does not exist."""

HYBRID_ENGINE_WITHOUT_CONTAINERS = """Traceback (most recent call last):
  File "/home/u/DeepSpeedExamples/applications/DeepSpeed-Chat/training/step3_rlhf_finetuning/main.py", line 523, in main
    out = trainer.generate_experience(batch_prompt['prompt'], batch_prompt['prompt_att_mask'], step)
  File "/home/u/DeepSpeedExamples/applications/DeepSpeed-Chat/training/step3_rlhf_finetuning/ppo_trainer.py", line 99, in generate_experience
    seq = self._generate_sequence(prompts, mask, step)
  File "/home/u/DeepSpeedExamples/applications/DeepSpeed-Chat/training/step3_rlhf_finetuning/ppo_trainer.py", line 73, in _generate_sequence
    seq = self.actor_model.module.generate(prompts, attention_mask=mask, max_length=max_min_length, min_length=max_min_length)
  File "/opt/conda/lib/python3.9/site-packages/deepspeed/runtime/hybrid_engine.py", line 243, in generate
    self.fuse_lora_weight()
  File "/opt/conda/lib/python3.9/site-packages/deepspeed/runtime/hybrid_engine.py", line 139, in fuse_lora_weight
    self._fuse_lora_layer(layer_id)
  File "/opt/conda/lib/python3.9/site-packages/deepspeed/runtime/hybrid_engine.py", line 133, in _fuse_lora_layer
    self._inference_containers[layer_id].fuse_lora()
IndexError: list index out of range"""

TRANSFORMER_ENGINE_WITHOUT_ITS_PYTORCH_PART = """Traceback (most recent call last):
  File "/workspace/Megatron-LM/pretrain_gpt.py", line 18, in <module>
    from megatron.core.models.gpt import GPTModel
  File "/workspace/Megatron-LM/megatron/core/models/gpt/__init__.py", line 1, in <module>
    from .gpt_model import GPTModel
  File "/workspace/Megatron-LM/megatron/core/models/gpt/gpt_model.py", line 17, in <module>
    from megatron.core.transformer.transformer_block import TransformerBlock
  File "/workspace/Megatron-LM/megatron/core/transformer/transformer_block.py", line 16, in <module>
    from megatron.core.transformer.custom_layers.transformer_engine import (
  File "/workspace/Megatron-LM/megatron/core/transformer/custom_layers/transformer_engine.py", line 55, in <module>
    class TELinear(te.pytorch.Linear):
AttributeError: module 'transformer_engine' has no attribute 'pytorch'"""

CONVERTER_GIVEN_A_DISTRIBUTED_CHECKPOINT = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/scripts/checkpoint_converters/convert_megatron_lm_ckpt_to_nemo.py", line 512, in <module>
[rank0]:     convert(local_rank, rank, world_size, args)
[rank0]:   File "/workspace/scripts/checkpoint_converters/convert_megatron_lm_ckpt_to_nemo.py", line 431, in convert
[rank0]:     checkpoint, consumed, steps, version = load_from_checkpoint(
[rank0]:   File "/workspace/scripts/checkpoint_converters/convert_megatron_lm_ckpt_to_nemo.py", line 315, in load_from_checkpoint
[rank0]:     old_checkpoint['model'],
[rank0]: KeyError: 'model'"""

GEMINI_PARAMETER_USED_BY_AN_UNTRACKED_OP = """Traceback (most recent call last):
  File "/workspace/ColossalAI/applications/ColossalChat/examples/training_scripts/train_sft.py", line 312, in <module>
    train(args)
  File "/workspace/ColossalAI/applications/ColossalChat/coati/trainer/sft.py", line 103, in _train
    self.booster.backward(loss=loss, optimizer=self.optimizer)
  File "/opt/conda/lib/python3.10/site-packages/colossalai/booster/booster.py", line 167, in backward
    optimizer.backward(loss)
  File "/opt/conda/lib/python3.10/site-packages/colossalai/zero/gemini/gemini_optimizer.py", line 293, in backward
    self.module.backward(loss)
  File "/opt/conda/lib/python3.10/site-packages/colossalai/zero/gemini/gemini_ddp.py", line 343, in backward
    loss.backward()
  File "/opt/conda/lib/python3.10/site-packages/torch/_tensor.py", line 522, in backward
    torch.autograd.backward(
  File "/opt/conda/lib/python3.10/site-packages/torch/autograd/__init__.py", line 266, in backward
    Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass
  File "/opt/conda/lib/python3.10/site-packages/colossalai/zero/gemini/gemini_ddp.py", line 375, in grad_handle
    raise RuntimeError(
RuntimeError: Parameter `model.norm.weight` failed at the gradient reduction. Some unsupported torch function is operated upon this parameter."""

NO_SYNC_UNDER_ZERO2_FROM_THE_TRAINER = """  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 2480, in _inner_training_loop
    with context():
  File "/opt/conda/lib/python3.10/contextlib.py", line 135, in __enter__
    return next(self.gen)
  File "/opt/conda/lib/python3.10/site-packages/accelerate/accelerator.py", line 973, in no_sync
    with context():
  File "/opt/conda/lib/python3.10/contextlib.py", line 135, in __enter__
    return next(self.gen)
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1995, in no_sync
    assert not self.zero_optimization_partition_gradients(), \\
AssertionError: no_sync context manager is incompatible with gradient partitioning logic of ZeRO stage 2"""

DEEPSPEED_MICRO_BATCH_OF_ZERO = """  File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/config.py", line 927, in _batch_assertion
    assert (micro_batch > 0), f"Micro batch size per gpu: {micro_batch} has to be greater than 0"
AssertionError: Micro batch size per gpu: 0 has to be greater than 0"""

MEGATRON_GLOBAL_BATCH_NOT_DIVISIBLE = """  File "/workspace/Megatron-LM/megatron/core/num_microbatches_calculator.py", line 340, in __init__
    assert global_batch_size % micro_batch_times_data_parallel_size == 0, (
AssertionError: global batch size (1024) is not divisible by micro batch size (3) times data parallel size (8)"""

NCCL_NAMED_NETWORK_NOT_FOUND = """gpu-a:30211:30211 [0] NCCL INFO NCCL_NET set by environment to IB
gpu-a:30211:30211 [0] NCCL INFO Failed to open libibverbs.so[.1]
gpu-a:30211:30211 [0] NCCL INFO Failed to initialize NET plugin IB
gpu-a:30211:30302 [0] net.cc:763 NCCL WARN Error: network IB not found.
gpu-a:30211:30302 [0] NCCL INFO init.cc:1420 -> 5"""

NCCL_WITHOUT_NVML = """worker-3:812:812 [0] NCCL INFO Bootstrap : Using eth0:10.4.2.13<0>
worker-3:812:812 [0] misc/nvmlwrap.cc:68 NCCL WARN Failed to open libnvidia-ml.so.1
worker-3:812:812 [0] NCCL INFO init.cc:1715 -> 2
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"""

NCCL_CALLOC_ASYNC_FAILED = """[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5
[rank0]: ncclUnhandledCudaError: Call to CUDA function failed.
[rank0]: Last error:
[rank0]: Failed to CUDA calloc async 136 bytes"""

ASYNC_IO_OP_WITHOUT_LIBAIO = """  File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/swap_tensor/partitioned_param_swapper.py", line 50, in __init__
    aio_op = AsyncIOBuilder().load(verbose=False)
  File "/usr/local/lib/python3.10/dist-packages/deepspeed/ops/op_builder/builder.py", line 531, in load
    return self.jit_load(verbose)
  File "/usr/local/lib/python3.10/dist-packages/deepspeed/ops/op_builder/builder.py", line 544, in jit_load
    raise RuntimeError(
RuntimeError: Unable to JIT load the async_io op due to it not being compatible due to hardware/software issue. None"""

PYPI_APEX_IN_PLACE_OF_NVIDIA_APEX = """Traceback (most recent call last):
  File "/workspace/train.py", line 12, in <module>
    from apex import amp
  File "/usr/local/lib/python3.10/dist-packages/apex/__init__.py", line 13, in <module>
    from pyramid.session import UnencryptedCookieSessionFactoryConfig
ImportError: cannot import name 'UnencryptedCookieSessionFactoryConfig' from 'pyramid.session' (unknown location)"""

IB_COMPLETION_ERROR_WITHOUT_A_PEER_ADDRESS = """node-7:4410:4502 [2] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer with error 5, opcode 0, len 5384, vendor err 249 (Send)
node-7:4410:4502 [2] NCCL INFO transport/net.cc:1151 -> 6
node-7:4410:4502 [2] NCCL INFO proxy.cc:859 -> 6"""

NCCL_SOCKET_MESSAGE_TRUNCATED = """node-2:7781:7842 [1] transport/net_socket.cc:537 NCCL WARN NET/Socket : peer 10.0.0.2<53811> message truncated : receiving 1048576 bytes instead of 65536. If you believe your socket network is in healthy state, there may be a mismatch in collective sizes or environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks
node-2:7781:7842 [1] NCCL INFO transport/net.cc:1034 -> 5
node-2:7781:7842 [1] NCCL INFO proxy.cc:859 -> 5"""

NCCL_RANK_OUTSIDE_THE_WORLD = """node-b:5120:5120 [0] NCCL INFO NCCL version 2.20.5+cuda12.4
node-b:5120:5120 [0] init.cc:1510 NCCL WARN Invalid rank requested : 8/8
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, invalid argument (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5"""

INJECTION_CONTAINER_WITHOUT_META_LOADING = """Traceback (most recent call last):
  File "/home/u/serve.py", line 41, in <module>
    model = deepspeed.init_inference(model, tensor_parallel={"tp_size": 2}, dtype=torch.float16, checkpoint=checkpoints_json, replace_with_kernel_inject=True)
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/__init__.py", line 362, in init_inference
    engine = InferenceEngine(model, config=ds_inference_config)
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/inference/engine.py", line 158, in __init__
    self._apply_injection_policy(config)
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/inference/engine.py", line 418, in _apply_injection_policy
    replace_transformer_layer(client_module, self.module, checkpoint, config, self.config)
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/module_inject/replace_module.py", line 412, in replace_transformer_layer
    assert container_g.ckpt_load_enabled, \
AssertionError: Meta Tensor checkpoint loading not supported in DS_GPTNEOXContainer container"""

# (name, paste, top symptom (or symptoms, "/"), top root cause, what the fixes must tell the user)
# NCCL 2.7 (CUDA 10 build) on a Kepler GPU: its kernel setup finds no code for the device; the
# libibverbs warnings are the IB transport's fallback to sockets on a node without IB
NCCL_KERNELS_WITHOUT_THIS_ARCHITECTURE = """k80-node:2211:2211 [0] NCCL INFO Bootstrap : Using [0]eno1:192.168.7.21<0>
k80-node:2211:2211 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]
k80-node:2211:2211 [0] NCCL INFO NET/Socket : Using [0]eno1:192.168.7.21<0>
NCCL version 2.7.8+cuda10.2
k80-node:2212:2212 [1] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]
k80-node:2211:2240 [0] NCCL INFO Channel 00/02 :    0   1
k80-node:2211:2240 [0] NCCL INFO comm 0x7f3c5c001e10 rank 0 nranks 2 cudaDev 0 busId 5000 - Init COMPLETE
k80-node:2211:2211 [0] enqueue.cc:215 NCCL WARN Cuda failure 'invalid device function'
k80-node:2212:2212 [1] enqueue.cc:215 NCCL WARN Cuda failure 'invalid device function'
Traceback (most recent call last):
  File "train.py", line 88, in <module>
    model = DDP(model, device_ids=[args.local_rank])
  File "/opt/conda/lib/python3.8/site-packages/torch/nn/parallel/distributed.py", line 333, in __init__
    self.broadcast_bucket_size)
  File "/opt/conda/lib/python3.8/site-packages/torch/nn/parallel/distributed.py", line 549, in _distributed_broadcast_coalesced
    dist._broadcast_coalesced(self.process_group, tensors, buffer_size)
RuntimeError: NCCL error in: /opt/conda/conda-bld/pytorch_1595629403081/work/torch/lib/c10d/ProcessGroupNCCL.cpp:32, unhandled cuda error, NCCL version 2.7.8"""

OP_NEVER_LINKED_AGAINST_CURAND = """Traceback (most recent call last):
  File "finetune.py", line 201, in <module>
    optimizer = DeepSpeedCPUAdam(model.parameters(), lr=args.lr)
  File "/home/u/src/DeepSpeed/deepspeed/ops/adam/cpu_adam.py", line 94, in __init__
    self.ds_opt_adam = CPUAdamBuilder().load()
  File "/home/u/src/DeepSpeed/deepspeed/ops/op_builder/builder.py", line 459, in load
    return importlib.import_module(self.absolute_name())
  File "/home/u/miniconda3/envs/ds/lib/python3.9/importlib/__init__.py", line 127, in import_module
    return _bootstrap._gcd_import(name[level:], package, level)
ImportError: /home/u/src/DeepSpeed/deepspeed/ops/adam/cpu_adam_op.cpython-39-x86_64-linux-gnu.so: undefined symbol: curandCreateGenerator"""

COMPILER_KILLED_BUILDING_FLASH_ATTN = """  Building wheel for flash-attn (setup.py) ... error
  error: subprocess-exited-with-error
  × python setup.py bdist_wheel did not run successfully.
  │ exit code: 1
  ╰─> [912 lines of output]
      [7/49] /usr/local/cuda/bin/nvcc -I/tmp/pip-install-kq/flash-attn_e1/csrc/flash_attn/src -c /tmp/pip-install-kq/flash-attn_e1/csrc/flash_attn/src/flash_fwd_hdim256_bf16_sm80.cu -o /tmp/pip-install-kq/flash-attn_e1/build/temp.linux-x86_64-cpython-311/csrc/flash_attn/src/flash_fwd_hdim256_bf16_sm80.o -O3 -std=c++17 -gencode arch=compute_80,code=sm_80 --threads 4
      FAILED: /tmp/pip-install-kq/flash-attn_e1/build/temp.linux-x86_64-cpython-311/csrc/flash_attn/src/flash_fwd_hdim256_bf16_sm80.o
      nvcc error   : 'cicc' died due to signal 9 (Kill signal)
      [8/49] c++ -MMD -MF /tmp/pip-install-kq/flash-attn_e1/build/temp.linux-x86_64-cpython-311/csrc/flash_attn/flash_api.o.d -pthread -fPIC -O3 -c /tmp/pip-install-kq/flash-attn_e1/csrc/flash_attn/flash_api.cpp
      FAILED: /tmp/pip-install-kq/flash-attn_e1/build/temp.linux-x86_64-cpython-311/csrc/flash_attn/flash_api.o
      c++: fatal error: Killed signal terminated program cc1plus
      compilation terminated.
      ninja: build stopped: subcommand failed.
      RuntimeError: Error compiling objects for extension
      [end of output]
  ERROR: Failed building wheel for flash-attn"""

# generate() under ZeRO-3 on a rank whose stack stopped in it: the all-gather of the next forward
# waits for ranks that finished generating
STACK_STOPPED_IN_GENERATE_UNDER_ZERO3 = """Process 40212: python -u rlhf_eval.py --deepspeed ds_z3.json
Python v3.10.13 (/opt/conda/bin/python3.10)

Thread 40212 (idle): "MainThread"
    all_gather_into_tensor (torch/distributed/distributed_c10d.py:2897)
    _all_gather_dtype (deepspeed/runtime/zero/partition_parameters.py:1089)
    fetch_sub_module (deepspeed/runtime/zero/partitioned_param_coordinator.py:312)
    pre_sub_module_forward_function (deepspeed/runtime/zero/parameter_offload.py:452)
    _pre_forward_module_hook (deepspeed/runtime/zero/parameter_offload.py:232)
    _call_impl (torch/nn/modules/module.py:1557)
    forward (transformers/models/llama/modeling_llama.py:1189)
    _sample (transformers/generation/utils.py:2461)
    generate (transformers/generation/utils.py:1576)
    evaluate (rlhf_eval.py:141)
    <module> (rlhf_eval.py:212)"""

# an error raised out of generate() is that error, not ranks waiting: DeepSpeed-Inference keeps
# whole weights on each rank, and the mask's shape is what failed
SHAPE_ERROR_RAISED_OUT_OF_GENERATE = """Traceback (most recent call last):
  File "/home/user/serve_llama.py", line 41, in <module>
    outputs = engine.generate(input_ids, max_new_tokens=128, do_sample=False)
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/inference/engine.py", line 631, in _generate
    return self.module.generate(*inputs, **kwargs)
  File "/opt/conda/lib/python3.10/site-packages/transformers/generation/utils.py", line 1576, in generate
    result = self._greedy_search(
  File "/opt/conda/lib/python3.10/site-packages/transformers/generation/utils.py", line 2494, in _greedy_search
    outputs = self(
  File "/opt/conda/lib/python3.10/site-packages/transformers/models/llama/modeling_llama.py", line 1027, in forward
    attention_mask = _prepare_4d_causal_attention_mask(
  File "/opt/conda/lib/python3.10/site-packages/transformers/modeling_attn_mask_utils.py", line 306, in _prepare_4d_causal_attention_mask
    attention_mask = attn_mask_converter.to_4d(
RuntimeError: The size of tensor a (4096) must match the size of tensor b (2048) at non-singleton dimension 3"""

OOM_RAISED_OUT_OF_GENERATE_UNDER_ZERO3 = """Traceback (most recent call last):
  File "/workspace/eval_zero3.py", line 77, in <module>
    out = model.generate(**batch, max_new_tokens=512, synced_gpus=True)
  File "/usr/local/lib/python3.10/dist-packages/transformers/generation/utils.py", line 2024, in generate
    result = self._sample(
  File "/usr/local/lib/python3.10/dist-packages/transformers/generation/utils.py", line 2982, in _sample
    outputs = self(**model_inputs, return_dict=True)
  File "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py", line 1747, in _call_impl
    return forward_call(*args, **kwargs)
  File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/zero/parameter_offload.py", line 232, in _pre_forward_module_hook
    self.pre_sub_module_forward_function(module)
  File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/zero/partition_parameters.py", line 1089, in _all_gather_dtype
    buffer = torch.empty(buffer_size, dtype=dtype, device=get_accelerator().current_device_name())
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free. Of the allocated memory 76.30 GiB is allocated by PyTorch, and 0.61 GiB is reserved by PyTorch but unallocated."""


# NCCL 2.14 on an H100 server: its topology detection does not model the machine's links
NCCL_TOPOLOGY_WITHOUT_A_REVERSE_PATH = """h100-02:51873:51990 [0] NCCL INFO NCCL version 2.14.3+cuda11.7
h100-02:51873:51990 [0] graph/paths.cc:94 NCCL WARN Failed to find reverse path from remNode 0/2a000 nlinks 6 to node 3/0
h100-02:51873:51990 [0] NCCL INFO graph/paths.cc:338 -> 3
h100-02:51873:51990 [0] NCCL INFO init.cc:663 -> 3
Traceback (most recent call last):
  File "/workspace/bench/train.py", line 52, in <module>
    dist.barrier()
  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 3328, in barrier
    work = default_pg.barrier(opts=opts)
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, internal error, NCCL version 2.14.3
ncclInternalError: Internal check failed.
Last error:
Failed to find reverse path from remNode 0/2a000 nlinks 6 to node 3/0"""

# an HGX node whose NVSwitch fabric never came up: NCCL's first CUDA call on the device is refused
FABRIC_NOT_UP_UNDER_NCCL = """hgx-07:20811:20811 [3] NCCL INFO NVLS multicast support is available on dev 3
hgx-07:20811:20930 [3] transport/nvls.cc:158 NCCL WARN Cuda failure 802 'system not yet initialized'
hgx-07:20811:20930 [3] NCCL INFO transport/nvls.cc:310 -> 1
[rank3]: Traceback (most recent call last):
[rank3]:   File "/work/train_fsdp.py", line 64, in <module>
[rank3]:     dist.all_reduce(t)
[rank3]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2
[rank3]: ncclUnhandledCudaError: Call to CUDA function failed.
[rank3]: Last error:
[rank3]: Cuda failure 802 'system not yet initialized'"""

# the wording of NCCL releases after 2.27 of its check that no two ranks share a GPU
TWO_RANKS_ON_ONE_GPU_IN_NEWER_WORDS = """gpu-node:331:331 [0] NCCL INFO ncclCommInitRankConfig comm 0x5581 rank 1 nranks 2 cudaDev 0 busId 18000 commId 0x9c1 - Init START
gpu-node:331:402 [0] init.cc:1032 NCCL WARN Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration
gpu-node:331:402 [0] NCCL INFO init.cc:1618 -> 5
[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9
[rank1]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
[rank1]: Last error:
[rank1]: Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration"""

CASES = [
    (
        "zero-to-fp32-given-a-file-name",
        ZERO_TO_FP32_GIVEN_A_FILE_NAME,
        "S30",
        "R01",
        "an output folder, not a file name",
    ),
    (
        "hybrid-engine-without-containers",
        HYBRID_ENGINE_WITHOUT_CONTAINERS,
        "S18",
        "R15",
        '"hybrid_engine": {"enabled": false}',
    ),
    (
        "transformer-engine-without-its-pytorch-part",
        TRANSFORMER_ENGINE_WITHOUT_ITS_PYTORCH_PART,
        "S02",
        "R01/R02",
        'import transformer_engine.pytorch"',
    ),
    (
        "converter-given-a-distributed-checkpoint",
        CONVERTER_GIVEN_A_DISTRIBUTED_CHECKPOINT,
        "S30",
        "R20",
        "--ckpt-format torch",
    ),
    (
        "gemini-parameter-used-by-an-untracked-op",
        GEMINI_PARAMETER_USED_BY_AN_UNTRACKED_OP,
        "S18",
        "R15",
        "go through the module's own call",
    ),
    (
        "no-sync-under-zero2-from-the-trainer",
        NO_SYNC_UNDER_ZERO2_FROM_THE_TRAINER,
        "S03/S09",
        "R01",
        "DeepSpeed at 0.15.4",
    ),
    (
        "deepspeed-micro-batch-of-zero",
        DEEPSPEED_MICRO_BATCH_OF_ZERO,
        "S09",
        "R13/R12",
        "fit the world size",
    ),
    (
        "megatron-global-batch-not-divisible",
        MEGATRON_GLOBAL_BATCH_NOT_DIVISIBLE,
        "S09",
        "R12",
        "Make --global-batch-size a multiple",
    ),
    (
        "nccl-named-network-not-found",
        NCCL_NAMED_NETWORK_NOT_FOUND,
        "S12",
        "R07",
        "Check NCCL_NET",
    ),
    ("nccl-without-nvml", NCCL_WITHOUT_NVML, "S12", "R05/R02", "NVIDIA_DRIVER_CAPABILITIES"),
    ("nccl-calloc-async-failed", NCCL_CALLOC_ASYNC_FAILED, "S12/S14", "R16", "NCCL_BUFFSIZE"),
    ("async-io-op-without-libaio", ASYNC_IO_OP_WITHOUT_LIBAIO, "S01", "R03", "libaio-dev"),
    (
        "pypi-apex-in-place-of-nvidia-apex",
        PYPI_APEX_IN_PLACE_OF_NVIDIA_APEX,
        "S02",
        "R02",
        "pip uninstall -y apex",
    ),
    (
        "ib-completion-error-without-a-peer-address",
        IB_COMPLETION_ERROR_WITHOUT_A_PEER_ADDRESS,
        "S12",
        "R07",
        "NCCL_IB_GID_INDEX",
    ),
    (
        "nccl-socket-message-truncated",
        NCCL_SOCKET_MESSAGE_TRUNCATED,
        "S12",
        "R08/R06",
        "NCCL_PROTO, NCCL_ALGO, NCCL_BUFFSIZE",
    ),
    ("nccl-rank-outside-the-world", NCCL_RANK_OUTSIDE_THE_WORLD, "S10/S13", "R06", "`--node_rank`"),
    (
        "injection-container-without-meta-loading",
        INJECTION_CONTAINER_WITHOUT_META_LOADING,
        "S32/S09",
        "R15",
        "replace_with_kernel_inject=False",
    ),
    (
        "nccl-kernels-without-this-architecture",
        NCCL_KERNELS_WITHOUT_THIS_ARCHITECTURE,
        "S12/S04",
        "R04",
        "NVCC_GENCODE",
    ),
    ("op-never-linked-against-curand", OP_NEVER_LINKED_AGAINST_CURAND, "S02", "R03", "-lcurand"),
    (
        "compiler-killed-building-flash-attn",
        COMPILER_KILLED_BUILDING_FLASH_ATTN,
        "S01",
        "R03",
        "MAX_JOBS=4",
    ),
    (
        "nccl-topology-without-a-reverse-path",
        NCCL_TOPOLOGY_WITHOUT_A_REVERSE_PATH,
        "S12",
        "R01",
        "nvidia-nccl-cu12",
    ),
    (
        "fabric-not-up-under-nccl",
        FABRIC_NOT_UP_UNDER_NCCL,
        "S04/S12",
        "R02",
        "nvidia-fabricmanager",
    ),
    (
        "two-ranks-on-one-gpu-in-newer-words",
        TWO_RANKS_ON_ONE_GPU_IN_NEWER_WORDS,
        "S13",
        "R10",
        "torch.cuda.set_device",
    ),
    (
        "stack-stopped-in-generate-under-zero3",
        STACK_STOPPED_IN_GENERATE_UNDER_ZERO3,
        "S17",
        "R08",
        "synced_gpus=True",
    ),
]


# A case the shipped models get wrong today, kept as a strict expected failure until fixed:
# since the refit on 627 rules the cause is right but stated under the 0.8 a named mechanism
# should reach.
KNOWN_MISSES = {"nccl-calloc-async-failed": "since the refit on 627 rules: R16 at 0.78, not >= 0.8"}


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "advice"),
    cases_with_known_misses(CASES, KNOWN_MISSES),
)
def test_a_parallel_stacks_check_decides_the_root_cause_and_the_advice(
    text: str, symptom: str, cause: str, advice: str
) -> None:
    assert_the_check_decides(text, symptom, cause, advice)


@pytest.mark.parametrize(
    ("text", "symptom", "cause"),
    [
        pytest.param(
            SHAPE_ERROR_RAISED_OUT_OF_GENERATE, "S07/S18/S32", "R25/R19", id="shape-error"
        ),
        pytest.param(OOM_RAISED_OUT_OF_GENERATE_UNDER_ZERO3, "S14", "R16", id="oom-under-zero3"),
    ],
)
def test_an_error_raised_out_of_generate_is_that_error_not_ranks_waiting(
    text: str, symptom: str, cause: str
) -> None:
    # the exception decides; a hang's advice (synced_gpus) would send the user after a wait
    # that never happened
    d = explained(text, "--no-embed")
    assert_top(d, "symptoms", *symptom.split("/"))
    assert_top(d, "root_causes", *cause.split("/"))
    assert "synced_gpus" not in advice_of(d)
