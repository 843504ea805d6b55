# ruff: noqa: E501 (pasted tracebacks and log lines are as long as the libraries made them)
"""A mechanism a library states decides the root cause, whatever cause is frequent: version
skew (a version check that failed, a CUDA toolkit that is not torch's, a cluster started with
another Ray, an extension missing a symbol) is R01, and the library refusing how it was called
(DDP's device_ids for a module on several GPUs, Lightning's unused parameters) is R14, not a
framework bug (R25). Each is read through `triage explain`, and the first thing the report says to do is the
mechanism's own remedy (not "install the missing module" for a version that is present)."""

from __future__ import annotations

import pytest

from tests.cli_runs import assert_top, explained

REQUIRE_VERSION = """Traceback (most recent call last):
  File "/workspace/LLaMA-Factory/src/train.py", line 28, in <module>
    main()
  File "/workspace/LLaMA-Factory/src/llamafactory/extras/misc.py", line 83, in check_dependencies
    require_version("transformers>=4.41.2,<=4.43.4", "To fix: pip install transformers>=4.41.2,<=4.43.4")
  File "/opt/py/site-packages/transformers/utils/versions.py", line 111, in require_version
    _compare_versions(op, got_ver, want_ver, requirement, pkg, hint)
  File "/opt/py/site-packages/transformers/utils/versions.py", line 44, in _compare_versions
    raise ImportError(
ImportError: transformers>=4.41.2,<=4.43.4 is required for a normal functioning of this module, but found transformers==4.45.0.
To fix: pip install transformers>=4.41.2,<=4.43.4"""

APEX_CUDA = """  Running setup.py install for apex ... error
    Traceback (most recent call last):
      File "/tmp/apex/setup.py", line 178, in <module>
        check_cuda_torch_binary_vs_bare_metal(CUDA_HOME)
      File "/tmp/apex/setup.py", line 40, in check_cuda_torch_binary_vs_bare_metal
        raise RuntimeError(
    RuntimeError: Cuda extensions are being compiled with a version of Cuda that does not match the version used to compile Pytorch binaries.  Pytorch binaries were compiled with Cuda 11.8.
    In some cases, a minor-version mismatch will not cause later errors:  https://github.com/NVIDIA/apex/pull/323#discussion_r287021798.  You can try commenting out this check (at your own risk)."""

RAY_VERSIONS = """Traceback (most recent call last):
  File "/home/user/train_ray.py", line 12, in <module>
    ray.init(address="auto")
  File "/opt/py/site-packages/ray/_private/worker.py", line 1642, in init
    connect(
  File "/opt/py/site-packages/ray/_private/worker.py", line 2235, in connect
    check_version_info(...)
  File "/opt/py/site-packages/ray/_private/utils.py", line 1525, in check_version_info
    raise RuntimeError(error_message)
RuntimeError: Version mismatch: The cluster was started with:
    Ray: 2.9.0
    Python: 3.10.13
This process on node 10.0.0.5 was started with:
    Ray: 2.10.0
    Python: 3.10.13"""

DDP_DEVICE_IDS = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/finetune.py", line 97, in <module>
[rank0]:     model = DDP(model, device_ids=[local_rank], output_device=local_rank)
[rank0]:   File "/opt/py/site-packages/torch/nn/parallel/distributed.py", line 731, in __init__
[rank0]:     self._log_and_throw(
[rank0]:   File "/opt/py/site-packages/torch/nn/parallel/distributed.py", line 1127, in _log_and_throw
[rank0]:     raise err_type(err_msg)
[rank0]: ValueError: DistributedDataParallel device_ids and output_device arguments only work with single-device/multiple-device GPU modules or CPU modules, but got device_ids [0], output_device 0, and module parameters {device(type='cuda', index=0), device(type='cuda', index=1)}."""

LIGHTNING_UNUSED = """Traceback (most recent call last):
  File "/workspace/train.py", line 64, in <module>
    trainer.fit(model, datamodule=dm)
  File "/opt/py/site-packages/lightning/pytorch/trainer/trainer.py", line 538, in fit
    call._call_and_handle_interrupt(
  File "/opt/py/site-packages/lightning/pytorch/overrides/distributed.py", line 58, in _run_ddp_forward
    return self.module(*inputs, **kwargs)
RuntimeError: It looks like your LightningModule has parameters that were not used in producing the loss returned by training_step. If this is intentional, you must enable the detection of unused parameters in DDP, either by setting the string value `strategy='ddp_find_unused_parameters_true'` or by setting the flag in the strategy with `strategy=DDPStrategy(find_unused_parameters=True)`."""

RAY_NO_TRACEBACK = """RuntimeError: Version mismatch: The cluster was started with:
    Ray: 2.7.1
    Python: 3.9.16
This process on node 172.31.4.8 was started with:
    Ray: 2.7.1
    Python: 3.10.12"""

REQUIRE_DATASETS = (
    "ImportError: datasets>=2.16.0,<=2.21.0 is required for a normal functioning of this "
    "module, but found datasets==3.0.1.\nTo fix: pip install datasets>=2.16.0,<=2.21.0 or set "
    "FORCE_CHECK_IMPORTS=1 to skip this check."
)
IMPORT_CUT = "ImportError: cannot import name 'LlamaFlashAttention2"
SYMBOL_CUT = "ImportError: /usr/local/lib/python3.10/dist-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol:"
DISPATCH = "RuntimeError: You can't use batches of different size with `dispatch_batches=True` or when using an `IterableDataset`.either pass `dispatch_batches=False` and have each process fetch its own batch  or pass `split_batches=True`."

# (paste, root cause, words of the first action: the mechanism's own advice, not a family's)
CASES = [
    ("transformers-require-version", REQUIRE_VERSION, "R01", ">=4.41.2,<=4.43.4"),
    ("require-version-without-traceback", REQUIRE_DATASETS, "R01", ">=2.16.0,<=2.21.0"),
    ("apex-cuda-vs-torch-cuda", APEX_CUDA, "R01", "CUDA_HOME"),
    ("ray-cluster-version-mismatch", RAY_VERSIONS, "R01", "same Ray and Python versions"),
    ("ray-version-mismatch-alone", RAY_NO_TRACEBACK, "R01", "same Ray and Python versions"),
    ("import-name-line-cut", IMPORT_CUT, "R01", "when `LlamaFlashAttention2` moved"),
    ("undefined-symbol-line-cut", SYMBOL_CUT, "R01", "Rebuild `flash_attn_2_cuda`"),
    ("ddp-device-ids-multi-gpu-module", DDP_DEVICE_IDS, "R14", "no `device_map"),
    ("lightning-unused-parameters", LIGHTNING_UNUSED, "R14", "ddp_find_unused_parameters_true"),
    ("accelerate-dispatch-batches", DISPATCH, "R14", "Pass `dispatch_batches=False`"),
]


@pytest.mark.parametrize(
    ("text", "cause", "advice"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_mechanism_the_library_states_is_the_cause_and_its_advice_comes_first(
    text: str, cause: str, advice: str
) -> None:
    d = explained(text)
    assert_top(d, "root_causes", cause)
    first = d["fix_patterns"][0]["actions"][0]
    assert advice in first, d["fix_patterns"][0]
