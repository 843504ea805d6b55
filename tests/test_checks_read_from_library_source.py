# ruff: noqa: E501 (pasted errors are as long as the libraries made them)
"""What a library checked, read in its source, names the mechanism: torch's pre-1.8 device check
is the same rank-to-GPU mapping as today's; Lightning's device parser that sees no GPU at all is
the build or the driver, one that sees other GPUs is the launcher's mapping; a ZeRO key that only
later DeepSpeed releases declare is a version mismatch; TCPStore's libuv check fails on builds
without libuv (the Windows wheels); CPython that cannot open the launched script is the command
line; zsh's `killed` is SIGKILL; bitsandbytes without even its CPU library was never built, and
without a library for torch's CUDA is too old for it; a binary with no kernel for the GPU does not
support that GPU; training sections under init_inference's `zero` are a training config given to
the inference API; the top-level horovod package has no framework API; an NVSwitch fabric manager
that is down (most often: not the driver's version) is the versions. Each is read through
`triage explain`, as a user pastes it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tests.cli_runs import assert_the_check_decides
from triage.cli import main

TORCH17_INVALID_ORDINAL = """Traceback (most recent call last):
  File "train.py", line 41, in <module>
    torch.cuda.set_device(args.local_rank)
  File "/opt/conda/lib/python3.7/site-packages/torch/cuda/__init__.py", line 245, in set_device
    torch._C._cuda_setDevice(device)
