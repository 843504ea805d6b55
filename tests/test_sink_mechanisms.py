# ruff: noqa: E501 (pasted tracebacks and log lines are as long as the libraries made them)
"""Messages that the runtime-exception symptom (S18) used to swallow although their mechanism
names something more specific: an op whose inputs sit on two GPUs (a model spread over the
GPUs of one process), a shape check failing where a tensor-parallel slice meets a full tensor,
an attention reshape whose heads do not split over the ranks, and more below. Each paste is
read through `triage explain`; the symptom and root cause must be the mechanism's."""

from __future__ import annotations

import pytest

from tests.cli_runs import assert_top, cases_with_known_misses, explained

# accelerate's device_map spread the model over the GPUs of one process; torch's device check
# names two GPUs
TWO_GPUS_IN_ONE_OP = """Traceback (most recent call last):
  File "/home/ana/eval.py", line 88, in <module>
    out = model.generate(**inputs, max_new_tokens=64)
  File "/opt/conda/lib/python3.10/site-packages/torch/nn/functional.py", line 2551, in layer_norm
    return torch.layer_norm(input, normalized_shape, weight, bias, eps, torch.backends.cudnn.enabled)
RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:2 and cuda:0! (when checking argument for argument weight in method wrapper_CUDA__native_layer_norm)"""

# DeepSpeed's hybrid engine fuses LoRA into a weight its inference containers hold sliced
TP_SLICE_MEETS_FULL = """Traceback (most recent call last):
  File "/home/ana/chat/step3_rlhf_finetuning/main.py", line 521, in main
    out = trainer.generate_experience(batch_prompt['prompt'], batch_prompt['prompt_att_mask'], step)
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/hybrid_engine.py", line 247, in generate
    self.fuse_lora_weight()
  File "/opt/conda/lib/python3.10/site-packages/deepspeed/module_inject/containers/features/hybrid_engine.py", line 67, in fuse_lora
    param.data += lora_scaling * torch.matmul(lora_left_weight.t(), lora_right_weight.t())
RuntimeError: The size of tensor a (2048) must match the size of tensor b (4096) at non-singleton dimension 0"""

# a tensor-parallel degree of 16 for a model of 8 KV heads: each rank holds half a head
HEADS_DO_NOT_SPLIT = """[rank3]: Traceback (most recent call last):
[rank3]:   File "/workspace/torchtitan/torchtitan/train.py", line 329, in main
[rank3]:     pred = model(input_ids)
[rank3]:   File "/workspace/torchtitan/torchtitan/models/llama/model.py", line 444, in forward
[rank3]:     h = layer(h, self.freqs_cis)
[rank3]: RuntimeError: shape '[1, 8192, -1, 128]' is invalid for input of size 524288"""

# torch's pipelining (PiPPy) traced the model as one stage: no split points were given
PIPELINE_ONE_STAGE = """Traceback (most recent call last):
  File "/workspace/pippy/examples/llama/pippy_llama.py", line 41, in <module>
    stage = PipelineStage(llama_pipe, rank, device=device)
RuntimeError: Pipeline group size 2 cannot be larger than number of stages 1"""

# torch 1.0 nightlies: NCCL had no barrier yet
OLD_NCCL_NO_BARRIER = """Traceback (most recent call last):
  File "train_net.py", line 157, in main
    synchronize()
  File "/home/ana/maskrcnn/utils/comm.py", line 45, in synchronize
    dist.barrier()
  File "/opt/conda/lib/python3.6/site-packages/torch/distributed/distributed_c10d.py", line 1070, in barrier
    work = _default_pg.barrier()
RuntimeError: ProcessGroupNCCL does not support barrier"""

# Transformer Engine's userbuffers on a workstation without CUDA Multicast
TE_NO_MULTICAST = """[rank1]:   File "/opt/TransformerEngine/transformer_engine/pytorch/module/base.py", line 289, in initialize_ub
[rank1]:     ub_obj = tex.CommOverlapP2P(
[rank1]: AssertionError: CUDA device, driver and/or toolkit version does not support comm+GEMM overlap with CUDA Multicast. Launch app with UB_SKIPMC=1 to try CUDA IPC instead."""

