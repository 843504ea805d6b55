# ruff: noqa: E501 (pasted tracebacks and log lines are as long as the libraries made them)
"""The check a core library makes names the mechanism (issue 21): Ray's raylet losing a worker's
connection is a process that died (a signal or a crash), not settled host memory; Ray's object
store full of referenced objects is host memory; a runtime env Ray could not build is the job's
dependencies; vLLM's Ray executor with no GPU worker on the driver's node is the launch;
Horovod's coordinator refusing requests that differ across ranks is the ranks' collectives, and
Horovod used before hvd.init() is the script; datasets taking its local cache for a remote
filesystem is an fsspec newer than the datasets release, data files with different columns and a
JSON file that does not parse are the data; a DataLoader worker that cannot resize its shared
batch is samples of different shapes; a batch the tokenizer cannot make a tensor of is features
left unpadded, and a collator without input_ids is the columns it was given; vLLM finding less
free memory than its share at start-up is GPU memory, a prompt longer than the engine's context
is the request; PEFT refusing to merge into a quantized base is the merge call; an optimizer
state saved for other parameters is the checkpoint's layout; xformers built for another torch is
the releases; TRL's trainer finding no vLLM server is the launch; Lightning's EarlyStopping and
ModelCheckpoint watching a metric never logged is the callbacks' set-up; torch.compile hitting
its recompile limit is a slow, recompiling function; a bare TORCH_CHECK on is_sm80/is_sm90 is
the GPU; a gated Hub repository is this process's credentials; a generation config transformers
refuses to save is that config's contradicting settings. Each is read through `triage explain`."""

from __future__ import annotations

import pytest

from tests.cli_runs import assert_the_check_decides, assert_the_check_names, explained

RAY_WORKER_CONNECTION_EOF = """(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker. RayTask ID: ffffffffffffffff0d32bcb41d5677999734e27101000000 Worker ID: 5c3fcbef4daf379d364d76f1997500121ca7f44ebf0bf018bd326739 Node ID: f3f4cb95f16e75a2ce9e15f0339bf3db6efce0a726e0e3edae85e2e3 Worker IP address: 172.16.103.199 Worker port: 32769 Worker PID: 2584 Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors."""

RAY_OBJECT_STORE_FULL = """Traceback (most recent call last):
  File "/home/user/rollout.py", line 77, in <module>
    refs.append(ray.put(batch))
  File "/opt/conda/lib/python3.10/site-packages/ray/_private/auto_init_hook.py", line 21, in auto_init_wrapper
    return fn(*args, **kwargs)
  File "/opt/conda/lib/python3.10/site-packages/ray/_private/worker.py", line 2837, in put
    object_ref = worker.put_object(value, owner_address=serialize_owner_address)
ray.exceptions.ObjectStoreFullError: Failed to put object ffffffffffffffffffffffffffffffffffffffff0100000001000000 in object store because it is full. Object size is 4294967296 bytes.
The local object store is full of objects that are still in scope and cannot be evicted. Tip: Use the `ray memory` command to list active objects in the cluster."""

RAY_RUNTIME_ENV_NOT_BUILT = """ray.exceptions.RuntimeEnvSetupError: Failed to set up runtime environment.
Could not create the actor because its associated runtime env failed to be created.
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/ray/_private/runtime_env/agent/runtime_env_agent.py", line 383, in _create_runtime_env_with_retry
    runtime_env_context = await asyncio.wait_for(
ray._private.runtime_env.utils.SubprocessCalledProcessError: Run cmd[9] failed with the following details.
Command '['/tmp/ray/session_latest/runtime_resources/pip/3f2a/virtualenv/bin/python', '-m', 'pip', 'install', '--disable-pip-version-check', '--no-cache-dir', '-r', '/tmp/ray/session_latest/runtime_resources/pip/3f2a/ray_runtime_env_internal_pip_requirements.txt']' returned non-zero exit status 1.
Last 50 lines of stdout:
    ERROR: Could not find a version that satisfies the requirement flash-attn==2.9.9 (from versions: none)"""

HOROVOD_SHAPES_DIFFER = """Traceback (most recent call last):
  File "train_hvd.py", line 141, in <module>
    val_loss = metric_average(val_loss, 'avg_loss')
  File "train_hvd.py", line 95, in metric_average
    avg_tensor = hvd.allreduce(tensor, name=name)
  File "/usr/local/lib/python3.8/dist-packages/horovod/torch/mpi_ops.py", line 316, in allreduce
    return synchronize(handle)
  File "/usr/local/lib/python3.8/dist-packages/horovod/torch/mpi_ops.py", line 994, in synchronize
    raise HorovodInternalError(e)
horovod.common.exceptions.HorovodInternalError: Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [64], but another rank sent a tensor of shape [40]."""

DATASETS_LOCAL_CACHE_TAKEN_FOR_REMOTE = """Traceback (most recent call last):
  File "/workspace/train.py", line 41, in <module>
    ds = load_dataset("json", data_files="data/train.jsonl")
  File "/usr/local/lib/python3.10/dist-packages/datasets/load.py", line 2152, in load_dataset
    ds = builder_instance.as_dataset(split=split, verification_mode=verification_mode, in_memory=keep_in_memory)
  File "/usr/local/lib/python3.10/dist-packages/datasets/builder.py", line 1173, in as_dataset
    raise NotImplementedError(f"Loading a dataset cached in a {type(self._fs).__name__} is not supported.")
NotImplementedError: Loading a dataset cached in a LocalFileSystem is not supported."""

DATASETS_FILES_WITH_DIFFERENT_COLUMNS = """Generating train split: 51760 examples [00:01, 30145.52 examples/s]
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/datasets/builder.py", line 1870, in _prepare_split_single
    writer.write_table(table)
  File "/usr/local/lib/python3.10/dist-packages/datasets/arrow_writer.py", line 622, in write_table
    pa_table = table_cast(pa_table, self._schema)
  File "/usr/local/lib/python3.10/dist-packages/datasets/table.py", line 2292, in table_cast
    return cast_table_to_schema(table, schema)
  File "/usr/local/lib/python3.10/dist-packages/datasets/table.py", line 2240, in cast_table_to_schema
    raise CastError(
datasets.table.CastError: Couldn't cast
instruction: string
input: string
output: string
history: list<item: string>
  child 0, item: string
to
{'instruction': Value(dtype='string', id=None), 'input': Value(dtype='string', id=None), 'output': Value(dtype='string', id=None)}
because column names don't match"""

