# ruff: noqa: E501 (pasted tracebacks and log lines are as long as the libraries made them)
"""A library's check names its mechanism: the condition it tested decides the root cause, not the
words around it. flash-attn's setup tells a missing nvcc from an old one, pip's Requires-Python
check is the interpreter, FSDP's compute-device check is the rank's own placement, NCCL's IB
receive-size check is ranks or nodes that disagree, GPT-NeoX's derived-argument check is the parallel
degrees, a bus error (however the paste wrapped or reported it) is /dev/shm, a newer DeepSpeed's
bf16 model is a bf16 section its release let pass, argparse's checks are the command line, horovodrun's
ssh launch and Open MPI's address match are the cluster, and bitsandbytes' missing libcuda is the
driver. Each is read through `triage explain`."""

from __future__ import annotations

import pytest

from tests.cli_runs import (
    assert_the_check_decides,
    assert_the_check_names,
    assert_top,
    cases_with_known_misses,
    explained,
)

FLASH_ATTN_NO_NVCC = """  File "/tmp/pip-install-abc123/flash-attn_0f1e2d/setup.py", line 88, in raise_if_cuda_home_none
    raise RuntimeError(
RuntimeError: flash_attn was requested, but nvcc was not found.  Are you sure your environment has nvcc available?  If you're installing within a container from https://hub.docker.com/r/pytorch/pytorch, only images whose names contain 'devel' will provide nvcc.
torch.__version__  = 2.1.0+cu121"""

FLASH_ATTN_OLD_CUDA = """  File "/tmp/pip-install-abc123/flash-attn_0f1e2d/setup.py", line 117, in <module>
    raise RuntimeError(
RuntimeError: FlashAttention is only supported on CUDA 11.7 and above.  Note: make sure nvcc has a supported version by running nvcc -V.
torch.__version__  = 2.1.0+cu118"""

PIP_REQUIRES_PYTHON = """Collecting deepspeed==0.14.0
  Using cached deepspeed-0.14.0.tar.gz (1.3 MB)
ERROR: Package 'deepspeed' requires a different Python: 3.6.9 not in '>=3.8'"""

FSDP_OFF_COMPUTE_DEVICE = """[rank1]: Traceback (most recent call last):
[rank1]:   File "/home/user/train_fsdp.py", line 141, in <module>
[rank1]:     loss = model(batch).loss
[rank1]:   File "/opt/py/site-packages/torch/distributed/fsdp/_flat_param.py", line 1420, in unshard
[rank1]:     self._check_on_compute_device(self.flat_param)
[rank1]:   File "/opt/py/site-packages/torch/distributed/utils.py", line 160, in _p_assert
[rank1]:     raise AssertionError(s)
[rank1]: AssertionError: Expects tensor to be on the compute device cuda:1, was on cuda:0"""

NCCL_IB_SIZE_MISMATCH = """gpu-node-3:812211:812390 [2] transport/net_ib.cc:1092 NCCL WARN NET/IB : req 1/1 tag 7 peer 10.1.4.17<43121> collective mismatch error, local size 1048576 remote size 4194304
gpu-node-3:812211:812390 [2] NCCL INFO transport/net.cc:1134 -> 5
gpu-node-3:812211:812390 [2] NCCL INFO proxy.cc:723 -> 5 [Proxy Thread]"""

NEOX_DERIVED = """Traceback (most recent call last):
  File "/gpt-neox/train.py", line 27, in main
    neox_args = NeoXArgs.consume_neox_args()
  File "/gpt-neox/megatron/neox_arguments/arguments.py", line 1024, in calculate_derived
    ), "NeoXArgs.calculate_derived() (global_num_gpus / pp_size) / mp_size [(8 / 3) / 1] must be a whole number"
AssertionError: NeoXArgs.calculate_derived() (global_num_gpus / pp_size) / mp_size [(8 / 3) / 1] must be a whole number"""

DATALOADER_BUS_ERROR_WRAPPED = """  File "/opt/py/site-packages/torch/utils/data/_utils/signal_handling.py", line 66, in handler
    _error_if_any_worker_fails()
RuntimeError: DataLoader worker (pid 3121) is killed by signal: Bus
error. It is possible that dataloader's workers are out of shared
memory. Please try to raise your shared memory limit."""

FAULTHANDLER_BUS_ERROR = """(RayWorkerWrapper pid=5512) Fatal Python error: Bus error
(RayWorkerWrapper pid=5512)
(RayWorkerWrapper pid=5512) Thread 0x00007f3a1c7fe640 (most recent call first):
(RayWorkerWrapper pid=5512)   File "/usr/lib/python3.10/threading.py", line 324 in wait"""

COMPOSER_RANK_SIGBUS = """Building eval loader...
Building trainer...
ERROR:composer.cli.launcher:Rank 5 crashed with exit code -7.
ERROR:composer.cli.launcher:Global rank 0 (PID 4410) exited with code -15"""

