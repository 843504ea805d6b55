# ruff: noqa: E501 (pasted tracebacks and log lines are as long as the libraries made them)
"""A library's own check names the mechanism (issue 21, h32rc), read through `triage explain`:
CUDA's index_select kernel asserting `srcIndex < srcSelectDimSize` is an embedding lookup past
its table (the training code's ids), an Auto class without the checkpoint's configuration
class is a model that class does not support, scikit-learn's ROC AUC of one class is a metric
computed on one rank's shard, psutil refusing a CPU outside the process's cpuset is the
container's or allocation's limits, Python's bind failing with EADDRNOTAVAIL is a server given
another host's address, torch SDPA's cuDNN with no execution plan is the cuDNN release, a
model path taken for a Hub repo id is a folder missing on this node, megatron-core's
TransformerConfig refusing two features together is the features' set-up, torch.save into a
folder that is not there is a checkpoint save, fairseq's all_gather_list failing to unpickle
another rank's bytes is ranks out of step, not a corrupt file, xformers without CUDA kernels is
a wheel for another torch and its kernels refusing an older GPU the GPU, a Triton kernel out of
shared memory is a GPU smaller than its blocks, a sampler's CPU generator under a CUDA default
device is API use, and an inference-mode tensor updated in training is the training code."""

from __future__ import annotations

import pytest

from tests.cli_runs import (
    advice_of,
    assert_the_check_decides,
    assert_the_check_names,
    assert_top,
    explained,
)

# aten/src/ATen/native/cuda/Indexing.cu: the kernel's assert, printed once per failing thread,
# and torch's note on asynchronous errors; pasted into an issue's markdown, the backticks
# around the assertion are lost
EMBEDDING_LOOKUP_PAST_THE_TABLE = """/opt/conda/conda-bld/pytorch_1702400366987/work/aten/src/ATen/native/cuda/Indexing.cu:1290: indexSelectLargeIndex: block: [112,0,0], thread: [64,0,0] Assertion srcIndex < srcSelectDimSize failed.
/opt/conda/conda-bld/pytorch_1702400366987/work/aten/src/ATen/native/cuda/Indexing.cu:1290: indexSelectLargeIndex: block: [112,0,0], thread: [65,0,0] Assertion srcIndex < srcSelectDimSize failed.
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1.
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."""

# transformers/models/auto/auto_factory.py: the config's class is not in this Auto class's mapping
AUTO_CLASS_WITHOUT_THE_CONFIG = """Traceback (most recent call last):
  File "/home/me/finetune.py", line 41, in <module>
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.bfloat16)
  File "/opt/conda/lib/python3.10/site-packages/transformers/models/auto/auto_factory.py", line 567, in from_pretrained
    raise ValueError(
ValueError: Unrecognized configuration class <class 'transformers.models.llava.configuration_llava.LlavaConfig'> for this kind of AutoModel: AutoModelForCausalLM.
Model type should be one of BartConfig, BertConfig, BloomConfig, GPT2Config, LlamaConfig, MistralConfig, Qwen2Config."""

# sklearn/metrics/_ranking.py (_binary_roc_auc_score, releases before 1.6 raise)
AUC_OF_ONE_CLASS_ON_A_RANK = """Epoch 0: 100%|██████████| 250/250 [01:12<00:00,  3.45it/s, loss=0.412]
Traceback (most recent call last):
  File "/home/me/project/model.py", line 97, in validation_epoch_end
    auc = roc_auc_score(labels, scores)
  File "/usr/local/lib/python3.8/dist-packages/sklearn/metrics/_ranking.py", line 566, in roc_auc_score
    return _average_binary_score(
  File "/usr/local/lib/python3.8/dist-packages/sklearn/metrics/_ranking.py", line 339, in _binary_roc_auc_score
    raise ValueError(
ValueError: Only one class present in y_true. ROC AUC score is not defined in that case."""

# psutil/_pslinux.py (Process.cpu_affinity_set): CPU 0 is outside the cpuset the process got
CPU_PINNED_OUTSIDE_THE_CPUSET = """(AsyncLLM pid=8812)   File "/usr/local/lib/python3.12/dist-packages/psutil/__init__.py", line 889, in cpu_affinity
(AsyncLLM pid=8812)     self._proc.cpu_affinity_set(list(set(cpus)))
(AsyncLLM pid=8812)   File "/usr/local/lib/python3.12/dist-packages/psutil/_pslinux.py", line 2207, in cpu_affinity_set
(AsyncLLM pid=8812)     raise ValueError(msg) from err
(AsyncLLM pid=8812) ValueError: CPU number 0 is not eligible; choose between [48, 49, 50, 51, 52, 53, 54, 55]"""