DATASETS_JSON_NOT_PARSED = """ERROR:datasets.packaged_modules.json.json:Failed to load JSON from file '/data/sft/train.json' with error <class 'pyarrow.lib.ArrowInvalid'>: JSON parse error: Missing a comma or '}' after an object member. in row 312
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/datasets/packaged_modules/json/json.py", line 137, in _generate_tables
    pa_table = paj.read_json(
  File "pyarrow/_json.pyx", line 308, in pyarrow._json.read_json
  File "pyarrow/error.pxi", line 92, in pyarrow.lib.check_status
pyarrow.lib.ArrowInvalid: JSON parse error: Missing a comma or '}' after an object member. in row 312"""

VLLM_FREE_MEMORY_BELOW_SHARE = """(EngineCore_DP0 pid=2317) ERROR 09-12 10:02:11 [core.py:718] EngineCore failed to start.
(EngineCore_DP0 pid=2317) ERROR 09-12 10:02:11 [core.py:718] Traceback (most recent call last):
(EngineCore_DP0 pid=2317) ERROR 09-12 10:02:11 [core.py:718]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 182, in init_device
(EngineCore_DP0 pid=2317) ERROR 09-12 10:02:11 [core.py:718]     self.requested_memory = request_memory(init_snapshot, self.cache_config)
(EngineCore_DP0 pid=2317) ERROR 09-12 10:02:11 [core.py:718]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/utils.py", line 301, in request_memory
(EngineCore_DP0 pid=2317) ERROR 09-12 10:02:11 [core.py:718]     raise ValueError(
(EngineCore_DP0 pid=2317) ERROR 09-12 10:02:11 [core.py:718] ValueError: Free memory on device cuda:0 (30.1/79.19 GiB) on startup is less than desired GPU memory utilization (0.85, 67.31 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."""

VLLM_PROMPT_LONGER_THAN_CONTEXT = """Traceback (most recent call last):
  File "/workspace/eval.py", line 58, in <module>
    outputs = llm.generate(prompts, sampling_params)
  File "/usr/local/lib/python3.10/dist-packages/vllm/entrypoints/llm.py", line 388, in generate
    self._validate_and_add_requests(
  File "/usr/local/lib/python3.10/dist-packages/vllm/v1/engine/input_processor.py", line 470, in _validate_prompt_len
    raise VLLMValidationError(
vllm.exceptions.VLLMValidationError: The decoder prompt (length 9000) is longer than the maximum model length of 8192. Make sure that `max_model_len` is no smaller than the number of text tokens."""

DYNAMO_RECOMPILE_LIMIT = """W1203 10:12:44.112000 2211 torch/_dynamo/convert_frame.py:1016] [0/8] torch._dynamo hit config.recompile_limit (8)
W1203 10:12:44.112000 2211 torch/_dynamo/convert_frame.py:1016] [0/8]    function: 'forward' (/workspace/model.py:120)
W1203 10:12:44.112000 2211 torch/_dynamo/convert_frame.py:1016] [0/8]    last reason: 0/7: tensor 'L['input_ids']' size mismatch at index 1. expected 384, actual 512
W1203 10:12:44.112000 2211 torch/_dynamo/convert_frame.py:1016] [0/8] To log all recompilation reasons, use TORCH_LOGS="recompiles".
step 120 | 3.41 s/it"""

HF_GATED_REPO = """Traceback (most recent call last):
  File "/workspace/finetune.py", line 22, in <module>
    model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
  File "/usr/local/lib/python3.10/dist-packages/transformers/utils/hub.py", line 416, in cached_file
    raise EnvironmentError(
OSError: You are trying to access a gated repo.
Make sure to have access to it at https://huggingface.co/meta-llama/Llama-2-7b-hf.
401 Client Error. (Request ID: Root=1-65a1b2c3-4d5e6f)
Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-2-7b-hf/resolve/main/config.json.
Access to model meta-llama/Llama-2-7b-hf is restricted. You must be authenticated to access it."""

PEFT_MERGE_INTO_GPTQ_BASE = """Traceback (most recent call last):
  File "/workspace/merge_adapter.py", line 19, in <module>
    merged = model.merge_and_unload()
  File "/usr/local/lib/python3.10/dist-packages/peft/tuners/lora/model.py", line 938, in merge_and_unload
    return self._unload_and_optionally_merge(
  File "/usr/local/lib/python3.10/dist-packages/peft/tuners/lora/model.py", line 552, in _unload_and_optionally_merge
    self._check_merge_allowed()
  File "/usr/local/lib/python3.10/dist-packages/peft/tuners/lora/model.py", line 530, in _check_merge_allowed
    raise ValueError("Cannot merge LORA layers when the model is gptq quantized")
ValueError: Cannot merge LORA layers when the model is gptq quantized"""

DATALOADER_WORKER_COLLATE_RESIZE = """Traceback (most recent call last):
  File "/home/me/train.py", line 203, in <module>
    for step, batch in enumerate(train_loader):
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py", line 1344, in _next_data
    return self._process_data(data)
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py", line 1370, in _process_data
    data.reraise()
  File "/usr/local/lib/python3.10/dist-packages/torch/_utils.py", line 706, in reraise
    raise exception
RuntimeError: Caught RuntimeError in DataLoader worker process 0.
Original Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/_utils/worker.py", line 309, in _worker_loop
    data = fetcher.fetch(index)  # type: ignore[possibly-undefined]
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/_utils/fetch.py", line 55, in fetch
    return self.collate_fn(data)
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/_utils/collate.py", line 277, in default_collate
    return collate(batch, collate_fn_map=default_collate_fn_map)
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/_utils/collate.py", line 163, in collate_tensor_fn
    return torch.stack(batch, 0, out=out)
RuntimeError: Trying to resize storage that is not resizable"""

