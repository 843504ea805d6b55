# ruff: noqa: E501 (pasted tracebacks and log lines are as long as the libraries made them)
"""Messages of the fine-tuning, RL and inference stack (vLLM, Ray, transformers, accelerate,
unsloth, LLaMA-Factory, axolotl, verl, and the CUDA/NCCL libraries they load) whose check, not
their words, decides the root cause: a layout the framework does not support, a model the
release does not implement, a launch that gave too few GPUs, a container that forbids CUDA IPC,
libraries from two releases. Each is read through `triage explain`, as a user pastes it."""

from __future__ import annotations

import pytest

from tests.cli_runs import assert_top, explained

# a bitsandbytes-quantized checkpoint served without --quantization bitsandbytes: the model's
# load_weights finds no parameter for the quantization state
VLLM_BNB_CHECKPOINT = """ERROR 03-02 14:10:07 engine.py:366] Traceback (most recent call last):
ERROR 03-02 14:10:07 engine.py:366]   File "/opt/py/site-packages/vllm/model_executor/models/llama.py", line 498, in load_weights
ERROR 03-02 14:10:07 engine.py:366]     param = params_dict[name]
ERROR 03-02 14:10:07 engine.py:366] KeyError: 'model.layers.0.self_attn.qkv_proj.weight.absmax'"""

# vLLM started a Ray instance of its own that sees one node's GPUs
VLLM_PLACEMENT_GROUP = """2025-02-02 19:54:19,101 INFO worker.py:1832 -- Started a local Ray instance.
WARNING 02-02 19:54:20 ray_utils.py:315] The number of required GPUs exceeds the total number of available GPUs in the placement group.
INFO 02-02 19:54:30 ray_utils.py:212] Waiting for creating a placement group of specs for 10 seconds. specs=[{'GPU': 1.0, 'node:10.0.0.4': 0.001}, {'GPU': 1.0}]. Check `ray status` to see if you have enough resources."""

# the custom all-reduce kernel library's CUDACHECK on cudaIpcOpenMemHandle
VLLM_CUSTOM_ALLREDUCE = """(VllmWorkerProcess pid=3121) INFO 07-11 09:02:14 custom_all_reduce_utils.py:234] reading GPU P2P access cache from /root/.cache/vllm/gpu_p2p_access_cache_for_0,1.json
Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'invalid resource handle'"""

# an RL trainer hands the policy's weights to the rollout engine over CUDA IPC
PIDFD_GETFD = """(WorkerDict pid=8812) Traceback (most recent call last):
(WorkerDict pid=8812)   File "/opt/py/site-packages/torch/multiprocessing/reductions.py", line 181, in rebuild_cuda_tensor
(WorkerDict pid=8812)     storage = storage_cls._new_shared_cuda(
(WorkerDict pid=8812) RuntimeError: pidfd_getfd: Operation not permitted"""

RAY_OOM_KILL = """(raylet) [2025-04-02 15:02:00,117 E 4411 4411] (raylet) node_manager.cc:3069: 3 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 5be0c2, IP: 10.1.2.3) over the last time period. To see more information about the Workers killed on this node, use `ray logs raylet.out -ip 10.1.2.3`"""

RAY_REGISTER_WORKER = """[2025-01-20 08:31:02,417 E 7781 7781] core_worker.cc:496: Failed to register worker 02000000ffffffffffffffffffffffffffffffffffffffffffffffff to Raylet. IOError: [RayletClient] Unable to register worker with raylet. Connection refused"""

UNSLOTH_MULTI_GPU = """Traceback (most recent call last):
  File "/home/user/sft.py", line 88, in <module>
    trainer.train()
  File "<string>", line 36, in train
RuntimeError: Unsloth currently does not work on multi GPU setups - sadly we are a 2 brother team so enabling it will require much more work, so we have to prioritize. Please understand!"""

LLAMAFACTORY_PTQ = """[rank1]:   File "/opt/LLaMA-Factory/src/llamafactory/model/model_utils/quantization.py", line 104, in configure_quantization
[rank1]:     raise ValueError("DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models.")
[rank1]: ValueError: DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models."""

AXOLOTL_STRATEGY = """[2024-05-14 10:22:31,907] [ERROR] [axolotl.load_tokenized_prepared_datasets:311] [PID:902] [RANK:0] unhandled prompt tokenization strategy: alpaca_chat.load_qa.
ValueError: unhandled prompt tokenization strategy: alpaca_chat.load_qa"""

