# ruff: noqa: E501 (pasted tracebacks and log lines are as long as the libraries made them)
"""PyTorch-side messages whose mechanism, not their words, decides the root cause: thrust's
out-of-memory, a DataLoader batch the main process could not take from its worker (a cut
traceback), the launcher's --local_rank reaching a script written for torchrun, torchtune's key
mapping meeting another checkpoint format, a source checkout without its submodules, and a
compiled extension op with no kernel for the GPU. Each is read through `triage explain`."""

from __future__ import annotations

import pytest

from tests.cli_runs import assert_top, explained

# thrust (under torch's sort/unique and DataParallel's scatter) reports the CUDA error string
THRUST_OOM = """Traceback (most recent call last):
  File "/home/ana/proj/train.py", line 95, in <module>
    loss = criterion(logits, target)
  File "/opt/conda/lib/python3.7/site-packages/torch/nn/modules/module.py", line 541, in __call__
    result = self.forward(*input, **kwargs)
RuntimeError: after cudaLaunch in triple_chevron_launcher::launch(): out of memory"""

# the traceback stops inside torch's fd-passing unpickler: the exception line was cut off
CUT_IN_REBUILD_STORAGE_FD = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/home/ana/det/train.py", line 77, in train_one_epoch
[rank0]:     for samples, targets in data_loader:
[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 708, in __next__
[rank0]:     data = self._next_data()
[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1458, in _next_data
[rank0]:     idx, data = self._get_data()
[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1420, in _get_data
[rank0]:     success, data = self._try_get_data()
[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1251, in _try_get_data
[rank0]:     data = self._data_queue.get(timeout=timeout)
[rank0]:   File "/usr/lib/python3.11/multiprocessing/queues.py", line 122, in get
[rank0]:     return _ForkingPickler.loads(res)
[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/multiprocessing/reductions.py", line 496, in rebuild_storage_fd
[rank0]:     fd = df.detach()"""

# torch 1.x's torch.distributed.launch appends --local_rank to a script that reads LOCAL_RANK
LAUNCH_LOCAL_RANK = """/opt/conda/lib/python3.8/site-packages/torch/distributed/launch.py:178: FutureWarning: The module torch.distributed.launch is deprecated
and will be removed in future. Use torchrun.
usage: finetune.py [-h] [--config CONFIG] [--output_dir OUTPUT_DIR]
finetune.py: error: unrecognized arguments: --local_rank=1"""

# torchtune's HF checkpointer given a file already in torchtune's own key names
TORCHTUNE_KEY_MAPPING = """Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/torchtune/training/checkpointing/_checkpointer.py", line 535, in load_checkpoint
    converted_state_dict[training.MODEL_KEY] = convert_weights.hf_to_tune(
  File "/opt/venv/lib/python3.11/site-packages/torchtune/models/convert_weights.py", line 137, in hf_to_tune
    new_key = get_mapped_key(key, _FROM_HF)
  File "/opt/venv/lib/python3.11/site-packages/torchtune/models/convert_weights.py", line 59, in get_mapped_key
    raise Exception(
Exception: Error converting the state dict. Found unexpected key: "base_model.model.layers.0.attn.q_proj.lora_a.weight". Please make sure you're loading a checkpoint with the right format. """

SUBMODULE_MISSING = """Building wheel torch-2.1.0a0+git4c55dc5
-- Found CUDA: /usr/local/cuda (found version "11.8")
CMake Error: The source directory "/home/ana/src/pytorch/third_party/gloo" does not appear to contain CMakeLists.txt.
Specify --help for usage, or press the help button on the CMake GUI.
-- Configuring incomplete, errors occurred!"""

MMCV_OP_NO_KERNEL = """Traceback (most recent call last):
  File "tools/train.py", line 242, in <module>
    main()
  File "/opt/conda/lib/python3.8/site-packages/mmcv/ops/focal_loss.py", line 60, in forward
    ext_module.sigmoid_focal_loss_forward(
RuntimeError: CUDA error: no kernel image is available for execution on the device"""

# (id, paste, symptom, root cause, the least score the cause is stated at: where an earlier
# release already ranked the cause first from the words, the mechanism is what makes it sure)
CASES = [
    ("thrust-out-of-memory", THRUST_OOM, "S14", "R16", 0.8),
    ("cut-in-rebuild-storage-fd", CUT_IN_REBUILD_STORAGE_FD, "S08", "R05", 0.8),
    ("launcher-local-rank-to-a-torchrun-script", LAUNCH_LOCAL_RANK, "S05", "R14", 0.0),
    ("torchtune-key-mapping", TORCHTUNE_KEY_MAPPING, "S30", "R20", 0.8),
    ("source-checkout-without-submodules", SUBMODULE_MISSING, "S01", "R02", 0.8),
    ("mmcv-op-without-a-kernel-for-the-gpu", MMCV_OP_NO_KERNEL, "S04", "R03", 0.0),
]


@pytest.mark.parametrize(
    ("text", "symptom", "cause", "least_score"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_mechanism_of_a_torch_side_message_decides_its_cause(
    text: str, symptom: str, cause: str, least_score: float
) -> None:
    d = explained(text)
    assert_top(d, "symptoms", symptom)
    assert_top(d, "root_causes", cause)
    assert d["root_causes"][0]["score"] >= least_score, d["summary"]