# bind(2) EADDRNOTAVAIL: the server's address is not on this host
SERVER_BOUND_TO_ANOTHER_HOSTS_ADDRESS = """Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/uvicorn/server.py", line 161, in startup
    server = await loop.create_server(
  File "/usr/lib/python3.10/asyncio/base_events.py", line 1519, in create_server
    sock.bind(sa)
OSError: [Errno 99] Cannot assign requested address"""

# torch's cuDNN SDPA backend (cudnn_frontend found no engine for the graph)
SDPA_CUDNN_WITHOUT_A_PLAN = """  File "/usr/local/lib/python3.12/dist-packages/torch/nn/functional.py", line 5920, in scaled_dot_product_attention
    return torch._C._nn.scaled_dot_product_attention(
RuntimeError: cuDNN Frontend error: [cudnn_frontend] Error: No valid execution plans built."""

# huggingface_hub's validate_repo_id: a path with several slashes that is no folder here
MODEL_PATH_MISSING_ON_THIS_NODE = """(RayWorkerWrapper pid=4411, ip=10.0.0.12)   File "/usr/local/lib/python3.10/dist-packages/transformers/utils/hub.py", line 402, in cached_file
(RayWorkerWrapper pid=4411, ip=10.0.0.12)     resolved_file = hf_hub_download(
(RayWorkerWrapper pid=4411, ip=10.0.0.12)   File "/usr/local/lib/python3.10/dist-packages/huggingface_hub/utils/_validators.py", line 154, in validate_repo_id
(RayWorkerWrapper pid=4411, ip=10.0.0.12)     raise HFValidationError(
(RayWorkerWrapper pid=4411, ip=10.0.0.12) huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/home/me/models/Qwen2.5-7B-Instruct'. Use `repo_type` argument if needed."""

# xformers/ops/fmha/dispatch.py lists each refused kernel with its reasons (fmha/common.py):
# an extension that did not load for this torch
XFORMERS_WITHOUT_CUDA_KERNELS = """  File "/usr/local/lib/python3.10/dist-packages/xformers/ops/fmha/dispatch.py", line 98, in _run_priority_list
    raise NotImplementedError(msg)
NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:
     query       : shape=(1, 4096, 32, 128) (torch.bfloat16)
     key         : shape=(1, 4096, 32, 128) (torch.bfloat16)
     value       : shape=(1, 4096, 32, 128) (torch.bfloat16)
     attn_bias   : <class 'xformers.ops.fmha.attn_bias.BlockDiagonalCausalMask'>
     p           : 0.0
`decoderF` is not supported because:
    xFormers wasn't build with CUDA support
`flshattF@0.0.0` is not supported because:
    xFormers wasn't build with CUDA support
`cutlassF` is not supported because:
    xFormers wasn't build with CUDA support"""

# the same dispatcher on a Volta GPU: the flash kernels need capability above (8, 0)
XFORMERS_ON_A_GPU_TOO_OLD = """[rank0]: NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:
[rank0]:      query       : shape=(1, 2048, 32, 128) (torch.float16)
[rank0]:      key         : shape=(1, 2048, 32, 128) (torch.float16)
[rank0]:      value       : shape=(1, 2048, 32, 128) (torch.float16)
[rank0]:      attn_bias   : <class 'xformers.ops.fmha.attn_bias.BlockDiagonalCausalMask'>
[rank0]:      p           : 0.0
[rank0]: `flshattF@v2.5.6` is not supported because:
[rank0]:     requires device with capability > (8, 0) but your GPU has capability (7, 0) (too old)
[rank0]: `tritonflashattF` is not supported because:
[rank0]:     requires device with capability > (8, 0) but your GPU has capability (7, 0) (too old)"""

