# ruff: noqa: E501 (pasted tracebacks and log lines are as long as the libraries made them)
"""Library messages whose code path, not their words, decides the symptom and the root cause:
a ZeRO-3 shard's empty weight in a shape error, a batch the collate function could not join, a
streaming dataset's shared-memory registry, torchrun's --nproc-per-node, accelerate's batch
dispatcher, vLLM's quantized layers under tensor parallelism, a training loop that stops on a
NaN loss. Each is read through `triage explain`."""

from __future__ import annotations

import pytest

from tests.cli_runs import assert_top, explained

# peft merges a LoRA delta into a weight that ZeRO-3 partitioned: DeepSpeed's free_param left
# `param.data = torch.empty(0)`, so the add sees a size 0
ZERO3_EMPTY_WEIGHT = """Traceback (most recent call last):
  File "merge.py", line 31, in <module>
    model = model.merge_and_unload()
  File "/opt/py/site-packages/peft/tuners/lora/model.py", line 440, in _unload_and_optionally_merge
    target.merge(safe_merge=safe_merge, adapter_names=adapter_names)
  File "/opt/py/site-packages/peft/tuners/lora/layer.py", line 305, in merge
    base_layer.weight.data += self.get_delta_weight(active_adapter)
RuntimeError: The size of tensor a (0) must match the size of tensor b (4096) at non-singleton dimension 1"""

# transformers resizes the embedding of a ZeRO-3 model outside a GatheredParameters block
ZERO3_EMBEDDING = """[rank1]: Traceback (most recent call last):
[rank1]:   File "/workspace/train.py", line 210, in <module>
[rank1]:     model.resize_token_embeddings(len(tokenizer))
[rank1]:   File "/opt/py/site-packages/transformers/modeling_utils.py", line 2109, in resize_token_embeddings
[rank1]:     model_embeds = self._resize_token_embeddings(new_num_tokens, pad_to_multiple_of)
[rank1]:   File "/opt/py/site-packages/torch/nn/functional.py", line 2264, in embedding
[rank1]:     return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)
[rank1]: RuntimeError: The size of tensor a (0) must match the size of tensor b (151936) at non-singleton dimension 0"""

STREAMING_LOCAL_DIR = (
    "ValueError: Reused local directory: ['/data/c4/train_small'] vs ['/data/c4/train_small']. "
    "Provide a different one."
)

ACCELERATE_DISPATCH = (
    "RuntimeError: You can't use batches of different size with `dispatch_batches=True` or when "
    "using an `IterableDataset`.either pass `dispatch_batches=False` and have each process "
    "fetch its own batch  or pass `split_batches=True`. By doing so, the main process will "
    "fetch a full batch and slice it into `num_processes` batches for each process."
)

# vLLM's GPTQ/AWQ layers give each tensor-parallel rank whole quantization groups
QUANTIZED_TP = (
    "ValueError: The output size is not aligned with the quantized weight shape. "
    "This can be caused by too large tensor parallel size."
)

# a detection collate function concatenates boxes of different widths
COLLATE_CAT = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/home/user/proj/train_detector.py", line 402, in <module>
[rank0]:     for step, batch in enumerate(train_loader):
[rank0]:   File "/opt/py/site-packages/torch/utils/data/dataloader.py", line 701, in __next__
[rank0]:     data = self._next_data()
[rank0]:   File "/opt/py/site-packages/torch/utils/data/dataloader.py", line 757, in _next_data
[rank0]:     data = self._dataset_fetcher.fetch(index)  # may raise StopIteration
[rank0]:   File "/opt/py/site-packages/torch/utils/data/_utils/fetch.py", line 55, in fetch
[rank0]:     return self.collate_fn(data)
[rank0]:   File "/home/user/proj/data/collate.py", line 37, in collate_boxes
[rank0]:     boxes = torch.cat([b["boxes"] for b in batch], dim=1)
[rank0]: RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 4 but got size 5 for tensor number 2 in the list."""

# torchrun's int(nproc_per_node) got the next option of a command in the wrong order
TORCHRUN_NPROC = """  File "/usr/lib/python3/dist-packages/torch/distributed/run.py", line 632, in determine_local_world_size
    return int(nproc_per_node)