HF_LABELS_NOT_PADDED = """Traceback (most recent call last):
  File "/workspace/sft.py", line 88, in <module>
    trainer.train()
  File "/usr/local/lib/python3.10/dist-packages/transformers/data/data_collator.py", line 271, in __call__
    batch = pad_without_fast_tokenizer_warning(
  File "/usr/local/lib/python3.10/dist-packages/transformers/tokenization_utils_base.py", line 775, in convert_to_tensors
    raise ValueError(
ValueError: Unable to create tensor, you should probably activate truncation and/or padding with 'padding=True' 'truncation=True' to have batched tensors with the same length. Perhaps your features (`labels` in this case) have excessive nesting (inputs type `list` where type `int` is expected)."""

HF_COLLATOR_WITHOUT_INPUT_IDS = """Traceback (most recent call last):
  File "/workspace/classify.py", line 74, in <module>
    trainer.train()
  File "/usr/local/lib/python3.10/dist-packages/transformers/data/data_collator.py", line 271, in __call__
    batch = pad_without_fast_tokenizer_warning(
  File "/usr/local/lib/python3.10/dist-packages/transformers/tokenization_utils_base.py", line 3304, in pad
    raise ValueError(
ValueError: You should supply an encoding or a list of encodings to this method that includes input_ids, but you provided ['label']"""

LIGHTNING_EARLY_STOPPING_METRIC_NOT_LOGGED = """Epoch 0: 100%|##########| 782/782 [00:41<00:00, 18.93it/s, v_num=3, train_loss_step=0.412]
Traceback (most recent call last):
  File "/home/me/train_pl.py", line 66, in <module>
    trainer.fit(model, datamodule=dm)
  File "/opt/conda/lib/python3.11/site-packages/lightning/pytorch/callbacks/early_stopping.py", line 223, in _run_early_stopping_check
    if trainer.fast_dev_run or not self._validate_condition_metric(  # disable early_stopping with fast_dev_run
  File "/opt/conda/lib/python3.11/site-packages/lightning/pytorch/callbacks/early_stopping.py", line 163, in _validate_condition_metric
    raise RuntimeError(error_msg)
RuntimeError: Early stopping conditioned on metric `val_loss` which is not available. Pass in or modify your `EarlyStopping` callback to use any of the following: `train_loss`, `train_loss_step`, `train_loss_epoch`"""

LIGHTNING_CHECKPOINT_MONITOR_NOT_LOGGED = """  File "/opt/conda/lib/python3.11/site-packages/lightning/pytorch/callbacks/model_checkpoint.py", line 383, in _save_topk_checkpoint
    raise MisconfigurationException(m)
lightning_fabric.utilities.exceptions.MisconfigurationException: `ModelCheckpoint(monitor='val_acc')` could not find the monitored key in the returned metrics: ['train_loss', 'epoch', 'step']. HINT: Did you call `log('val_acc', value)` in the `LightningModule`?"""

HOROVOD_USED_BEFORE_INIT = """Traceback (most recent call last):
  File "train_hvd.py", line 31, in <module>
    torch.cuda.set_device(hvd.local_rank())
  File "/usr/local/lib/python3.8/dist-packages/horovod/common/basics.py", line 184, in local_rank
    raise ValueError('Horovod has not been initialized; use hvd.init().')
ValueError: Horovod has not been initialized; use hvd.init()."""

VLLM_RAY_NO_GPU_ON_DRIVER_NODE = """INFO 02-09 10:53:54 ray_utils.py:260] Connecting to existing Ray cluster at address: 10.0.0.11:6379...
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/vllm/executor/ray_distributed_executor.py", line 258, in _init_workers_ray
    raise ValueError(
ValueError: Ray does not allocate any GPUs on the driver node.Driver IP: 172.17.0.2, worker IPs: ['10.0.0.11', '10.0.0.11', '10.0.0.12', '10.0.0.12'].Consider adjusting the Ray placement group or running the driver on a GPU node."""

OPTIMIZER_STATE_FOR_OTHER_PARAMETERS = """Traceback (most recent call last):
  File "/workspace/train.py", line 310, in <module>
    optimizer.load_state_dict(ckpt["optimizer"])
  File "/usr/local/lib/python3.10/dist-packages/torch/_compile.py", line 32, in inner
    return disable_fn(*args, **kwargs)
  File "/usr/local/lib/python3.10/dist-packages/torch/optim/optimizer.py", line 867, in load_state_dict
    raise ValueError(
ValueError: loaded state dict contains a parameter group that doesn't match the size of optimizer's group"""

XFORMERS_BUILT_FOR_ANOTHER_TORCH = """WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:
    PyTorch 2.6.0+cu124 with CUDA 1201 (you have 2.5.1+cu124)
    Python  3.12.9 (you have 3.12.9)
  Please reinstall xformers (see https://github.com/facebookresearch/xformers#installing-xformers)
  Memory-efficient attention, SwiGLU, sparse and more won't be available.
  Set XFORMERS_MORE_DETAILS=1 for more details"""

