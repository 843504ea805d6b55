"""A framework cloned and run from its checkout (`pip install -e .` in /root/Megatron-LM, a
home folder's DeepSpeed) is still the framework: its frames are library code wherever the
checkout lives (rules/frames.yaml), and advice names the user's own line."""

from __future__ import annotations

import pytest

from tests.cli_runs import explained
from triage import knowledge

# Megatron Core asks for its data-parallel group before the script called
# `init_process_group`; torch raises from `_get_default_group` (distributed_c10d.py)
MEGATRON_CHECKOUT_BEFORE_INIT = """\
Traceback (most recent call last):
  File "/workspace/pretrain_gpt.py", line 231, in <module>
    build_loaders(args)
  File "/workspace/pretrain_gpt.py", line 198, in build_loaders
    dp_rank = parallel_state.get_data_parallel_rank()
  File "/root/Megatron-LM/megatron/core/parallel_state.py", line 1476, in get_data_parallel_rank
    return torch.distributed.get_rank(group=get_data_parallel_group())
  File "/opt/py/site-packages/torch/distributed/distributed_c10d.py", line 1746, in get_rank
    default_pg = _get_default_group()
  File "/opt/py/site-packages/torch/distributed/distributed_c10d.py", line 1008, \
in _get_default_group
    raise ValueError(
ValueError: Default process group has not been initialized, please make sure to call \
init_process_group."""


def test_a_checkouts_package_is_library_code_and_its_examples_are_the_users() -> None:
    frames = knowledge.shipped().frames
    assert frames.is_library("/home/u/DeepSpeed/deepspeed/runtime/zero/stage3.py")
    assert frames.is_library("/mnt/code/transformers/src/transformers/trainer.py")
    assert not frames.is_library("/home/u/transformers/examples/pytorch/run_clm.py")
    # a folder of the user's own named like a library is no checkout of it
    assert not frames.is_library("/home/u/project/src/deepspeed/train_loop.py")


# Megatron-LM cloned and run from its checkout: the training loop in megatron/training/ is
# Megatron's code as much as megatron/core/ is; the user's is the entry script at its top
MEGATRON_LM_LOOP_BEFORE_INIT = """\
Traceback (most recent call last):
  File "/root/Megatron-LM/pretrain_gpt.py", line 231, in <module>
    build_loaders(args)
  File "/root/Megatron-LM/pretrain_gpt.py", line 198, in build_loaders
    loaders = build_train_valid_test_data_iterators(provider)
  File "/root/Megatron-LM/megatron/training/training.py", line 1702, in \
build_train_valid_test_data_iterators
    if mpu.get_data_parallel_rank() == 0:
  File "/root/Megatron-LM/megatron/core/parallel_state.py", line 1476, in get_data_parallel_rank
    return torch.distributed.get_rank(group=get_data_parallel_group())
  File "/opt/py/site-packages/torch/distributed/distributed_c10d.py", line 1746, in get_rank
    default_pg = _get_default_group()
  File "/opt/py/site-packages/torch/distributed/distributed_c10d.py", line 1008, \
in _get_default_group
    raise ValueError(
ValueError: Default process group has not been initialized, please make sure to call \
init_process_group."""


@pytest.mark.parametrize(
    ("pasted", "users_frame", "never_named"),
    [
        # Megatron Core in a checkout under /root, the user's script elsewhere
        (
            MEGATRON_CHECKOUT_BEFORE_INIT,
            "build_loaders (/workspace/pretrain_gpt.py:198)",
            "megatron/core",
        ),
        # the whole Megatron-LM clone: its training loop is Megatron's, the entry script the
        # user's
        (
            MEGATRON_LM_LOOP_BEFORE_INIT,
            "build_loaders (/root/Megatron-LM/pretrain_gpt.py:198)",
            "megatron/training",
        ),
    ],
    ids=["megatron-core-checkout", "megatron-lm-clone"],
)
def test_advice_names_the_users_frame_not_the_checkouts(
    pasted: str, users_frame: str, never_named: str
) -> None:
    d = explained(pasted, "--no-embed")
    actions = [a for f in d["fix_patterns"] for a in f["actions"]]
    named = [a for a in actions if "init_process_group" in a and "(/" in a]
    assert named, actions
    assert users_frame in named[0]
    assert not any(never_named in a for a in actions)


# A project's own `datasets/` folder (named like Hugging Face's package): the IndexError is
# raised in the user's code, and every part of triage reads that frame the same way
OWN_DATASETS_FOLDER = """\
Traceback (most recent call last):
  File "/workspace/proj/train.py", line 88, in <module>
    for batch in loader:
  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 631, \
in __next__
    data = self._next_data()
  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/_utils/fetch.py", line 51, \
in fetch
    data = [self.dataset[idx] for idx in possibly_batched_index]
  File "/workspace/proj/datasets/coco.py", line 57, in __getitem__
    label = self.labels[idx]
IndexError: list index out of range"""


def test_an_error_in_the_users_own_datasets_folder_is_read_as_their_code() -> None:
    d = explained(OWN_DATASETS_FOLDER, "--no-embed")
    rules = {e["why"] for e in d["evidence"]}
    assert "generic-exception-user-code" in rules, rules
    assert "generic-exception-library-code" not in rules, rules
    actions = [a for f in d["fix_patterns"] for a in f["actions"]]
    assert any(
        a.startswith("Fix the code at __getitem__ (/workspace/proj/datasets/coco.py:57)")
        for a in actions
    ), actions
    assert not any("comes from inside the framework" in a for a in actions), actions