DS_BF16_LOSS_SCALE_KEYS = """[rank0]:   File "/opt/py/site-packages/deepspeed/runtime/precision_config.py", line 38, in get_bfloat16_config
[rank0]:     return DeepSpeedBF16Config(**bf16_config_dict)
[rank0]: pydantic_core._pydantic_core.ValidationError: 2 validation errors for DeepSpeedBF16Config
[rank0]: initial_scale_power
[rank0]:   Extra inputs are not permitted [type=extra_forbidden, input_value=16, input_type=int]
[rank0]: hysteresis
[rank0]:   Extra inputs are not permitted [type=extra_forbidden, input_value=2, input_type=int]"""

ARGPARSE_REQUIRED = """usage: run_clm.py [-h] --model_name_or_path MODEL_NAME_OR_PATH --output_dir OUTPUT_DIR
run_clm.py: error: the following arguments are required: --output_dir
E1107 09:12:44.120000 1771 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 2) local_rank: 0 (pid: 1802) of binary: /usr/bin/python3"""

LAUNCHER_AFTER_SCRIPT = """$ python main.py -m torch.distributed.launch --nproc_per_node 4 --epochs 10
usage: main.py [-h] [--epochs EPOCHS] [--lr LR]
main.py: error: unrecognized arguments: -m torch.distributed.launch --nproc_per_node 4"""

HOROVODRUN_SSH_TASK = """$ horovodrun -np 4 -H gpu1:2,gpu2:2 python train.py
Launching horovodrun task function was not successful:
bash: /home/me/miniconda3/envs/hvd/bin/python: No such file or directory"""

OPENMPI_ADDRESS_UNMATCHED = """[node-a:21034] btl: tcp: Match incoming connection from [[41872,1],1] 172.17.0.1 with locally known IP 10.0.0.5 failed (iface 0/3)!
[node-a:21034] btl: tcp: Match incoming connection from [[41872,1],1] 172.17.0.1 with locally known IP 10.0.0.6 failed (iface 1/3)!"""

BNB_NO_LIBCUDA = """CUDA SETUP: WARNING! libcuda.so not found! Do you have a CUDA driver installed? If you are on a cluster, make sure you are on a CUDA machine!
CUDA SETUP: CUDA runtime path found: /opt/conda/lib/libcudart.so.11.0
/opt/conda/lib/python3.10/site-packages/bitsandbytes/cuda_setup/main.py:145: UserWarning: WARNING: No GPU detected! Check your CUDA paths. Proceeding to load CPU-only library..."""

# (name, paste, top symptom, top root cause (or causes, "/"), what the fixes must tell the user);
# NCCL's IB size check is either ranks in different collectives or nodes with different NCCL settings
# torchvision/datasets/imagenet.py (_verify_archive), under timm's create_dataset
TORCHVISION_ARCHIVE_MISSING = """Traceback (most recent call last):
  File "train.py", line 842, in <module>
    main()
  File "/ext3/miniconda3/lib/python3.8/site-packages/torchvision/datasets/imagenet.py", line 100, in _verify_archive
    raise RuntimeError(msg.format(file, root))
RuntimeError: The archive ILSVRC2012_devkit_t12.tar.gz is not present in the root directory or is corrupted. You need to download it externally and place it in ./imagenet.
"""
# lightning/pytorch/loops/fit_loop.py (FitLoop.done) after the data connector's warning
LIGHTNING_NO_BATCHES = """/env/lib/python3.10/site-packages/lightning/pytorch/trainer/connectors/data_connector.py:441: Total length of `DataLoader` across ranks is zero. Please make sure this was your intention.
`Trainer.fit` stopped: No training batches.
"""
# XLA's TPU compiler, under torch_xla
XLA_HBM_EXHAUSTED = "RuntimeError: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 100.38G of 31.75G hbm. Exceeded hbm capacity by 68.63G."


CASES = [
    ("pip-requires-python", PIP_REQUIRES_PYTHON, "S01", "R04", "Python >=3.8"),
    ("fsdp-off-compute-device", FSDP_OFF_COMPUTE_DEVICE, "S13", "R14", "set_device"),
    ("nccl-ib-size-mismatch", NCCL_IB_SIZE_MISMATCH, "S12", "R08/R06", "NCCL_BUFFSIZE"),
    ("neox-derived-degrees", NEOX_DERIVED, "S09", "R12", "pipe_parallel_size"),
    ("dataloader-bus-error-wrapped", DATALOADER_BUS_ERROR_WRAPPED, "S08", "R05", "--shm-size"),
    ("faulthandler-bus-error", FAULTHANDLER_BUS_ERROR, "S27", "R05", "--shm-size"),
    ("composer-rank-sigbus", COMPOSER_RANK_SIGBUS, "S27", "R05", "--shm-size"),
    ("deepspeed-bf16-loss-scale-keys", DS_BF16_LOSS_SCALE_KEYS, "S09", "R13/R01", "`bf16` section"),
    ("argparse-required-arguments", ARGPARSE_REQUIRED, "S05", "R14", "--output_dir"),
    ("launcher-module-after-script", LAUNCHER_AFTER_SCRIPT, "S05", "R06", "launcher first"),
    ("horovodrun-ssh-task-server", HOROVODRUN_SSH_TASK, "S05", "R06", "same path on every host"),
    ("openmpi-address-unmatched", OPENMPI_ADDRESS_UNMATCHED, "S11", "R07", "btl_tcp_if_include"),
    ("bitsandbytes-without-libcuda", BNB_NO_LIBCUDA, "S04", "R02", "nvidia-smi"),
    ("lightning-no-training-batches", LIGHTNING_NO_BATCHES, "S08", "R27", "training set"),
    ("xla-hbm-exhausted", XLA_HBM_EXHAUSTED, "S14", "R16", "device's memory"),
]