ValueError: invalid literal for int() with base 10: '--nnodes=2'"""

# the training loop's own check (MAE/DeiT engine_*.py) prints and exits 1; torchrun then
# reports the exit
LOSS_INF_THEN_EXIT = """Epoch: [3]  [1180/1251]  eta: 0:00:41  lr: 0.000375  loss: 6.6431 (6.7312)  time: 0.5702  data: 0.0003  max mem: 14211
Loss is inf, stopping training
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 3 (pid: 88211) of binary: /usr/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
main_finetune.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-03-01_10:12:44
  host      : gpu-node-7
  rank      : 3 (local_rank: 3)
  exitcode  : 1 (pid: 88211)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================"""

# vLLM 0.5 checks the parallel layout before loading: pipeline parallelism needed Ray
VLLM_PP_MULTIPROCESSING = """Traceback (most recent call last):
  File "/srv/infer/batch.py", line 22, in <module>
    llm = LLM(model="Qwen/Qwen2-72B-Instruct", tensor_parallel_size=4, pipeline_parallel_size=2)
  File "/opt/py/site-packages/vllm/engine/arg_utils.py", line 718, in create_engine_config
    parallel_config = ParallelConfig(
  File "/opt/py/site-packages/vllm/config.py", line 698, in __init__
    self._verify_args()
  File "/opt/py/site-packages/vllm/config.py", line 704, in _verify_args
    raise NotImplementedError("Pipeline parallelism is not supported "
NotImplementedError: Pipeline parallelism is not supported yet with multiprocessing."""

# vLLM's model registry has no class for the checkpoint's `architectures`
VLLM_ARCHITECTURE = (
    "ValueError: Model architectures ['Qwen2ForSequenceClassification'] are not supported for "
    "now. Supported architectures: ['AquilaModel', 'BaichuanForCausalLM', 'LlamaForCausalLM']"
)

# FSDP1 flattens a unit's parameters into one float FlatParameter; 4-bit weights are uint8
FSDP_INTEGER_PARAMS = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/home/user/recipes/finetuning.py", line 179, in main
[rank0]:     model = FSDP(
[rank0]:   File "/opt/py/site-packages/torch/distributed/fsdp/fully_sharded_data_parallel.py", line 483, in __init__
[rank0]:     _init_param_handle_from_module(
[rank0]:   File "/opt/py/site-packages/torch/distributed/fsdp/_flat_param.py", line 770, in _validate_tensors_to_flatten
[rank0]:     raise ValueError("Cannot flatten integer dtype tensors")
[rank0]: ValueError: Cannot flatten integer dtype tensors"""

# weights the checkpoint did not fill stay on the meta device under low-memory loading
FSDP_META_PARAMS = (
    "RuntimeError: FSDP only supports single device modules but got params on "
    "{device(type='cuda', index=0), device(type='meta')}"
)

# Ray checks an actor's bundle index against the bundles its placement group reserved
RAY_BUNDLE_INDEX = (
    "ValueError: placement group bundle index 6 is invalid. Valid placement group indexes: 0-4"
)

# ATen's device check: the worker opened cuda:1 while Ray showed it one GPU
DEVICE_INDEX_BEYOND_VISIBLE = """(RayWorker pid=39279)     raise DeferredCudaCallError(msg) from e
(RayWorker pid=39279) torch.cuda.DeferredCudaCallError: CUDA call failed lazily at initialization with error: device >= 0 && device < num_gpus INTERNAL ASSERT FAILED at "../aten/src/ATen/cuda/CUDAContext.cpp":49, please report a bug to PyTorch. device=1, num_gpus=1"""

CASES = [
    ("zero3-empty-weight-in-lora-merge", ZERO3_EMPTY_WEIGHT, "S07", "R14"),
    ("zero3-empty-weight-in-embedding", ZERO3_EMBEDDING, "S07", "R14"),
    ("streaming-local-dir", STREAMING_LOCAL_DIR, "S08", "R27"),
    ("accelerate-dispatch", ACCELERATE_DISPATCH, "S08", "R14"),
    ("vllm-pipeline-parallel-engine-mode", VLLM_PP_MULTIPROCESSING, "S09", "R13"),
    ("vllm-architecture-not-registered", VLLM_ARCHITECTURE, "S06", "R15"),
    ("fsdp-integer-params", FSDP_INTEGER_PARAMS, "S09", "R15"),
    ("fsdp-params-on-meta", FSDP_META_PARAMS, "S06", "R20"),
    ("ray-bundle-index", RAY_BUNDLE_INDEX, "S05", "R12"),
    ("device-index-beyond-visible", DEVICE_INDEX_BEYOND_VISIBLE, "S13", "R10"),
]


@pytest.mark.parametrize(
    ("text", "symptom", "cause"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_code_path_of_the_message_decides_its_symptom_and_cause(
    text: str, symptom: str, cause: str
) -> None:
    d = explained(text, "--no-embed")
    assert_top(d, "symptoms", symptom)
    assert_top(d, "root_causes", cause)


def test_a_training_loop_that_stops_on_an_infinite_loss_is_a_nan_not_a_hang() -> None:
    d = explained(LOSS_INF_THEN_EXIT, "--no-embed")
    assert d["symptoms"][0]["id"] == "S19", d["summary"]


def test_a_collate_function_that_cannot_join_samples_is_told_to_pad_them() -> None:
    d = explained(COLLATE_CAT, "--no-embed")
    assert d["symptoms"][0]["id"] == "S08", d["summary"]
    first = d["fix_patterns"][0]["actions"][0]
    assert "pad them in the `collate_fn`" in first, first


def test_torchrun_names_the_word_it_read_as_the_process_count() -> None:
    d = explained(TORCHRUN_NPROC, "--no-embed")
    assert d["symptoms"][0]["id"] == "S05" and d["root_causes"][0]["id"] == "R06", d["summary"]
    first = d["fix_patterns"][0]["actions"][0]
    assert "--nnodes=2 was read as the process count" in first, first


def test_a_quantized_weight_split_over_too_many_ranks_is_the_parallel_degree() -> None:
    d = explained(QUANTIZED_TP, "--no-embed")
    # a shape made by the partitioning, or the layout refused up front: not a step's exception
    assert d["symptoms"][0]["id"] in {"S07", "S09"}, d["summary"]
    assert d["root_causes"][0]["id"] == "R12", d["summary"]