# verl counts the GPUs Ray reports free
VERL_RAY_GPUS = """(TaskRunner pid=58231) ValueError: Total available GPUs 4 is less than total desired GPUs 16"""

# torchtune's packed dataset without the tokenizer's max_seq_len (the line a rank logs)
TORCHTUNE_PACKED = (
    """[rank3]: ValueError: PackedDataset requires a max_seq_len to be set on the tokenizer."""
)

# FSDP loading an optimizer state without state for parameters that never had a gradient
FSDP_OPTIM_STATE_EMPTY = """[rank0]:   File "/opt/venv/lib/python3.10/site-packages/torch/distributed/fsdp/_optim_utils.py", line 478, in _flatten_optim_state_dict
[rank0]:     raise RuntimeError(
[rank0]: RuntimeError: The state of _OptimStateKey(unflat_param_names=('vision_tower.blocks.0.norm1.weight', 'vision_tower.blocks.0.norm1.bias'), is_fsdp_managed=True) is empty. This should happen when use_orig_params=True."""

# accelerate < 0.20 refused an 8-bit model split over the GPUs of one process
ACCELERATE_OLD_8BIT = """ValueError: You can't train a model that has been loaded in 8-bit precision on multiple devices."""

# DeepSpeed's lp-to-hp fragment mapping met a parameter outside the rank's partition
DS_FRAGMENT = """[rank1]:   File "/opt/venv/lib/python3.12/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 619, in _link_all_hp_params
[rank1]:     link_hp_params(lp_param_list=self.bit16_groups[i],
[rank1]:   File "/opt/venv/lib/python3.12/site-packages/deepspeed/utils/tensor_fragment.py", line 142, in get_hp_fragment_mapping
[rank1]:     assert fragment_start < fragment_end, \\
[rank1]: AssertionError: fragment start 4096 should be < fragment_end 4096"""

# an RL update guards its advantages with np.isfinite: a bare AssertionError
NONFINITE_ASSERTION = """Traceback (most recent call last):
  File "/home/ana/ppo/train.py", line 301, in update
    assert np.isfinite(advantages).all()
AssertionError"""

# Transformer Engine older than the Megatron checkout
TE_INFERENCE_PARAMS = """  File "/opt/TransformerEngine/transformer_engine/pytorch/attention.py", line 2811, in forward
    assert inference_params.max_sequence_len >= self.seq_len
AttributeError: 'InferenceParams' object has no attribute 'max_sequence_len'"""

# numba's NVVM binding against another CUDA toolkit
NUMBA_NVVM = """  File "/opt/conda/lib/python3.10/site-packages/numba/cuda/cudadrv/nvvm.py", line 168, in get_ir_version
    self.check_error(err, 'Failed to get IR version.')
AttributeError: 'NVVM' object has no attribute 'nvvmIRVersion'"""

# RCCL at init on a node whose kernel translates GPU peer-to-peer traffic
RCCL_NO_IOMMU_PT = """node07:1841:1841 [0] /src/rccl/src/init.cc:179 NCCL WARN Missing "iommu=pt" from kernel command line which can lead to system instablity or hang!
node07:1841:1841 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>
INFO 03-02 10:14:55 custom_all_reduce.py:224] Registering 2275 cuda graph addresses"""

# an option value from another release's documentation
CLI_VALUE_NOT_A_CHOICE = """usage: pretrain_gpt.py [-h] [--num-layers NUM_LAYERS] [--position-embedding-type {learned_absolute,rope}]
pretrain_gpt.py: error: argument --position-embedding-type: invalid choice: 'none' (choose from 'learned_absolute', 'rope')"""