RuntimeError: cuda runtime error (101) : invalid device ordinal at /pytorch/torch/csrc/cuda/Module.cpp:59"""

LIGHTNING_NO_GPU_VISIBLE = """  File "/usr/local/lib/python3.8/site-packages/pytorch_lightning/utilities/device_parser.py", line 142, in _sanitize_gpu_ids
    raise MisconfigurationException(
pytorch_lightning.utilities.exceptions.MisconfigurationException: You requested GPUs: [1]
 But your machine only has: []"""

LIGHTNING_GPUS_HIDDEN = """(pid=1521961)   File "/home/u/env/lib/python3.8/site-packages/pytorch_lightning/utilities/device_parser.py", line 142, in _sanitize_gpu_ids
(pid=1521961)     raise MisconfigurationException(
(pid=1521961) pytorch_lightning.utilities.exceptions.MisconfigurationException: You requested GPUs: [0, 1]
(pid=1521961)  But your machine only has: [0]"""

ZERO_PLUS_PLUS_ON_OLD_DEEPSPEED = """  File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/zero/config.py", line 19, in get_zero_config
    return DeepSpeedZeroConfig(**zero_config_dict)
pydantic.error_wrappers.ValidationError: 3 validation errors for DeepSpeedZeroConfig
zero_hpz_partition_size
  extra fields not permitted (type=value_error.extra)
zero_quantized_weights
  extra fields not permitted (type=value_error.extra)
zero_quantized_gradients
  extra fields not permitted (type=value_error.extra)"""

# torch 2.4's wording (TORCH_CHECK, a RuntimeError); later releases raise DistStoreError, a
# class rules/cascade.yaml reads as the store going away (the lead's to mark this initiating)
TCPSTORE_WITHOUT_LIBUV = """  File "C:\\Users\\me\\miniconda3\\envs\\yolo\\lib\\site-packages\\torch\\distributed\\elastic\\utils\\distributed.py", line 79, in _create_tcp_store
    store = TCPStore(
RuntimeError: use_libuv was requested but PyTorch was build without libuv support"""

SCRIPT_NOT_FOUND = """/home/u/env/bin/python: can't open file 'romp.train': [Errno 2] No such file or directory
/home/u/env/bin/python: can't open file 'romp.train': [Errno 2] No such file or directory
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 2) local_rank: 0 (pid: 40211) of binary: /home/u/env/bin/python"""

ZSH_KILLED = """Loading checkpoint shards:  75%|███████▌  | 3/4 [00:41<00:13, 13.52s/it]
zsh: killed     python finetune.py --model_name_or_path meta-llama/Llama-2-13b-hf"""

BNB_NEVER_BUILT = """Could not find the bitsandbytes CUDA binary at PosixPath('/notebooks/bitsandbytes/bitsandbytes/libbitsandbytes_cuda124.so')
Could not load bitsandbytes native library: /notebooks/bitsandbytes/bitsandbytes/libbitsandbytes_cpu.so: cannot open shared object file: No such file or directory"""

BNB_NO_BINARY_FOR_CUDA = """Could not find the bitsandbytes CUDA binary at PosixPath('/usr/local/lib/python3.12/dist-packages/bitsandbytes/libbitsandbytes_cuda129.so')
The installed version of bitsandbytes was compiled without GPU support. 8-bit optimizers, 8-bit multiplication, and GPU quantization are unavailable."""

# torch/cuda/__init__.py (_check_cubins) warns so before the first kernel fails
NO_KERNEL_FOR_THE_GPU = """/opt/conda/lib/python3.11/site-packages/torch/cuda/__init__.py:262: UserWarning:
NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.
The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.
If you want to use the NVIDIA GeForce RTX 5090 GPU with PyTorch, please check the instructions at https://pytorch.org/get-started/locally/"""

DS_INFERENCE_GIVEN_TRAINING_CONFIG = """  File "inference-test-zero.py", line 95, in <module>
    model = deepspeed.init_inference(model, config=ds_config)
pydantic.error_wrappers.ValidationError: 3 validation errors for DeepSpeedInferenceConfig
tp
  value is not a valid dict (type=type_error.dict)
zero -> fp16
  extra fields not permitted (type=value_error.extra)
zero -> zero_optimization
  extra fields not permitted (type=value_error.extra)"""

HOROVOD_TOP_LEVEL_PACKAGE = """Traceback (most recent call last):
  File "train.py", line 22, in <module>
    torch.cuda.set_device(hvd.local_rank())
AttributeError: module 'horovod' has no attribute 'local_rank'"""

FABRIC_MANAGER_FAILED = """$ sudo systemctl status nvidia-fabricmanager
● nvidia-fabricmanager.service - NVIDIA fabric manager service
     Loaded: loaded (/lib/systemd/system/nvidia-fabricmanager.service; enabled; vendor preset: enabled)
     Active: failed (Result: exit-code) since Mon 2024-07-01 14:43:57 UTC; 5s ago
    Process: 444114 ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg (code=exited, status=1/FAILURE)"""

FABRIC_MANAGER_OTHER_VERSION = """Nov 05 13:55:26 node1 systemd[1]: Starting NVIDIA fabric manager service...
Nov 05 13:55:26 node1 nv-fabricmanager[104230]: fabric manager NVIDIA GPU driver interface version 550.127.05 doesn't match with driver version 550.120. Please update with the matching NVIDIA driver package.
Nov 05 13:55:26 node1 systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE"""

# (name, paste, top symptom and top root cause (either of those a "/" separates), what the fixes
# must tell the user)
CASES = [
    ("torch17-invalid-device-ordinal", TORCH17_INVALID_ORDINAL, "S13", "R06", "set_device"),
    ("lightning-no-gpu-visible", LIGHTNING_NO_GPU_VISIBLE, "S04", "R04/R02", 'accelerator="cpu"'),
    ("lightning-gpus-hidden", LIGHTNING_GPUS_HIDDEN, "S04", "R06", "it sees [0]"),
    (
        "zero-plus-plus-on-old-deepspeed",
        ZERO_PLUS_PLUS_ON_OLD_DEEPSPEED,
        "S09",
        "R01",
        "0.10.0 or newer",
    ),
    ("tcpstore-without-libuv", TCPSTORE_WITHOUT_LIBUV, "S10", "R04", "USE_LIBUV=0"),
    ("launched-script-not-found", SCRIPT_NOT_FOUND, "S05", "R06", "'romp.train' was not found"),
    ("zsh-killed", ZSH_KILLED, "S15", "R17", "dmesg"),
    ("bitsandbytes-never-built", BNB_NEVER_BUILT, "S02", "R02", "pip install bitsandbytes"),
    ("bitsandbytes-no-binary-for-cuda", BNB_NO_BINARY_FOR_CUDA, "S04", "R01", "CUDA 129"),
    ("no-kernel-for-the-gpu", NO_KERNEL_FOR_THE_GPU, "S04", "R04", "TORCH_CUDA_ARCH_LIST"),
    (
        "deepspeed-inference-given-a-training-config",
        DS_INFERENCE_GIVEN_TRAINING_CONFIG,
        "S09",
        "R14",
        "`zero` section holds only ZeRO settings",
    ),
    ("horovod-top-level-package", HOROVOD_TOP_LEVEL_PACKAGE, "S18/S13", "R14", "horovod.torch"),
    (
        "fabric-manager-failed",
        FABRIC_MANAGER_FAILED,
        "S11/S04",
        "R01",
        "journalctl -u nvidia-fabricmanager",
    ),
    (
        "fabric-manager-other-version",
        FABRIC_MANAGER_OTHER_VERSION,
        "S11/S04",
        "R01",
        "exactly the driver's version (550.120",
    ),
]


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "advice"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_check_the_library_made_names_the_root_cause_and_the_advice(
    text: str, symptom: str, cause: str, advice: str
) -> None:
    assert_the_check_decides(text, symptom, cause, advice)


def test_zeros_twice_reduced_gradient_is_one_mechanism_with_one_rule() -> None:
    message = "AssertionError: The parameter 12 has already been reduced. Gradient computed twice for this partition. Multiple gradient reduction is currently not supported"
    result = CliRunner().invoke(main, ["rules", "check", message])
    assert result.exit_code == 0, result.output
    named = [line.split(":")[0] for line in result.output.splitlines() if "reduced-twice" in line]
    assert named == ["ds-zero-gradient-reduced-twice"], result.output