TRL_VLLM_SERVER_UNREACHABLE = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/grpo.py", line 91, in <module>
[rank0]:     trainer = GRPOTrainer(
[rank0]:   File "/usr/local/lib/python3.11/dist-packages/trl/extras/vllm_client.py", line 122, in check_server_health
[rank0]:     raise ConnectionError(
[rank0]: ConnectionError: The vLLM server can't be reached at 0.0.0.0:8000 after 240 seconds. Make sure the server is running by running `trl vllm-serve`."""

FLASH_BACKWARD_ARCH_CHECK = """  File "/usr/local/lib/python3.10/dist-packages/torch/autograd/graph.py", line 825, in _engine_run_backward
    return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass
  File "/usr/local/lib/python3.10/dist-packages/flash_attn/flash_attn_interface.py", line 882, in backward
    _wrapped_flash_attn_backward(
RuntimeError: Expected is_sm80 || is_sm90 to be true, but got false.  (Could this error message be improved?  If so, please report an enhancement request to PyTorch.)"""

HF_GENERATION_CONFIG_REFUSED_AT_SAVE = """  File "/usr/local/lib/python3.10/dist-packages/transformers/trainer.py", line 3719, in _save
    self.model.save_pretrained(
  File "/usr/local/lib/python3.10/dist-packages/transformers/modeling_utils.py", line 2793, in save_pretrained
    model_to_save.generation_config.save_pretrained(save_directory)
  File "/usr/local/lib/python3.10/dist-packages/transformers/generation/configuration_utils.py", line 787, in save_pretrained
    raise ValueError(
ValueError: The generation config instance is invalid -- `.validate()` throws warnings and/or exceptions. Fix these issues to save the configuration.

Thrown during validation:
[UserWarning('`do_sample` is set to `False`. However, `temperature` is set to `0.6` -- this flag is only used in sample-based generation modes. You should set `do_sample=True` or unset `temperature`.')]"""

HF_GENERATE_MAX_LENGTH_BELOW_PROMPT = """  File "/workspace/eval_rouge.py", line 64, in <module>
    out = model.generate(**batch)
  File "/usr/local/lib/python3.10/dist-packages/transformers/generation/utils.py", line 2215, in generate
    self._validate_generated_length(generation_config, input_ids_length, has_default_max_length)
  File "/usr/local/lib/python3.10/dist-packages/transformers/generation/utils.py", line 1459, in _validate_generated_length
    raise ValueError(
ValueError: Input length of input_ids is 2048, but `max_length` is set to 20. This can lead to unexpected behavior. You should consider increasing `max_length` or, better yet, setting `max_new_tokens`."""

DATALOADER_SAMPLER_WITH_SHUFFLE = """Traceback (most recent call last):
  File "/home/me/ddp_train.py", line 57, in <module>
    loader = DataLoader(dataset, batch_size=32, shuffle=True, sampler=DistributedSampler(dataset))
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py", line 351, in __init__
    raise ValueError("sampler option is mutually exclusive with shuffle")
ValueError: sampler option is mutually exclusive with shuffle"""

LOSS_TARGET_WITH_A_CLASS_DIMENSION = """Traceback (most recent call last):
  File "/home/me/train_cls.py", line 118, in <module>
    loss = criterion(logits, labels)
  File "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/loss.py", line 1295, in forward
    return F.cross_entropy(
  File "/usr/local/lib/python3.10/dist-packages/torch/nn/functional.py", line 3494, in cross_entropy
    return torch._C._nn.cross_entropy_loss(
RuntimeError: 0D or 1D target tensor expected, multi-target not supported"""

CUDA_IPC_KERNEL_WITHOUT_PIDFD_GETFD = """(MegatronPolicyWorkerBase pid=51155) Traceback (most recent call last):
(MegatronPolicyWorkerBase pid=51155)   File "/usr/local/lib/python3.12/dist-packages/torch/multiprocessing/reductions.py", line 181, in rebuild_cuda_tensor
(MegatronPolicyWorkerBase pid=51155)     storage = storage_cls._new_shared_cuda(
(MegatronPolicyWorkerBase pid=51155) RuntimeError: The kernel on this machine does not support the pidfd_getfd syscall needed to use IPC for CUDA tensors when expandable_segments:True is set. Consider using expandable_segments:False via torch.cuda.memory._set_allocator_settings('expandable_segments:False') for this allocation."""

# (name, paste, top symptom(s), top root cause(s), what the fixes must tell the user); the check
# settles the cause (>= 0.8)
DECIDED = [
    (
        "datasets-local-cache-taken-for-remote",
        DATASETS_LOCAL_CACHE_TAKEN_FOR_REMOTE,
        "S08/S03",
        "R01",
        "upgrade datasets",
    ),
    (
        "datasets-files-with-different-columns",
        DATASETS_FILES_WITH_DIFFERENT_COLUMNS,
        "S08",
        "R27",
        "same columns",
    ),
    ("datasets-json-not-parsed", DATASETS_JSON_NOT_PARSED, "S08", "R27", "JSON Lines"),
    (
        "vllm-free-memory-below-share",
        VLLM_FREE_MEMORY_BELOW_SHARE,
        "S32/S14",
        "R16",
        "lower `gpu_memory_utilization`",
    ),
    (
        "vllm-prompt-longer-than-context",
        VLLM_PROMPT_LONGER_THAN_CONTEXT,
        "S32",
        "R14",
        "truncate or filter them",
    ),
    ("hf-gated-repo", HF_GATED_REPO, "S06", "R06/R14", "export `HF_TOKEN`"),
    (
        "peft-merge-into-gptq-base",
        PEFT_MERGE_INTO_GPTQ_BASE,
        "S30/S09/S18",
        "R14",
        "Merge on an unquantized base",
    ),
    (
        "hf-collator-without-input-ids",
        HF_COLLATOR_WITHOUT_INPUT_IDS,
        "S08/S18",
        "R14",
        "remove_unused_columns=False",
    ),
    (
        "lightning-early-stopping-metric-not-logged",
        LIGHTNING_EARLY_STOPPING_METRIC_NOT_LOGGED,
        "S18/S09",
        "R14",
        "self.log('val_loss'",
    ),
    (
        "lightning-checkpoint-monitor-not-logged",
        LIGHTNING_CHECKPOINT_MONITOR_NOT_LOGGED,
        "S28/S09",
        "R14",
        "exact name",
    ),
    ("horovod-used-before-init", HOROVOD_USED_BEFORE_INIT, "S18/S05", "R14", "`hvd.init()` first"),
    (
        "optimizer-state-for-other-parameters",
        OPTIMIZER_STATE_FOR_OTHER_PARAMETERS,
        "S29",
        "R20",
        "start the optimizer fresh",
    ),
    (
        "xformers-built-for-another-torch",
        XFORMERS_BUILT_FOR_ANOTHER_TORCH,
        "S03/S02",
        "R01",
        "xformers release built for the installed torch",
    ),
    (
        "trl-vllm-server-unreachable",
        TRL_VLLM_SERVER_UNREACHABLE,
        "S05/S10",
        "R06",
        "trl vllm-serve",
    ),
    (
        "hf-generate-max-length-below-prompt",
        HF_GENERATE_MAX_LENGTH_BELOW_PROMPT,
        "S32/S18",
        "R14",
        "max_new_tokens=",
    ),
    (
        "dataloader-sampler-with-shuffle",
        DATALOADER_SAMPLER_WITH_SHUFFLE,
        "S08/S09",
        "R14",
        "sampler.set_epoch(epoch)",
    ),
    ("flash-backward-arch-check", FLASH_BACKWARD_ARCH_CHECK, "S04/S18", "R04", "sdpa_kernel"),
]

# the check names the mechanism and the advice, but leaves room for a second cause (< 0.8 allowed)
NAMED = [
    # named first, stated at 0.79 since the refit on 627 rules (R10, the rank mapping, second)
    (
        "vllm-ray-no-gpu-on-driver-node",
        VLLM_RAY_NO_GPU_ON_DRIVER_NODE,
        "S05/S32",
        "R06",
        "VLLM_HOST_IP",
    ),
    ("ray-object-store-full", RAY_OBJECT_STORE_FULL, "S15", "R17", "--object-store-memory"),
    (
        "ray-runtime-env-not-built",
        RAY_RUNTIME_ENV_NOT_BUILT,
        "S05",
        "R02/R06",
        "runtime_env_setup-*.log",
    ),
    ("horovod-shapes-differ", HOROVOD_SHAPES_DIFFER, "S21", "R08", "drop_last=True"),
    ("dynamo-recompile-limit", DYNAMO_RECOMPILE_LIMIT, "S22", "R24", "mark_dynamic"),
    (
        "dataloader-worker-collate-resize",
        DATALOADER_WORKER_COLLATE_RESIZE,
        "S08",
        "R27/R26",
        "pad_sequence",
    ),
    (
        "hf-generation-config-refused-at-save",
        HF_GENERATION_CONFIG_REFUSED_AT_SAVE,
        "S28",
        "R14/R01",
        "generation_config.do_sample = True",
    ),
    (
        "loss-target-with-a-class-dimension",
        LOSS_TARGET_WITH_A_CLASS_DIMENSION,
        "S18",
        "R26/R27",
        "1-D LongTensor",
    ),
    (
        "cuda-ipc-kernel-without-pidfd-getfd",
        CUDA_IPC_KERNEL_WITHOUT_PIDFD_GETFD,
        "S18/S12",
        "R05/R04",
        "expandable_segments:False",
    ),
    ("hf-labels-not-padded", HF_LABELS_NOT_PADDED, "S08/S18", "R14/R27", "DataCollatorForSeq2Seq"),
]


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "advice"), [pytest.param(*c[1:], id=c[0]) for c in DECIDED]
)
def test_a_core_librarys_check_decides_the_root_cause_and_the_advice(
    text: str, symptom: str, cause: str, advice: str
) -> None:
    assert_the_check_decides(text, symptom, cause, advice)


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "advice"), [pytest.param(*c[1:], id=c[0]) for c in NAMED]
)
def test_a_core_librarys_check_names_the_root_cause_and_the_advice(
    text: str, symptom: str, cause: str, advice: str
) -> None:
    assert_the_check_names(text, symptom, cause, advice)


