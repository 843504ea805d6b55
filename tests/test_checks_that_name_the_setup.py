# ruff: noqa: E501 (pasted errors are as long as the libraries made them)
"""A library's check that names the user's set-up is the root cause, with standing, not a
framework bug: FSDP's local or sharded state dict of an unsharded model is the sharding set-up
(often one process where several were meant); a package's `super()` call to a method the base
package no longer has is the two releases; vLLM from a native Windows install is the platform,
and vLLM that finds no device is a process given no GPU; a disk that is full says so in Rust's
words too; Windows' sharing violation is the platform's file semantics; THC's check of the
device ordinal is the rank-to-GPU mapping; Gloo's full-mesh connect, even cut off, is the
network; a build that joins a path onto a None CUDA_HOME has no toolkit; a setup script without
`pip._internal` has a pip too old; torchtitan's float8 check is the GPU generation. Each is read
through `triage explain`, as a user pastes it."""

from __future__ import annotations

import pytest

from tests.cli_runs import assert_the_check_decides

FSDP_LOCAL_STATE_DICT_UNSHARDED = """Traceback (most recent call last):
  File "/home/u/dinov2/train/train.py", line 301, in do_train
    checkpointer.save("model_{:07d}".format(iteration))
  File "/opt/py/site-packages/torch/distributed/fsdp/_state_dict_utils.py", line 387, in _local_pre_state_dict_hook
    raise RuntimeError(
RuntimeError: ``local_state_dict`` can only be used when parameters are flatten and sharded."""

MMCV_SUPER_METHOD_GONE = """Traceback (most recent call last):
  File "/opt/py/site-packages/mmcv/cnn/bricks/norm.py", line 110, in build_norm_layer
    layer._specify_ddp_gpu_num(1)
  File "/opt/py/site-packages/mmcv/utils/parrots_wrapper.py", line 87, in _specify_ddp_gpu_num
    super()._specify_ddp_gpu_num(gpu_size)
AttributeError: 'super' object has no attribute '_specify_ddp_gpu_num'"""

VLLM_NATIVE_WINDOWS = """ERROR 03-02 09:14:10 registry.py:267] Error in inspecting model architecture 'Qwen2ForCausalLM'
ERROR 03-02 09:14:10 registry.py:267] Traceback (most recent call last):
ERROR 03-02 09:14:10 registry.py:267]   File "C:\\Users\\me\\miniconda3\\envs\\serve\\lib\\site-packages\\vllm\\model_executor\\models\\registry.py", line 429, in _run_in_subprocess
ERROR 03-02 09:14:10 registry.py:267]     returned.check_returncode()
ERROR 03-02 09:14:10 registry.py:267] subprocess.CalledProcessError: Command '['C:\\\\Users\\\\me\\\\miniconda3\\\\envs\\\\serve\\\\python.exe', '-m', 'vllm.model_executor.models.registry']' returned non-zero exit status 1."""

VLLM_ACTOR_WITHOUT_GPU = """(LLMRayActor pid=88123)   File "/opt/py/site-packages/vllm/engine/arg_utils.py", line 286, in create_engine_configs
(LLMRayActor pid=88123)     device_config = DeviceConfig(self.device)
(LLMRayActor pid=88123)   File "/opt/py/site-packages/vllm/config.py", line 484, in __init__
(LLMRayActor pid=88123)     raise RuntimeError("No supported device detected.")
(LLMRayActor pid=88123) RuntimeError: No supported device detected."""

SAFETENSORS_DISK_FULL = """  File "/opt/py/site-packages/transformers/modeling_utils.py", line 2702, in save_pretrained
    safe_save_file(shard, os.path.join(save_directory, shard_file), metadata={"format": "pt"})
  File "/opt/py/site-packages/safetensors/torch.py", line 286, in save_file
    serialize_file(_flatten(tensors), filename, metadata=metadata)
safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })
Error while serializing: I/O error: No space left on device (os error 28)"""