# A case the shipped models get wrong today, kept as a strict expected failure (it must keep
# failing until fixed): since the refit on 1,447 reference cases the cause is right but stated
# at 0.79, under the 0.8 a named mechanism should reach.
KNOWN_MISSES = {
    "fsdp-off-compute-device": "R14 named first at 0.799 after the refit on 650 rules, not >= 0.8"
}


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "advice"),
    cases_with_known_misses(CASES, KNOWN_MISSES),
)
def test_the_check_a_library_made_decides_the_root_cause_and_the_advice(
    text: str, symptom: str, cause: str, advice: str
) -> None:
    assert_the_check_decides(text, symptom, cause, advice)


def test_flash_attn_without_nvcc_and_with_an_old_nvcc_are_told_apart() -> None:
    missing = explained(FLASH_ATTN_NO_NVCC, "--no-embed")
    too_old = explained(FLASH_ATTN_OLD_CUDA, "--no-embed")
    assert_top(missing, "root_causes", "R02")
    assert_top(too_old, "root_causes", "R01")
    # an old toolkit is answered with the version it needs
    assert "11.7 or newer" in " ".join(too_old["fix_patterns"][0]["actions"])


def test_a_ray_actor_that_became_unavailable_mid_call_is_a_process_gone() -> None:
    # verl's trainer calling its FSDP actor when the actor's process had died: Ray raises
    # ActorUnavailableError (its RPC fails with the socket closed), which read as a launch
    # failure at 20%; it is the actor's process killed mid-work, whose cause the node's
    # logs hold
    d = explained(
        "ray.exceptions.RayTaskError(ActorUnavailableError): ray::TaskRunner.run() "
        "(pid=2811, ip=10.0.0.7) ray.exceptions.ActorUnavailableError: The actor 2a1b3c is "
        "unavailable: RpcError: RPC error: Socket closed rpc_code: 14. The task may or may not "
        "have been executed on the actor.",
        "--no-embed",
    )
    assert_top(d, "symptoms", "S27", "S15")
    assert "ray logs" in " ".join(a for f in d["fix_patterns"] for a in f["actions"])


def test_a_lightning_stage_run_without_its_dataloader_is_the_code_missing_it() -> None:
    # Lightning's DataHooks raise this for a stage the module defines no data for (here
    # `trainer.test` after a fit); it read as a version incompatibility
    assert_the_check_decides(
        "lightning_fabric.utilities.exceptions.MisconfigurationException: `test_dataloader` "
        "must be implemented to be used with the Lightning Trainer",
        "S18/S09",
        "R14/R26",
        "Define `test_dataloader()`",
    )


def test_a_dataset_download_the_server_refused_is_data_that_never_arrived() -> None:
    d = explained(
        "Traceback (most recent call last):\n"
        '  File "/home/u/main.py", line 59, in <module>\n'
        "    train_dataset = MNISTLayout(args.log_dir, train=True)\n"
        '  File "/env/lib/python3.8/site-packages/torchvision/datasets/mnist.py", line 146, '
        "in download\n"
        "    download_and_extract_archive(url, download_root=self.raw_folder)\n"
        '  File "/env/lib/python3.8/site-packages/torchvision/datasets/utils.py", line 92, '
        "in download_url\n"
        "    _urlretrieve(url, fpath)\n"
        '  File "/env/lib/python3.8/urllib/request.py", line 649, in http_error_default\n'
        "    raise HTTPError(req.full_url, code, msg, hdrs, fp)\n"
        "urllib.error.HTTPError: HTTP Error 403: Forbidden",
        "--no-embed",
    )
    assert_top(d, "symptoms", "S08")
    assert "download=False" in " ".join(a for f in d["fix_patterns"] for a in f["actions"])


def test_a_torchvision_dataset_whose_files_are_not_under_its_root_is_a_data_loading_error() -> None:
    # the data is not where `root` points: the pipeline's setting (R27) more than the cluster's
    # (R06), neither certain from the message alone
    assert_the_check_names(TORCHVISION_ARCHIVE_MISSING, "S08", "R27", "`root`")


# urllib's and requests' connection failures on a node without internet, fetching weights
URLOPEN_NO_NETWORK = "urllib.error.URLError: <urlopen error [Errno 101] Network is unreachable>"
REQUESTS_NO_DNS = "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /bert-base-uncased/resolve/main/config.json (Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f2c>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution'))"


@pytest.mark.parametrize("text", [URLOPEN_NO_NETWORK, REQUESTS_NO_DNS], ids=["urlopen", "requests"])
def test_a_download_on_a_node_without_network_is_the_nodes_network(text: str) -> None:
    assert_the_check_names(text, "S06", "R07", "where there is network")