VERL_MINI_BATCH = """(WorkerDict pid=2291)   File "/opt/verl/verl/workers/fsdp_workers.py", line 143, in __init__
(WorkerDict pid=2291)     assert self.config.actor.ppo_mini_batch_size > 0, f'ppo_mini_batch_size {self.config.actor.ppo_mini_batch_size} should be larger than 0 after normalization'
(WorkerDict pid=2291) AssertionError: ppo_mini_batch_size 0 should be larger than 0 after normalization"""

HF_MODEL_TYPE = """  File "/opt/py/site-packages/transformers/models/auto/configuration_auto.py", line 1073, in from_pretrained
    raise ValueError(
ValueError: The checkpoint you are trying to load has model type `gemma3` but Transformers does not recognize this architecture. This could be because of an issue with the checkpoint, or because your version of Transformers is out of date."""

HF_DATAPARALLEL = """Traceback (most recent call last):
  File "/home/user/eval_summaries.py", line 57, in <module>
    out = trainer.model.generate(**batch, max_new_tokens=64)
  File "/opt/py/site-packages/torch/nn/modules/module.py", line 1729, in __getattr__
    raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
AttributeError: 'DataParallel' object has no attribute 'generate'"""

OPTIMIZER_TRAIN_MODE = """  File "/opt/py/site-packages/transformers/trainer.py", line 2336, in _inner_training_loop
    self.optimizer.train()
  File "/opt/py/site-packages/accelerate/optimizer.py", line 128, in train
    return self.optimizer.train()
AttributeError: 'AdamW' object has no attribute 'train'"""

NCCL_CONFIG_FIELD = """torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, invalid argument (run with NCCL_DEBUG=WARN for details), NCCL version 2.14.3
ncclInvalidArgument: Invalid value for an argument.
Last error:
Invalid config blocking attribute value -2147483648"""

# a system CUDA's libcublasLt ahead of the wheel's on LD_LIBRARY_PATH
CUBLASLT_SYMBOL = """(WorkerDict pid=5120) Invalid handle. Cannot load symbol cublasLtGetVersion
(WorkerDict pid=5120) *** SIGABRT received at time=1731825404 on cpu 12 ***"""

# an issue title keeps the message only up to where it was cut
VLLM_ARCHITECTURE_CUT = (
    "ValueError: Model architectures ['Gemma3ForConditionalGeneration'] are not supported fo"
)

# two settings of one run: the json's micro batch and the command line's
DS_CONFIG_VS_TRAINING_ARGS = """  File "/opt/py/site-packages/transformers/integrations/deepspeed.py", line 271, in trainer_config_finalize
    raise ValueError(
ValueError: Please correct the following DeepSpeed config values that mismatch TrainingArguments values:
- ds train_micro_batch_size_per_gpu=4 vs hf per_device_train_batch_size=8
The easiest method is to set these DeepSpeed config values to 'auto'."""

# a check that names the value it got among the two it allows
CHECK_REFUSES_ALLOWED_VALUE = (
    "ValueError: vllm_mode must be either 'server' or 'colocate', got 'colocate'."
)

CASES = [
    ("vllm-bnb-checkpoint-without-bnb-load-format", VLLM_BNB_CHECKPOINT, "S06", "R14"),
    ("ray-memory-monitor-killed-workers", RAY_OOM_KILL, "S15", "R17"),
    ("ray-worker-cannot-register-with-raylet", RAY_REGISTER_WORKER, "S05", "R06"),
    ("unsloth-multi-gpu-refused", UNSLOTH_MULTI_GPU, "S09", "R04"),
    ("axolotl-prompt-strategy-not-loaded", AXOLOTL_STRATEGY, "S08", "R01"),
    ("hf-model-type-unknown-to-transformers", HF_MODEL_TYPE, "S06", "R01"),
    ("accelerate-optimizer-train-mode-forwarded", OPTIMIZER_TRAIN_MODE, "S03", "R01"),
    ("nccl-config-from-another-release", NCCL_CONFIG_FIELD, "S12", "R01"),
    ("cublaslt-symbol-not-loaded", CUBLASLT_SYMBOL, "S02", "R01"),
    ("vllm-architecture-message-cut-off", VLLM_ARCHITECTURE_CUT, "S06", "R15"),
    ("hf-deepspeed-config-disagrees-with-training-args", DS_CONFIG_VS_TRAINING_ARGS, "S09", "R13"),
    ("check-refuses-a-value-it-lists-as-allowed", CHECK_REFUSES_ALLOWED_VALUE, "S09", "R25"),
]