# Ray's raylet prints this when a worker's socket reaches end of file without the worker having
# said why (node_manager.cc, HandleClientConnectionError); Ray's memory monitor reports its own
# kills as OutOfMemoryError instead. So a process died, and host memory is one cause among
# three: the report must not state it as settled.
def test_a_ray_worker_lost_at_end_of_file_is_a_dead_process_not_settled_host_memory() -> None:
    d = explained(RAY_WORKER_CONNECTION_EOF, "--no-embed")
    assert d["symptoms"][0]["id"] == "S27", d["summary"]
    assert d["root_causes"][0]["score"] < 0.8, d["root_causes"][:2]
    assert "dmesg" in " ".join(a for f in d["fix_patterns"] for a in f["actions"])


RAY_ACTOR_CONSTRUCTOR_RAISED = """ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, ray::WorkerDict.__init__() (pid=3318, ip=10.0.0.4, actor_id=2ab5, repr=<verl.single_controller.ray.base.WorkerDict object at 0x7f>)
  File "/workspace/verl/verl/workers/fsdp_workers.py", line 133, in __init__
    torch.distributed.init_process_group(backend="nccl")
torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to (10.0.0.3, 40213)."""


# Ray builds this ActorDiedError from the RayTaskError of the actor's constructor
# (exceptions.py): the process did not die of a signal or of memory; the constructor raised, and
# the exception it quotes is the failure to read.
def test_a_ray_actor_whose_constructor_raised_is_read_by_that_exception_not_as_a_dead_process() -> (
    None
):
    d = explained(RAY_ACTOR_CONSTRUCTOR_RAISED, "--no-embed")
    assert d["symptoms"][0]["id"] not in ("S15", "S27"), d["summary"]
    assert d["root_causes"][0]["id"] != "R17", d["summary"]


# ---- h34rcd (issue 21): checks made while a model is found, loaded and placed (transformers,
# accelerate, the Hub client), vLLM's start-up memory profile, Ray's object ownership, the
# datasets builder's verification and torchrun's exit barrier, each read through
# `triage explain` as a user pastes it.

HF_MODEL_TYPE_KEYERROR = """Traceback (most recent call last):
  File "/workspace/serve.py", line 14, in <module>
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen1.5-7B-Chat")
  File "/usr/local/lib/python3.10/dist-packages/transformers/models/auto/auto_factory.py", line 441, in from_pretrained
    config, kwargs = AutoConfig.from_pretrained(
  File "/usr/local/lib/python3.10/dist-packages/transformers/models/auto/configuration_auto.py", line 937, in from_pretrained
    config_class = CONFIG_MAPPING[config_dict["model_type"]]
  File "/usr/local/lib/python3.10/dist-packages/transformers/models/auto/configuration_auto.py", line 643, in __getitem__
    raise KeyError(key)
KeyError: 'qwen2'"""

HF_HUB_OFFLINE_NOT_CACHED = """Traceback (most recent call last):
  File "/home/user/train.py", line 30, in <module>
    path = snapshot_download("meta-llama/Llama-2-7b-hf")
  File "/usr/local/lib/python3.10/dist-packages/huggingface_hub/_snapshot_download.py", line 233, in snapshot_download
    raise LocalEntryNotFoundError(
huggingface_hub.utils._errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder for the specified revision on the local disk and outgoing traffic has been disabled. To enable repo look-ups and downloads online, set 'HF_HUB_OFFLINE=0' as environment variable."""