WINDOWS_FILE_IN_USE = """  File "C:\\envs\\pl\\lib\\site-packages\\lightning\\pytorch\\callbacks\\model_checkpoint.py", line 712, in _remove_checkpoint
    trainer.strategy.remove_checkpoint(filepath)
  File "C:\\envs\\pl\\lib\\site-packages\\lightning\\fabric\\utilities\\cloud_io.py", line 120, in remove_checkpoint
    fs.rm(filepath, recursive=True)
PermissionError: [WinError 32] The process cannot access the file because it is being used by another process: 'C:\\\\runs\\\\ckpt\\\\epoch=3-step=800.ckpt'"""

THC_INVALID_DEVICE_ORDINAL = """| distributed init (rank 5): env://
THCudaCheck FAIL file=/opt/conda/conda-bld/pytorch_1587428266983/work/torch/csrc/cuda/Module.cpp line=59 error=101 : invalid device ordinal"""

GLOO_MESH_CUT_OFF = """  File "/opt/py/site-packages/torch/distributed/distributed_c10d.py", line 1953, in _new_process_group_helper
    backend_class = ProcessGroupGloo(
                    ^^^^^^^^^^^^^^^^^
RuntimeError: Gloo connectFullMesh fai"""

BUILD_CUDA_HOME_NONE = """  Traceback (most recent call last):
    File "<pip-setuptools-caller>", line 34, in <module>
    File "/tmp/pip-req-build-x1/setup.py", line 61, in <module>
      include_dirs=[os.path.join(CUDA_HOME, "include")],
                    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
    File "<frozen posixpath>", line 76, in join
  TypeError: expected str, bytes or os.PathLike object, not NoneType"""

SETUP_IMPORTS_PIP_INTERNAL = """$ python setup.py install --cuda_ext --cpp_ext
Traceback (most recent call last):
  File "setup.py", line 5, in <module>
    from pip._internal import main as pipmain
ImportError: No module named 'pip._internal'"""

TORCHTITAN_FLOAT8_OLD_GPU = """[rank0]:   File "/opt/torchtitan/torchtitan/components/quantization/float8.py", line 48, in __init__
[rank0]:     raise ValueError(
[rank0]: ValueError: Failed to swap to Float8Linear because float8 is only supported on SM89 or later.To enable testing on older hardware, set `float8.emulate` to True in eager mode."""

# (name, paste, top symptom and top root cause (either of those a "/" separates), what the fixes
# must tell the user)
CASES = [
    (
        "fsdp-local-state-dict-of-unsharded-model",
        FSDP_LOCAL_STATE_DICT_UNSHARDED,
        "S28",
        "R13",
        "FULL_STATE_DICT",
    ),
    ("mmcv-super-method-gone", MMCV_SUPER_METHOD_GONE, "S03", "R01", "install the mmcv release"),
    ("vllm-native-windows", VLLM_NATIVE_WINDOWS, "S04/S32", "R04", "WSL2"),
    ("vllm-actor-without-gpu", VLLM_ACTOR_WITHOUT_GPU, "S04/S13", "R06", "num_gpus"),
    ("safetensors-disk-full", SAFETENSORS_DISK_FULL, "S28", "R05", "Free space"),
    ("windows-file-in-use", WINDOWS_FILE_IN_USE, "S28", "R04/R22", "dirpath"),
    ("thc-invalid-device-ordinal", THC_INVALID_DEVICE_ORDINAL, "S13", "R06", "nproc_per_node"),
    ("gloo-full-mesh-cut-off", GLOO_MESH_CUT_OFF, "S10", "R07", "GLOO_SOCKET_IFNAME"),
    ("build-cuda-home-none", BUILD_CUDA_HOME_NONE, "S01", "R03", "CUDA_HOME=/usr/local/cuda"),
    ("setup-imports-pip-internal", SETUP_IMPORTS_PIP_INTERNAL, "S01", "R02", "pip install -U pip"),
    ("torchtitan-float8-old-gpu", TORCHTITAN_FLOAT8_OLD_GPU, "S04", "R04", "float8.emulate"),
]


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "advice"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_check_that_names_the_set_up_gives_its_root_cause_with_standing(
    text: str, symptom: str, cause: str, advice: str
) -> None:
    assert_the_check_decides(text, symptom, cause, advice)