@pytest.mark.parametrize(
    ("text", "symptom", "cause"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_check_behind_the_message_decides_its_symptom_and_cause(
    text: str, symptom: str, cause: str
) -> None:
    d = explained(text, "--no-embed")
    assert_top(d, "symptoms", symptom)
    assert_top(d, "root_causes", cause)


def test_a_custom_all_reduce_ipc_failure_is_fixed_by_falling_back_to_nccl() -> None:
    d = explained(VLLM_CUSTOM_ALLREDUCE, "--no-embed")
    assert d["symptoms"][0]["id"] == "S12", d["summary"]
    # the container's IPC limits or vLLM enabling the kernel where it cannot work: either way
    # the user's remedy is the same
    assert d["root_causes"][0]["id"] in {"R05", "R25"}, d["summary"]
    first = d["fix_patterns"][0]
    assert first["id"] == "F3" and "--disable-custom-all-reduce" in first["actions"][0], first


# messages whose label the neighbours and the generic layer already got: what the mechanism
# adds is the remedy, named from the check (the variable to set, the option to change)
REMEDY_CASES = [
    ("vllm-placement-group-too-few-gpus", VLLM_PLACEMENT_GROUP, "S05", "R06", "RAY_ADDRESS="),
    ("cuda-ipc-pidfd-getfd-not-permitted", PIDFD_GETFD, "S18", "R05", "expandable_segments:False"),
    (
        "llamafactory-ptq-model-sharded",
        LLAMAFACTORY_PTQ,
        "S09",
        "R15",
        "start from the unquantized (bf16) weights",
    ),
    (
        "verl-mini-batch-empty-after-normalization",
        VERL_MINI_BATCH,
        "S09",
        "R12",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
    ),
    # `generate` called for evaluation: a runtime exception, or a distributed inference failure
    # (the taxonomy's S32 names inference through a parallel wrapper) since the corpus gained
    # round 12's inference cases; the cause and the remedy are the mechanism's either way
    (
        "hf-dataparallel-wrapper-attribute",
        HF_DATAPARALLEL,
        ("S18", "S32"),
        "R14",
        "model.module.generate",
    ),
]


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "remedy"),
    [c[1:] for c in REMEDY_CASES],
    ids=[c[0] for c in REMEDY_CASES],
)
def test_the_mechanism_names_the_remedy_among_the_first_two_fixes(
    text: str, symptom: str | tuple[str, ...], cause: str, remedy: str
) -> None:
    d = explained(text, "--no-embed")
    accepted = symptom if isinstance(symptom, tuple) else (symptom,)
    assert d["symptoms"][0]["id"] in accepted, d["summary"]
    assert d["root_causes"][0]["id"] == cause, d["summary"]
    actions = [a for f in d["fix_patterns"][:2] for a in f["actions"]]
    assert any(remedy in a for a in actions), actions


# TRL computes the reference model's log-probs before the engine moved that model to the GPU
DEVICE_MISMATCH_IN_TRAINER = """Traceback (most recent call last):
  File "/home/user/dpo.py", line 201, in <module>
    trainer.train()
  File "/opt/py/site-packages/trl/trainer/dpo_trainer.py", line 1043, in compute_reference_log_probs
    ref_chosen_logps, ref_rejected_logps = self.concatenated_forward(self.ref_model, padded_batch)
  File "/opt/py/site-packages/torch/nn/modules/module.py", line 1747, in _call_impl
    return forward_call(*args, **kwargs)
  File "/opt/py/site-packages/torch/nn/functional.py", line 2264, in embedding
    return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)
RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:0! (when checking argument for argument index in method wrapper_CUDA__index_select)"""

# the same check where the user's own forward mixed devices
DEVICE_MISMATCH_IN_USER_CODE = """Traceback (most recent call last):
  File "/home/user/proj/model.py", line 77, in forward
    h = self.proj(x) + self.bias_table[positions]
RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"""


def test_a_device_mismatch_is_the_framework_s_when_its_own_frame_mixed_the_devices() -> None:
    d = explained(DEVICE_MISMATCH_IN_TRAINER, "--no-embed")
    assert d["symptoms"][0]["id"] == "S18", d["summary"]
    assert d["root_causes"][0]["id"] == "R25", d["summary"]
    actions = [a for f in d["fix_patterns"][:2] for a in f["actions"]]
    assert any("`compute_reference_log_probs`" in a for a in actions), actions
    mine = explained(DEVICE_MISMATCH_IN_USER_CODE, "--no-embed")
    assert mine["root_causes"][0]["id"] in {"R26", "R14"}, mine["summary"]