HF_NAME_NEITHER_FOLDER_NOR_REPO = """[rank1]: OSError: checkpoints/sft-llama is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'
[rank1]: If this is a private repository, make sure to pass a token having permission to this repo either by logging in with `huggingface-cli login` or by passing `token=<your_token>`"""

HF_FP16_WITHOUT_CUDA = """Traceback (most recent call last):
  File "run_clm.py", line 612, in <module>
    main()
  File "run_clm.py", line 228, in main
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
  File "/opt/conda/lib/python3.9/site-packages/transformers/hf_argparser.py", line 332, in parse_args_into_dataclasses
    obj = dtype(**inputs)
  File "<string>", line 111, in __init__
  File "/opt/conda/lib/python3.9/site-packages/transformers/training_args.py", line 1259, in __post_init__
    raise ValueError(
ValueError: FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half precision evaluation (`--fp16_full_eval`) can only be used on CUDA devices."""

HF_QUANTIZED_MODEL_MOVED = """Traceback (most recent call last):
  File "/workspace/finetune.py", line 52, in <module>
    model = model.to(device)
  File "/usr/local/lib/python3.10/dist-packages/transformers/modeling_utils.py", line 2460, in to
    raise ValueError(
ValueError: `.to` is not supported for `4-bit` or `8-bit` bitsandbytes models. Please use the model as it is, since the model has already been set to the correct devices and casted to the correct `dtype`."""

HF_4BIT_MOVED_OLD_BITSANDBYTES = """  File "/usr/local/lib/python3.10/dist-packages/transformers/modeling_utils.py", line 3113, in cuda
    raise ValueError(
ValueError: Calling `cuda()` is not supported for `4-bit` quantized models with the installed version of bitsandbytes. The current device is `cuda:0`. If you intended to move the model, please install bitsandbytes >= 0.43.2."""

ACCELERATE_OFFLOADED_MODEL_MOVED = """  File "/home/user/eval.py", line 40, in <module>
    model.to("cuda")
  File "/usr/local/lib/python3.10/dist-packages/accelerate/big_modeling.py", line 455, in wrapper
    raise RuntimeError("You can't move a model that has some modules offloaded to cpu or disk.")
RuntimeError: You can't move a model that has some modules offloaded to cpu or disk."""

ACCELERATE_LOADED_TENSOR_SHAPE_DIFFERS = """  File "/usr/local/lib/python3.10/dist-packages/transformers/modeling_utils.py", line 3531, in _load_pretrained_model
    new_error_msgs, offload_index, state_dict_index = _load_state_dict_into_meta_model(
  File "/usr/local/lib/python3.10/dist-packages/transformers/modeling_utils.py", line 736, in _load_state_dict_into_meta_model
    set_module_tensor_to_device(model, param_name, param_device, **set_module_kwargs)
  File "/usr/local/lib/python3.10/dist-packages/accelerate/utils/modeling.py", line 345, in set_module_tensor_to_device
    raise ValueError(
ValueError: Trying to set a tensor of shape torch.Size([32000, 4096]) in "weight" (which has shape torch.Size([32001, 4096])), this look incorrect."""

HF_LOAD_BEST_SCHEDULES_DIFFER = """ValueError: --load_best_model_at_end requires the save and eval strategy to match, but found
- Evaluation strategy: IntervalStrategy.NO
- Save strategy: IntervalStrategy.STEPS"""

VLLM_MEMORY_PROFILE_SAW_MEMORY_FREED = """(EngineCore_DP0 pid=418) ERROR 01-29 15:38:21 [core.py:946]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 333, in determine_available_memory
(EngineCore_DP0 pid=418) ERROR 01-29 15:38:21 [core.py:946]     assert self.init_snapshot.free_memory > free_gpu_memory, (
(EngineCore_DP0 pid=418) ERROR 01-29 15:38:21 [core.py:946] AssertionError: Error in memory profiling. Initial free memory 30.3 GiB, current free memory 34.9 GiB. This happens when other processes sharing the same container release GPU memory while vLLM is profiling during initialization. To fix this, ensure consistent GPU memory allocation or isolate vLLM in its own container."""

DATASETS_SPLITS_DIFFER_FROM_RECORDED = """  File "/usr/local/lib/python3.10/dist-packages/datasets/builder.py", line 1011, in _download_and_prepare
    verify_splits(self.info.splits, split_dict)
  File "/usr/local/lib/python3.10/dist-packages/datasets/utils/info_utils.py", line 100, in verify_splits
    raise NonMatchingSplitsSizesError(str(bad_splits))
datasets.utils.info_utils.NonMatchingSplitsSizesError: [{'expected': SplitInfo(name='train', num_bytes=40421436, num_examples=52002, shard_lengths=None, dataset_name=None), 'recorded': SplitInfo(name='train', num_bytes=24372113, num_examples=31323, shard_lengths=None, dataset_name='alpaca')}]"""

VLLM_QUANTIZATION_REFUSES_DTYPE = """  File "/usr/local/lib/python3.10/dist-packages/vllm/engine/arg_utils.py", line 1126, in create_engine_config
    config = VllmConfig(
  File "/usr/local/lib/python3.10/dist-packages/vllm/config.py", line 3218, in _get_quantization_config
    raise ValueError(
ValueError: torch.bfloat16 is not supported for quantization method awq. Supported dtypes: [torch.float16]"""

VLLM_EXECUTOR_WORKER_DIED = """(EngineCore_DP0 pid=85932) ERROR 01-26 10:28:26 [multiproc_executor.py:231] Worker proc VllmWorker-0 died unexpectedly, shutting down executor.
(EngineCore_DP0 pid=85932) Process EngineCore_DP0:
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause."""

HF_REMOTE_CODE_NOT_TRUSTED = """  File "/usr/local/lib/python3.10/dist-packages/transformers/models/auto/configuration_auto.py", line 1017, in from_pretrained
    trust_remote_code = resolve_trust_remote_code(
  File "/usr/local/lib/python3.10/dist-packages/transformers/dynamic_module_utils.py", line 678, in resolve_trust_remote_code
    raise ValueError(
ValueError: Loading THUDM/chatglm3-6b requires you to execute the configuration file in that repo on your local machine. Make sure you have read the code there to avoid malicious use, then set the option `trust_remote_code=True` to remove this error."""