# faulthandler's dump of a ZeRO-3 rank fetching an expert its peers never fetch
MOE_ZERO3_WAIT = """Timeout (0:30:00)!
Thread 0x00007f3c8b7fe740 (most recent call first):
  File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/zero/partitioned_param_coordinator.py", line 312 in fetch_sub_module
  File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/zero/parameter_offload.py", line 444 in pre_sub_module_forward_function
  File "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py", line 1840 in _call_impl
  File "/usr/local/lib/python3.10/dist-packages/transformers/models/qwen3_moe/modeling_qwen3_moe.py", line 243 in forward
  File "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py", line 1751 in _wrapped_call_impl
  File "/workspace/sft/train.py", line 120 in train"""

# a reward model's code created a parameter after ZeRO-3 had converted the model's own
ZERO3_PARAM_AFTER_INIT = """Traceback (most recent call last):
  File "/workspace/rm/train_reward.py", line 188, in <module>
    loss = engine(**batch).loss
  File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/zero/parameter_offload.py", line 398, in _post_forward_module_hook
    self.post_sub_module_forward_function(module)
  File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/zero/partitioned_param_coordinator.py", line 441, in release_sub_module
    for param in iter_params(submodule, recurse=z3_leaf_module(submodule)):
AttributeError: 'Parameter' object has no attribute 'ds_id'"""

# vLLM's multiprocessing executor forked its TP workers after the parent touched CUDA
VLLM_FORK_AFTER_CUDA = """(VllmWorker rank=1 pid=40213) ERROR 06-02 10:11:12 [multiproc_executor.py:487] WorkerProc failed to start.
(VllmWorker rank=1 pid=40213) ERROR 06-02 10:11:12 [multiproc_executor.py:487] RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method"""

# DeepSpeed-MII from main against an older DeepSpeed's inference v2 engine
MII_DEEPSPEED_DRIFT = """[2024-02-11 09:14:02,113] [INFO] [engine_v2.py:82:__init__] Building model...
  File "/usr/local/lib/python3.10/site-packages/mii/batching/ragged_batching.py", line 402, in put
    self._batch.insert_sequence(host_seq_desc, tokens)
AttributeError: 'RaggedBatchWrapper' object has no attribute 'insert_sequence'"""

# a transformers 4.46+ Trainer forwards num_items_in_batch into a model that takes no loss kwargs
TRAINER_NUM_ITEMS_TO_MODEL = """  File "/opt/venv/lib/python3.11/site-packages/transformers/trainer.py", line 3633, in compute_loss
    outputs = model(**inputs)
  File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1747, in _call_impl
    return forward_call(*args, **kwargs)
TypeError: LlavaNextForConditionalGeneration.forward() got an unexpected keyword argument 'num_items_in_batch'"""

# a Trainer subclass written for transformers before 4.46
COMPUTE_LOSS_OLD_SIGNATURE = """  File "/opt/venv/lib/python3.11/site-packages/transformers/trainer.py", line 3579, in training_step
    loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)
TypeError: DistillationTrainer.compute_loss() got an unexpected keyword argument 'num_items_in_batch'"""

# a pod advertises its own hostname as the store address; the other pods cannot resolve it
RENDEZVOUS_NAME_UNRESOLVED = """[W socket.cpp:663] [c10d] The IPv4 network addresses of (trainer-7f9c-0, 29400) cannot be retrieved (gai error: -2 - Name or service not known).
[E socket.cpp:957] [c10d] The client socket has timed out after 900s while trying to connect to (trainer-7f9c-0, 29400)."""

# bitsandbytes' own CUDA check: its build has no kernel for one of the GPUs the model spans
BNB_KERNEL_MISSING = """bin /opt/conda/lib/python3.10/site-packages/bitsandbytes/libbitsandbytes_cuda118.so
Loading checkpoint shards:  50%|█████     | 1/2 [00:04<00:04,  4.40s/it]Error named symbol not found at line 529 in file /home/tim/git/bitsandbytes/csrc/ops.cu"""