# triton/runtime/errors.py: the kernel's blocks need more shared memory than the SM has
TRITON_KERNEL_OUT_OF_SHARED_MEMORY = """  File "/usr/local/lib/python3.10/dist-packages/triton/compiler/compiler.py", line 385, in _init_handles
    raise OutOfResources(self.metadata.shared, max_shared, "shared memory")
triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: 101376. Reducing block sizes or `num_stages` may help."""

# aten's check_generator, reached through RandomSampler with the default device set to CUDA
SAMPLER_GENERATOR_ON_THE_CPU = """Traceback (most recent call last):
  File "/home/me/train.py", line 95, in <module>
    for step, batch in enumerate(train_loader):
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py", line 631, in __next__
    data = self._next_data()
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/sampler.py", line 165, in __iter__
    yield from torch.randperm(n, generator=generator).tolist()
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/_device.py", line 79, in __torch_function__
    return func(*args, **kwargs)
RuntimeError: Expected a 'cuda' device type for generator but found 'cpu'"""

# (name, paste, top symptom, top root cause, what the fixes must tell the user)
CASES = [
    (
        "cuda-index-select-past-the-table",
        EMBEDDING_LOOKUP_PAST_THE_TABLE,
        "S26",
        "R26",
        "resize_token_embeddings(len(tokenizer))",
    ),
    (
        "hf-auto-class-without-the-config",
        AUTO_CLASS_WITHOUT_THE_CONFIG,
        "S06",
        "R15",
        "`AutoModelForCausalLM` does not",
    ),
    ("sklearn-auc-of-one-class", AUC_OF_ONE_CLASS_ON_A_RANK, "S18", "R26", "all_gather"),
    (
        "psutil-cpu-outside-the-cpuset",
        CPU_PINNED_OUTSIDE_THE_CPUSET,
        "S05/S32",
        "R05",
        "os.sched_getaffinity(0)",
    ),
    (
        "bind-to-another-hosts-address",
        SERVER_BOUND_TO_ANOTHER_HOSTS_ADDRESS,
        "S05/S10",
        "R06",
        "not the head node's",
    ),
    (
        "hf-model-path-missing-on-this-node",
        MODEL_PATH_MISSING_ON_THIS_NODE,
        "S06",
        "R06",
        "every node sees the same path",
    ),
    (
        "xformers-without-its-cuda-kernels",
        XFORMERS_WITHOUT_CUDA_KERNELS,
        "S03",
        "R01",
        "python -m xformers.info",
    ),
    ("xformers-on-a-gpu-too-old", XFORMERS_ON_A_GPU_TOO_OLD, "S04", "R04", "`sdpa` or `eager`"),
    (
        "triton-kernel-out-of-shared-memory",
        TRITON_KERNEL_OUT_OF_SHARED_MEMORY,
        "S04",
        "R04",
        "`num_stages`",
    ),
    (
        "sampler-generator-on-the-cpu",
        SAMPLER_GENERATOR_ON_THE_CPU,
        "S08/S18",
        "R14",
        "torch.Generator(device='cuda')",
    ),
    (
        "sdpa-cudnn-without-a-plan",
        SDPA_CUDNN_WITHOUT_A_PLAN,
        "S26/S04",
        "R01",
        "torch.backends.cuda.enable_cudnn_sdp(False)",
    ),
]


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "advice"),
    [pytest.param(*c[1:], id=c[0]) for c in CASES],
)
def test_a_library_check_read_in_its_source_decides_the_cause_and_the_advice(
    text: str, symptom: str, cause: str, advice: str
) -> None:
    assert_the_check_decides(text, symptom, cause, advice)


# megatron-core's TransformerConfig.__post_init__ compares the run's settings; the check names
# the two features, not which one the user meant: the features' set-up is the top cause, and
# the advice says which settings to change (stated below 0.8: R12 and R14 stay plausible).
MCORE_FEATURES_THAT_DO_NOT_GO_TOGETHER = """Traceback (most recent call last):
  File "/workspace/pretrain_gpt.py", line 20, in <module>
    config = core_transformer_config_from_args(args)
  File "/usr/local/lib/python3.12/dist-packages/megatron/core/transformer/transformer_config.py", line 1021, in __post_init__
    raise ValueError("CUDA graphs not supported with CPU offloading.")
ValueError: CUDA graphs not supported with CPU offloading."""


def test_megatron_core_refusing_two_features_together_is_the_features_set_up() -> None:
    assert_the_check_names(
        MCORE_FEATURES_THAT_DO_NOT_GO_TOGETHER, "S09", "R13", "turn one of them off"
    )