HF_ATTENTION_NOT_IN_MODEL = """  File "/usr/local/lib/python3.10/dist-packages/transformers/modeling_utils.py", line 1737, in _check_and_enable_flash_attn_2
    raise ValueError(
ValueError: T5ForConditionalGeneration does not support Flash Attention 2.0 yet. Please request to add support where the model is hosted, on its model hub page: https://huggingface.co/t5-base/discussions/new or in the Transformers GitHub repo: https://github.com/huggingface/transformers/issues/new"""

HF_FLASH_ATTENTION_RIGHT_PADDED = """  File "/usr/local/lib/python3.10/dist-packages/transformers/models/qwen2/modeling_qwen2.py", line 1052, in _update_causal_mask
    raise ValueError(
ValueError: You are attempting to perform batched generation with padding_side='right' this may lead to unexpected behaviour for Flash Attention version of Qwen2. Make sure to  call `tokenizer.padding_side  = 'left'` before tokenizing the input. """

LIGHTNING_ACCELERATOR_NOT_AVAILABLE = """  File "/opt/conda/lib/python3.10/site-packages/lightning/pytorch/trainer/connectors/accelerator_connector.py", line 369, in _check_config_and_set_final_flags
    raise RuntimeError(
RuntimeError: `CUDAAccelerator` can not run on your system since the accelerator is not available. The following accelerator(s) is available and can be passed into `accelerator` argument of `Trainer`: ['cpu']."""

BNB_OPTIMIZER_WITHOUT_GPU_LIBRARY = """/usr/local/lib/python3.10/dist-packages/bitsandbytes/cextension.py:34: UserWarning: The installed version of bitsandbytes was compiled without GPU support. 8-bit optimizers, 8-bit multiplication, and GPU quantization are unavailable.
  warn("The installed version of bitsandbytes was compiled without GPU support. "
'NoneType' object has no attribute 'cadam32bit_grad_fp32'"""

SYNCBN_INPUT_NOT_ON_GPU = """  File "/home/user/train.py", line 88, in <module>
    out = model(images)
  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/batchnorm.py", line 852, in forward
    raise ValueError(
ValueError: SyncBatchNorm expected input tensor to be on GPU or XPU or privateuseone"""

ACCELERATE_SETS_LOCAL_RANK_DEVICE_CUT = """[rank5]: Traceback (most recent call last):
[rank5]:   File "/home/user/run_sft.py", line 212, in <module>
[rank5]:     main()
[rank5]:   File "/home/user/run_sft.py", line 98, in main
[rank5]:     model_args, data_args, training_args = parser.parse_args_into_dataclasses()
[rank5]:   File "/usr/local/lib/python3.10/dist-packages/transformers/hf_argparser.py", line 348, in parse_args_into_dataclasses
[rank5]:     obj = dtype(**inputs)
[rank5]:   File "/usr/local/lib/python3.10/dist-packages/transformers/training_args.py", line 1764, in __post_init__
[rank5]:     and (self.device.type == "cpu" and not is_torch_greater_or_equal_than_2_3)
[rank5]:   File "/usr/local/lib/python3.10/dist-packages/transformers/training_args.py", line 2272, in device
[rank5]:     return self._setup_devices
[rank5]:   File "/usr/local/lib/python3.10/dist-packages/transformers/training_args.py", line 2199, in _setup_devices
[rank5]:     self.distributed_state = PartialState(**accelerator_state_kwargs)
[rank5]:   File "/usr/local/lib/python3.10/dist-packages/accelerate/state.py", line 280, in __init__
[rank5]:     self.set_device()
[rank5]:   File "/usr/local/lib/python3.10/dist-packages/accelerate/state.py", line 790, in set_device
[rank5]:     torch.cuda.set_device(self.device)"""

HF_TRAINER_ACCELERATOR_BUILD_CUT = """Traceback (most recent call last):
  File "/home/user/finetune/train_dpo.py", line 133, in <module>
    trainer = Trainer(
  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 402, in __init__
    self.create_accelerator_and_postprocess()
  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 4535, in create_accelerator_and_postprocess"""

H34_DECIDED = [
    (
        "accelerate-sets-local-rank-device-cut",
        ACCELERATE_SETS_LOCAL_RANK_DEVICE_CUT,
        "S13",
        "R06/R10",
        "--num_processes",
    ),
    ("syncbn-input-not-on-gpu", SYNCBN_INPUT_NOT_ON_GPU, "S18", "R14", "convert_sync_batchnorm"),
    (
        "hf-remote-code-not-trusted",
        HF_REMOTE_CODE_NOT_TRUSTED,
        "S06",
        "R14",
        "trust_remote_code=True",
    ),
    (
        "hf-attention-not-in-model",
        HF_ATTENTION_NOT_IN_MODEL,
        "S06",
        "R15",
        'attn_implementation="eager"',
    ),
    (
        "hf-flash-attention-right-padded",
        HF_FLASH_ATTENTION_RIGHT_PADDED,
        "S18/S32",
        "R14",
        'padding_side = "left"',
    ),
    (
        "vllm-quantization-refuses-dtype",
        VLLM_QUANTIZATION_REFUSES_DTYPE,
        "S09/S06",
        "R14",
        "--dtype float16",
    ),
    (
        "hf-model-type-keyerror-before-the-guard",
        HF_MODEL_TYPE_KEYERROR,
        "S06",
        "R01",
        "transformers release that has `qwen2`",
    ),
    ("hf-quantized-model-moved", HF_QUANTIZED_MODEL_MOVED, "S06", "R14", "Drop the `.to(...)`"),
    (
        "hf-4bit-moved-old-bitsandbytes",
        HF_4BIT_MOVED_OLD_BITSANDBYTES,
        "S06/S03",
        "R01",
        "bitsandbytes to 0.43.2",
    ),
    (
        "accelerate-loaded-tensor-shape-differs",
        ACCELERATE_LOADED_TENSOR_SHAPE_DIFFERS,
        "S06/S29",
        "R20",
        "resize_token_embeddings",
    ),
    ("hf-load-best-schedules-differ", HF_LOAD_BEST_SCHEDULES_DIFFER, "S09", "R14", "eval_strategy"),
    (
        "datasets-splits-differ-from-recorded",
        DATASETS_SPLITS_DIFFER_FROM_RECORDED,
        "S08",
        "R27",
        "force_redownload",
    ),
]