# an mmcv older than torch: its DDP wrapper calls a private method torch removed
MMCV_DDP_PRIVATE = """Traceback (most recent call last):
  File "tools/train.py", line 188, in <module>
    main()
  File "/opt/conda/lib/python3.9/site-packages/mmcv/parallel/distributed.py", line 42, in train_step
    self._sync_params()
  File "/opt/conda/lib/python3.9/site-packages/torch/nn/modules/module.py", line 1185, in __getattr__
    raise AttributeError("'{}' object has no attribute '{}'".format(
AttributeError: 'MMDistributedDataParallel' object has no attribute '_sync_params'"""

# a distributed checkpoint's writer thread got EIO from a shared filesystem under many writers
STORAGE_EIO_ON_SAVE = """[rank3]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/checkpoint/filesystem.py", line 377, in _write_files_from_queue
[rank3]:     torch.save(data, stream)
[rank3]: OSError: [Errno 5] Input/output error"""

# MLA's head dimension on an older GPU: Transformer Engine disabled every attention backend
TE_NO_ATTENTION_BACKEND = """[rank0]:   File "/opt/megatron-lm/megatron/core/extensions/transformer_engine.py", line 925, in forward
[rank0]:     core_attn_out = super().forward(
[rank0]:   File "/usr/local/lib/python3.12/dist-packages/transformer_engine/pytorch/attention/dot_product_attention/dot_product_attention.py", line 1143, in forward
[rank0]:     raise ValueError(
[rank0]: ValueError: No dot product attention backend is available for the provided inputs. Please run with NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2 to find out the reasons for disabling all backends."""

# ten processes on an eight-GPU node: a GPU asked for more peer mappings than it has
PEER_MAPPINGS_EXHAUSTED = """[rank9]: Traceback (most recent call last):
[rank9]:   File "/workspace/train.py", line 77, in <module>
[rank9]:     model = model.to(device)
[rank9]: RuntimeError: CUDA error: peer mapping resources exhausted
[rank9]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect."""

# a CPU-only torch: transformers' bitsandbytes check fails and names packages already installed
BNB_CHECK_WITHOUT_CUDA = """Traceback (most recent call last):
  File "/home/ana/qlora/train.py", line 52, in <module>
    model = AutoModelForCausalLM.from_pretrained(base, quantization_config=bnb_config, device_map={"": 0})
  File "/opt/conda/lib/python3.10/site-packages/transformers/quantizers/quantizer_bnb_4bit.py", line 62, in validate_environment
    raise ImportError(
ImportError: Using `bitsandbytes` 4-bit quantization requires Accelerate: `pip install accelerate` and the latest version of bitsandbytes: `pip install -i https://pypi.org/simple/ bitsandbytes`"""

# DeepSpeed's AutoTP sliced Mistral's k/v projections but left num_key_value_heads whole
KV_HEADS_NOT_DIVIDED = """Traceback (most recent call last):
  File "/opt/conda/lib/python3.11/site-packages/deepspeed/inference/engine.py", line 636, in _generate
    return self.module.generate(*inputs, **kwargs)
  File "/opt/conda/lib/python3.11/site-packages/transformers/models/mistral/modeling_mistral.py", line 201, in forward
    key_states = key_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
RuntimeError: shape '[2, 37, 8, 128]' is invalid for input of size 37888"""

