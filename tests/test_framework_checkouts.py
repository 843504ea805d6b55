"""A framework cloned and run from its checkout (`pip install -e .` in /root/Megatron-LM, a
home folder's DeepSpeed) is still the framework: its frames are library code wherever the
checkout lives (rules/frames.yaml), and advice names the user's own line."""

from __future__ import annotations

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


def test_advice_names_the_script_not_megatron_cores_checkout_under_root() -> None:
    d = explained(MEGATRON_CHECKOUT_BEFORE_INIT, "--no-embed")
    actions = [a for f in d["fix_patterns"] for a in f["actions"]]
    named = [a for a in actions if "init_process_group" in a and "(/" in a]
    assert named, actions
    assert "build_loaders (/workspace/pretrain_gpt.py:198)" in named[0]
    assert not any("megatron/core" in a for a in actions)


def test_a_checkouts_package_is_library_code_and_its_examples_are_the_users() -> None:
    frames = knowledge.shipped().frames
    assert frames.is_library("/home/u/DeepSpeed/deepspeed/runtime/zero/stage3.py")
    assert frames.is_library("/mnt/code/transformers/src/transformers/trainer.py")
    assert not frames.is_library("/home/u/transformers/examples/pytorch/run_clm.py")
    # a folder of the user's own named like a library is no checkout of it
    assert not frames.is_library("/home/u/project/src/deepspeed/train_loop.py")


# A clone of Megatron-LM: its training loop (megatron/training/) is the code its users edit,
# Megatron Core (megatron/core/) the library it calls
MEGATRON_LM_TRAINING_LOOP = """\
Traceback (most recent call last):
  File "/root/Megatron-LM/pretrain_gpt.py", line 278, in <module>
    pretrain(
  File "/root/Megatron-LM/megatron/training/training.py", line 386, in pretrain
    iteration, num_floating_point_operations_so_far = train(
  File "/root/Megatron-LM/megatron/training/training.py", line 1480, in train
    lr = stats["learning-rate"]
KeyError: 'learning-rate'"""

MEGATRON_LM_CORE = """\
Traceback (most recent call last):
  File "/root/Megatron-LM/pretrain_gpt.py", line 278, in <module>
    pretrain(
  File "/root/Megatron-LM/megatron/training/training.py", line 386, in pretrain
    model, optimizer, opt_param_scheduler = setup_model_and_optimizer(
  File "/root/Megatron-LM/megatron/core/optimizer/__init__.py", line 412, in get_megatron_optimizer
    param_groups = _get_param_groups(model_chunks, no_weight_decay_cond, scale_lr_cond)
  File "/root/Megatron-LM/megatron/core/optimizer/__init__.py", line 98, in _get_param_groups
    key = (wd_mult, _lr_mult, is_expert_parallel, is_decoupled)
KeyError: 'decoupled_lr'"""


def test_a_keyerror_in_megatron_lms_training_loop_is_the_users_code() -> None:
    """The generic layer asks the same frames knowledge as the culprit logic: a checkout's
    megatron/training/ raised it, so the user is told to fix their own line, not to wait for
    a framework release."""
    d = explained(MEGATRON_LM_TRAINING_LOOP, "--no-embed")
    rules = {e["why"] for e in d["evidence"]}
    assert "generic-exception-user-code" in rules, rules
    assert "generic-exception-library-code" not in rules, rules
    actions = [a for f in d["fix_patterns"] for a in f["actions"]]
    assert any(
        "Fix the code at train (/root/Megatron-LM/megatron/training/training.py:1480)" in a
        for a in actions
    ), actions


def test_a_keyerror_in_megatron_core_of_the_same_checkout_is_the_frameworks() -> None:
    d = explained(MEGATRON_LM_CORE, "--no-embed")
    rules = {e["why"] for e in d["evidence"]}
    assert "generic-exception-library-code" in rules, rules
    assert "generic-exception-user-code" not in rules, rules
    actions = [a for f in d["fix_patterns"] for a in f["actions"]]
    assert not any("in your own script" in a for a in actions), actions