H34_NAMED = [
    (
        "hf-trainer-accelerator-build-cut",
        HF_TRAINER_ACCELERATOR_BUILD_CUT,
        "S03",
        "R01",
        "accelerate release this transformers asks for",
    ),
    (
        "bnb-optimizer-without-gpu-library",
        BNB_OPTIMIZER_WITHOUT_GPU_LIBRARY,
        "S04/S02",
        "R02/R01",
        "python -m bitsandbytes",
    ),
    (
        "lightning-accelerator-not-available",
        LIGHTNING_ACCELERATOR_NOT_AVAILABLE,
        "S04",
        "R02/R06",
        "CUDA wheel of torch",
    ),
    (
        "hf-hub-offline-not-cached",
        HF_HUB_OFFLINE_NOT_CACHED,
        "S06",
        "R06/R07",
        "huggingface-cli download",
    ),
    (
        "hf-name-neither-folder-nor-repo",
        HF_NAME_NEITHER_FOLDER_NOR_REPO,
        "S06",
        "R26/R06",
        "exact Hub repository id",
    ),
    ("hf-fp16-without-cuda", HF_FP16_WITHOUT_CUDA, "S04", "R02/R06", "CUDA wheel of torch"),
    (
        "accelerate-offloaded-model-moved",
        ACCELERATE_OFFLOADED_MODEL_MOVED,
        "S06",
        "R14",
        "max_memory",
    ),
    (
        "vllm-memory-profile-saw-memory-freed",
        VLLM_MEMORY_PROFILE_SAW_MEMORY_FREED,
        "S32",
        "R22/R16/R18",
        "one after another",
    ),
]


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "advice"), [pytest.param(*c[1:], id=c[0]) for c in H34_DECIDED]
)
def test_a_loading_or_data_check_decides_the_root_cause_and_the_advice(
    text: str, symptom: str, cause: str, advice: str
) -> None:
    assert_the_check_decides(text, symptom, cause, advice)


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "advice"), [pytest.param(*c[1:], id=c[0]) for c in H34_NAMED]
)
def test_a_loading_or_start_up_check_names_the_root_cause_and_the_advice(
    text: str, symptom: str, cause: str, advice: str
) -> None:
    assert_the_check_names(text, symptom, cause, advice)


RAY_OBJECT_OWNER_DIED = """Traceback (most recent call last):
  File "/workspace/ppo.py", line 210, in <module>
    batch = ray.get(rollout_refs)
  File "/opt/conda/lib/python3.10/site-packages/ray/_private/worker.py", line 2753, in get
    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)
  File "/opt/conda/lib/python3.10/site-packages/ray/_private/worker.py", line 906, in get_objects
    raise value
ray.exceptions.OwnerDiedError: Failed to retrieve object 00ffffffffffffffffffffffffffffffffffffff0100000001000000. To see information about where this ObjectRef was created in Python, set the environment variable RAY_record_ref_creation_sites=1 during `ray start` and `ray.init()`.

The object's owner has exited. This is the Python worker that first created the ObjectRef via `.remote()` or `ray.put()`. Check cluster logs (`/tmp/ray/session_latest/logs/*01000000ffffffffffffffffffffffffffffffffffffffffffffffff*` at IP address 10.0.0.4) for more information about the Python worker failure."""


# vLLM's executor logs a worker process's exit and shuts down (multiproc_executor.py
# monitor_workers): a process died, and what it printed before, or the node's kernel log,
# says why; the report names the death and settles no cause.
def test_a_vllm_worker_that_died_under_the_executor_is_a_dead_process_with_no_settled_cause() -> (
    None
):
    d = explained(VLLM_EXECUTOR_WORKER_DIED, "--no-embed")
    assert d["symptoms"][0]["id"] == "S27", d["summary"]
    assert d["root_causes"][0]["score"] < 0.8, d["root_causes"][:2]
    assert "dmesg" in " ".join(a for f in d["fix_patterns"] for a in f["actions"])


# Ray raises OwnerDiedError in the getter when the process that owned the object is gone
# (exceptions.py): the getter did nothing wrong, a process died and its own log says why, so
# the report names a dead process, points at that log, and settles no cause.
def test_a_ray_object_whose_owner_exited_is_a_dead_process_with_its_cause_in_the_owners_log() -> (
    None
):
    d = explained(RAY_OBJECT_OWNER_DIED, "--no-embed")
    assert d["symptoms"][0]["id"] == "S27", d["summary"]
    assert d["root_causes"][0]["score"] < 0.8, d["root_causes"][:2]
    assert "dmesg" in " ".join(a for f in d["fix_patterns"] for a in f["actions"])


TORCHRUN_EXIT_BARRIER_STORE_TIMEOUT = """[2024-03-01 10:00:00,000] torch.distributed.elastic.agent.server.api: [ERROR] Error waiting on exit barrier. Elapsed: 300.0830419063568 seconds
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/elastic/agent/server/api.py", line 920, in _exit_barrier
    store_util.barrier(
  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/elastic/utils/store.py", line 78, in barrier
    synchronize(store, data, rank, world_size, key_prefix, barrier_timeout)
torch.distributed.DistStoreError: Socket Timeout"""


# torchrun's agent waits at its exit barrier once this node's workers are done
# (api.py _exit_barrier); the store timing out there is the other nodes not finishing, at the
# end of the job, not a rendezvous that failed at start-up: the advice sends the user to the
# other nodes' logs, not to the launch's node counts.
def test_a_store_timeout_at_torchruns_exit_barrier_is_read_as_the_other_nodes_not_finishing() -> (
    None
):
    d = explained(TORCHRUN_EXIT_BARRIER_STORE_TIMEOUT, "--no-embed")
    told = " ".join(a for f in d["fix_patterns"] for a in f["actions"])
    assert "exit barrier" in told, told
    assert "same `--nnodes`" not in told, told
