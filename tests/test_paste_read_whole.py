"""`triage explain` reads what `triage rules check` reads: a library's message that a paste
wraps over lines, or whose context stands on a line the parser kept no event of, is matched
over the paste's text, quoted from its own lines; pieces that each stood in an event of their
own are not joined, and a generic rule's frame test never reads the raw, prefixed lines."""

from __future__ import annotations

from click.testing import CliRunner

from tests.cli_runs import explained
from triage.cli import main

# DeepSpeed's engine refuses a torch optimizer under ZeRO-Offload
# (deepspeed/runtime/engine.py, `zero_force_ds_cpu_optimizer`); the issue wrapped it at 72
# columns, so the parser's event holds only its first line
OFFLOAD_WITH_TORCH_ADAM = """\
Traceback (most recent call last):
  File "/home/u/finetune.py", line 88, in <module>
    engine, optimizer, _, _ = deepspeed.initialize(args=args, model=model, optimizer=optimizer)
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 1253, in _configure_optimizer
    raise ZeRORuntimeException(msg)
deepspeed.runtime.zero.utils.ZeRORuntimeException: You are using ZeRO-Offload with a client provided
optimizer (<class 'torch.optim.adam.Adam'>) which in most cases will yield poor performance.
Please either use deepspeed.ops.adam.DeepSpeedCPUAdam or set an optimizer in your ds-config
(https://www.deepspeed.ai/docs/config-json/#optimizer-parameters). If you really want to use a
custom optimizer w. ZeRO-Offload and understand the performance impacts you can also set
<"zero_force_ds_cpu_optimizer": false> in your configuration file."""

# accelerate logs the FSDP save at INFO (accelerate/accelerator.py `save_state` ->
# `save_fsdp_model`); the parser keeps no event of that line, only the watchdog's
FSDP_SAVE_TIMES_OUT = """\
INFO:accelerate.accelerator:Saving FSDP model
[rank3]:[E ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout: \
WorkNCCL(SeqNum=9121, OpType=_ALLGATHER_BASE, NumelIn=65536000, NumelOut=524288000, \
Timeout(ms)=1800000) ran for 1800092 milliseconds before timing out."""

# a rank-prefixed traceback that raised inside ColossalAI's own modeling code: the library's
# frame, read wherever the `[rank6]:` prefix stands
PREFIXED_LIBRARY_FRAME = """\
[rank6]: Traceback (most recent call last):
[rank6]:   File "/workspace/train.py", line 57, in <module>
[rank6]:     outputs = model(**batch)
[rank6]:   File "/opt/py/site-packages/colossalai/shardformer/modeling/llama.py", line 93, in \
llama_model_forward
[rank6]:     input_shape = hidden_states.shape[:-1]
[rank6]: AttributeError: 'NoneType' object has no attribute 'shape'"""


def test_a_wrapped_zero_offload_refusal_is_named_from_its_lines() -> None:
    d = explained(OFFLOAD_WITH_TORCH_ADAM, "--no-embed")
    assert d["symptoms"][0]["id"] == "S09", d["summary"]
    quoted = [e for e in d["evidence"] if e["why"] == "ds-offload-client-optimizer"]
    assert quoted, d["evidence"]
    # the quote is the message's own lines of the paste, from its first
    assert quoted[0]["line"] == 6 and "client provided" in quoted[0]["text"]


def test_a_watchdog_timeout_after_an_info_line_saving_the_fsdp_model_is_the_save() -> None:
    d = explained(FSDP_SAVE_TIMES_OUT, "--no-embed")
    assert d["symptoms"][0]["id"] == "S17", d["summary"]
    quoted = [e for e in d["evidence"] if e["why"] == "c10d-timeout-while-saving"]
    assert quoted and quoted[0]["line"] == 2, d["evidence"]
    # the save's gather on every rank, not the uneven-batches advice of a bare timeout
    assert d["root_causes"][0]["id"] == "R08", d["summary"]
    assert "every rank" in d["fix_patterns"][0]["actions"][0]


def test_rules_check_no_longer_reads_a_prefixed_library_frame_as_the_users_code() -> None:
    result = CliRunner().invoke(main, ["rules", "check", PREFIXED_LIBRARY_FRAME])
    assert result.exit_code == 0, result.output
    assert "generic-exception-user-code" not in result.output
    d = explained(PREFIXED_LIBRARY_FRAME, "--no-embed")
    assert "generic-exception-user-code" not in {e["why"] for e in d["evidence"]}