# caffe2/serialize/inline_container.cc (PyTorchStreamWriter): the save's folder is not there on
# this rank's node; whether it was never made or made by rank 0 after this rank saved, the
# paste does not say, so the cause stays a best guess; the save and its advice are settled.
TORCH_SAVE_INTO_A_MISSING_FOLDER = """[rank3]: Traceback (most recent call last):
[rank3]:   File "/workspace/train.py", line 301, in <module>
[rank3]:     torch.save(optimizer.state_dict(), os.path.join(ckpt_dir, f"optim_rank{rank}.pt"))
[rank3]:   File "/usr/local/lib/python3.10/dist-packages/torch/serialization.py", line 628, in save
[rank3]:     with _open_zipfile_writer(f) as opened_zipfile:
[rank3]:   File "/usr/local/lib/python3.10/dist-packages/torch/serialization.py", line 473, in __init__
[rank3]:     super().__init__(torch._C.PyTorchFileWriter(self.name))
[rank3]: RuntimeError: Parent directory /checkpoints/run1/step_2000 does not exist."""


def test_torch_save_into_a_folder_missing_on_this_node_is_a_save_with_its_advice() -> None:
    d = assert_the_check_names(
        TORCH_SAVE_INTO_A_MISSING_FOLDER, "S28", "R22/R26", "os.makedirs(path, exist_ok=True)"
    )
    assert "dist.barrier()" in advice_of(d)


# fairseq/distributed/utils.py (all_gather_list): another rank's slot did not unpickle, so the
# ranks were in different collectives. Before this rule the pickle error read as a corrupt
# checkpoint file; the cause (a rank that skipped a batch after an OOM, or ran out of data)
# is in the other ranks' lines, so only the symptom and the advice are asserted.
FAIRSEQ_RANKS_OUT_OF_STEP = """Traceback (most recent call last):
  File "/home/me/fairseq/fairseq/distributed_utils.py", line 318, in all_gather_list
    pickle.loads(bytes(out_buffer[header_size:header_size + enc_size].tolist()))
_pickle.UnpicklingError: invalid load key, '\\x00'.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/home/me/fairseq/fairseq/trainer.py", line 612, in _aggregate_logging_outputs
    return self._all_gather_list_sync(logging_outputs, *extra_stats_to_sum, ignore=ignore)
  File "/home/me/fairseq/fairseq/distributed_utils.py", line 322, in all_gather_list
    'Unable to unpickle data from other workers. all_gather_list requires all '
Exception: Unable to unpickle data from other workers. all_gather_list requires all workers to enter the function together, so this error usually indicates that the workers have fallen out of sync somehow. Workers can fall out of sync if one of them runs out of memory, or if there are other conditions in your training script that can cause one worker to finish an epoch while other workers are still iterating over their portions of the data. Try rerunning with --ddp-backend=no_c10d and see if that helps."""


def test_fairseq_ranks_out_of_step_are_not_read_as_a_corrupt_checkpoint() -> None:
    d = explained(FAIRSEQ_RANKS_OUT_OF_STEP, "--no-embed")
    assert_top(d, "symptoms", "S21")
    told = advice_of(d)
    assert "Find the rank that fell behind" in told, told


# torch's in-place check on a tensor made under inference_mode, raised in the user's own module:
# the user's code (a cache built during evaluation), though a library's generate() can leave it
# too, so the cause is stated below 0.8; the advice is what to change.
INFERENCE_TENSOR_UPDATED_IN_TRAINING = """Traceback (most recent call last):
  File "/home/me/train.py", line 188, in <module>
    loss = model(**batch).loss
  File "/home/me/models/rope.py", line 57, in forward
    self.cos_cached[:seq_len].mul_(self.scale)
RuntimeError: Inplace update to inference tensor outside InferenceMode is not allowed.You can make a clone to get a normal tensor before doing inplace update.See https://github.com/pytorch/rfcs/pull/17 for more details."""


def test_an_inference_mode_tensor_updated_in_training_is_the_training_code() -> None:
    assert_the_check_names(
        INFERENCE_TENSOR_UPDATED_IN_TRAINING, "S18", "R26", "rather than `torch.inference_mode()`"
    )