# (id, paste, symptom, root cause)
CASES = [
    ("two-gpus-in-one-op", TWO_GPUS_IN_ONE_OP, "S13", "R14"),
    ("tensor-parallel-slice-meets-full-tensor", TP_SLICE_MEETS_FULL, "S07", "R19"),
    ("attention-heads-do-not-split-over-tp", HEADS_DO_NOT_SPLIT, "S07", "R12"),
    ("kv-head-count-not-divided-by-the-slicing", KV_HEADS_NOT_DIVIDED, "S07", "R19"),
    ("pipeline-with-fewer-stages-than-ranks", PIPELINE_ONE_STAGE, "S09", "R14"),
    ("old-torch-nccl-without-barrier", OLD_NCCL_NO_BARRIER, "S12", "R01"),
    ("te-comm-overlap-without-multicast", TE_NO_MULTICAST, "S04", "R04"),
    # the same message was verl's own miscount in a reference thread (m5e-014): R25 may lead
    ("verl-fewer-ray-gpus-than-asked", VERL_RAY_GPUS, "S05", "R06|R25"),
    ("torchtune-packing-without-max-seq-len", TORCHTUNE_PACKED, "S08", "R14"),
    ("fsdp-optimizer-state-missing-on-load", FSDP_OPTIM_STATE_EMPTY, "S29", "R20"),
    ("old-accelerate-8bit-check", ACCELERATE_OLD_8BIT, "S09", "R25"),
    ("deepspeed-fragment-outside-partition", DS_FRAGMENT, "S07", "R19"),
    # a reference thread's non-finite eval loss was a framework's division by zero (m5d-068)
    ("non-finite-value-assertion", NONFINITE_ASSERTION, "S19", "R21|R25"),
    ("megatron-te-inference-params", TE_INFERENCE_PARAMS, "S03", "R01"),
    ("numba-nvvm-against-cuda", NUMBA_NVVM, "S03", "R01"),
    ("rccl-without-iommu-passthrough", RCCL_NO_IOMMU_PT, "S11", "R05"),
    ("cli-value-from-another-release", CLI_VALUE_NOT_A_CHOICE, "S09", "R01"),
    ("moe-experts-gathered-differently-under-zero3", MOE_ZERO3_WAIT, "S17", "R08"),
    ("zero3-parameter-created-after-init", ZERO3_PARAM_AFTER_INIT, "S18", "R15"),
    ("vllm-workers-forked-after-cuda-init", VLLM_FORK_AFTER_CUDA, "S32", "R14"),
    ("mii-against-another-deepspeed", MII_DEEPSPEED_DRIFT, "S32", "R01"),
    ("trainer-forwards-num-items-to-model", TRAINER_NUM_ITEMS_TO_MODEL, "S18", "R25"),
    ("compute-loss-override-of-older-transformers", COMPUTE_LOSS_OLD_SIGNATURE, "S18", "R01"),
    ("rendezvous-host-name-does-not-resolve", RENDEZVOUS_NAME_UNRESOLVED, "S10", "R07"),
    ("library-kernel-missing-for-this-gpu", BNB_KERNEL_MISSING, "S26", "R04"),
    ("mmcv-ddp-wrapper-older-than-torch", MMCV_DDP_PRIVATE, "S03", "R01"),
    ("storage-input-output-error-on-save", STORAGE_EIO_ON_SAVE, "S28", "R05"),
    ("no-te-attention-backend-for-this-gpu", TE_NO_ATTENTION_BACKEND, "S04", "R04"),
    ("more-peers-than-the-gpu-maps", PEER_MAPPINGS_EXHAUSTED, "S05", "R06"),
    ("bitsandbytes-check-without-cuda", BNB_CHECK_WITHOUT_CUDA, "S04", "R02"),
]


# Cases the shipped models get wrong today, kept as strict expected failures (they must keep
# failing until fixed, and are never left out). None now: the storage EIO on a DCP save came
# back once DCP's load rule stopped reading the writer's frames of filesystem.py as a load
# (the DeepSpeed fragment's R19 came back with the refit on 1,511).
KNOWN_MISSES: dict[str, str] = {}


@pytest.mark.parametrize(
    ("text", "symptom", "cause"),
    cases_with_known_misses(CASES, KNOWN_MISSES),
)
def test_the_mechanism_names_the_symptom_and_cause(text: str, symptom: str, cause: str) -> None:
    d = explained(text)
    assert_top(d, "symptoms", symptom)
    causes = cause.split("|")
    assert_top(d, "root_causes", *causes)
    assert {c["id"] for c in d["root_causes"][: len(causes)]} == set(causes), d["summary"]
