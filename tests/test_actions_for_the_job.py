"""Actions are chosen for the job, said once, and never say a false thing.

- The frameworks a job runs on are the ones its lines name, weighted by how many: a Megatron
  job one of whose lines mentions FSDP runs on Megatron, and gets Megatron's advice.
- Advice that names only frameworks the job does not run on is not given.
- One action per idea: what several rules and the playbook say in their own words is said
  once, across the whole list of fixes.
- A fact in an action is one a sentence can name: never a Python repr; "ranks 0, 1", not
  "rank 0, 1"; titles keep their capitals ("NaN", "ZeRO-1/2").
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import regex

from triage import knowledge, pipeline
from triage.analysis import correlate
from triage.knowledge.actions import JobConditions, parse_action
from triage.model import Diagnosis

ROOT = Path(__file__).resolve().parent.parent
OOM = (
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
    "a total capacity of 79.15 GiB of which 1.21 GiB is free."
)


def _megatron_log(mentions_fsdp: bool) -> str:
    lines = [
        f"[2026-12-01 10:00:{i % 60:02d}] iteration {i:6d}/ 500000 | consumed samples: {i * 512} "
        f"| elapsed time per iteration (ms): 812.4 | lm loss: 2.31 | megatron/training.py"
        for i in range(1, 80)
    ]
    if mentions_fsdp:
        lines.insert(3, "UserWarning: FSDP is not used in this run (use_torch_fsdp2=False)")
    frames = [
        ("training/training.py", 1102, "train"),
        ("training/training.py", 602, "train_step"),
        ("core/pipeline_parallel/schedules.py", 412, "forward_backward_no_pipelining"),
        ("core/pipeline_parallel/schedules.py", 275, "forward_step"),
        ("core/models/gpt/gpt_model.py", 310, "forward"),
        ("core/transformer/transformer_block.py", 549, "forward"),
        ("core/transformer/transformer_layer.py", 381, "forward"),
        ("core/transformer/mlp.py", 133, "forward"),
    ]
    lines += ["Traceback (most recent call last):"]
    for path, line, func in frames:
        lines += [
            f'  File "/workspace/Megatron-LM/megatron/{path}", line {line}, in {func}',
            "    x",
        ]
    lines += [OOM]
    return "\n".join(lines) + "\n"


def _actions(d: Diagnosis) -> list[str]:
    return [a for fix in d.fix_patterns for a in fix.actions]


def test_frameworks_are_weighted_by_how_many_lines_name_them() -> None:
    frameworks = knowledge.shipped().frameworks
    megatron = _megatron_log(mentions_fsdp=True).splitlines()
    assert frameworks.detect(megatron)[0] == ("megatron",)
    # both named often: both run (an FSDP job under Megatron's own trainer)
    both = [*megatron, *["torch/distributed/fsdp/_runtime_utils.py line 1185"] * 20]
    assert set(frameworks.detect(both)[0]) == {"megatron", "fsdp"}


def test_a_megatron_oom_that_mentions_fsdp_once_gets_megatron_advice(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_text(_megatron_log(mentions_fsdp=True), encoding="utf-8")
    d = pipeline.diagnose([str(tmp_path)])
    said = " ".join(_actions(d))
    assert "--use-distributed-optimizer" in said or "pipeline-parallel" in said
    assert not re.search(r"\bFSDP\b|ShardingStrategy|DeepSpeed|ZeRO", said), said


def test_a_deepspeed_oom_is_never_told_to_move_to_fsdp_or_ddp() -> None:
    paste = (
        "[2026-12-01 10:00:02,411] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: "
        "version=0.16.4\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/deepspeed/runtime/engine.py", line 1976, '
        "in backward\n"
        "    self.optimizer.backward(loss)\n"
        f"{OOM}\n"
    )
    said = " ".join(_actions(pipeline.explain(paste)))
    assert "ZeRO" in said
    assert not re.search(r"\bFSDP\b|\bDDP\b|DistributedDataParallel", said), said


def test_advice_naming_the_jobs_own_file_is_not_taken_for_another_frameworks() -> None:
    """An FSDP job's script is called `stage3_train.py`: "fix the code at forward
    (stage3_train.py:37)" names the job's own file, not DeepSpeed's `stage3_*` settings."""
    paste = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/workspace/stage3_train.py", line 90, in <module>\n'
        "[rank1]:     loss = model(batch)\n"
        '[rank1]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/fsdp/'
        'fully_sharded_data_parallel.py", line 849, in forward\n'
        "[rank1]:     output = self._fsdp_wrapped_module(*args, **kwargs)\n"
        '[rank1]:   File "/workspace/stage3_train.py", line 37, in forward\n'
        "[rank1]:     idx = self.vocab[token]\n"
        "[rank1]: KeyError: 'label'\n"
    )
    said = _actions(pipeline.explain(paste))
    assert any("(/workspace/stage3_train.py:37)" in action for action in said), said


def test_advice_that_names_no_framework_reaches_a_paste_that_names_none() -> None:
    # nothing says what the job runs on: the general advice stays (it names DDP and FSDP)
    said = " ".join(_actions(pipeline.explain(OOM)))
    assert "FSDP" in said


@cache
def _bundle(name: str) -> Diagnosis:
    return pipeline.diagnose([str(ROOT / "corpus_samples" / name / "bundle")])


def test_one_action_per_idea_across_every_fix_listed() -> None:
    ideas = knowledge.load().playbook.same_advice
    d = _bundle("skip_collective_empty_val_shard")
    for idea, pattern in ideas.items():
        saying = [a for a in _actions(d) if pattern.search(a)]
        assert len(saying) <= 1, f"{idea} said {len(saying)} times: {saying}"
    # the quick-start report once said "call the same collectives" four times in five
    first = d.fix_patterns[0].actions
    assert sum("same collective" in a for a in first) == 1


def test_no_action_repeats_itself_in_other_words_in_any_bundle() -> None:
    ideas = knowledge.load().playbook.same_advice
    for bundle in sorted((ROOT / "corpus_samples").glob("*/bundle")):
        said = _actions(_bundle(bundle.parent.name))
        for idea, pattern in ideas.items():
            assert sum(bool(pattern.search(a)) for a in said) <= 1, (bundle.parent.name, idea)


def test_a_fact_that_is_a_record_is_never_quoted() -> None:
    problems: list[tuple[str, str]] = []
    action = parse_action(
        [
            "Rank {ranks} issued another collective at `{collective}`.",
            "Rank {ranks} issued another collective than the others.",
        ],
        "test",
        lambda item, msg: problems.append((item, msg)),
    )
    assert action is not None and not problems
    record = {"op": "barrier", "seq": 22, "input_sizes": []}
    assert action.fill({"ranks": [2], "collective": record}, JobConditions()) == (
        "Rank 2 issued another collective than the others."
    )
    assert action.fill({"ranks": [0, 1], "collective": "barrier"}, JobConditions()) == (
        "Ranks 0, 1 issued another collective at `barrier`."
    )
    assert action.fill(
        {"ranks": [0, 1, 2, 3], "collective": "barrier"}, JobConditions()
    ).startswith("Ranks 0-3 ")


def test_reports_keep_titles_capitals_and_never_nest_a_frame_in_itself() -> None:
    everything = []
    for bundle in sorted((ROOT / "corpus_samples").glob("*/bundle")):
        d = _bundle(bundle.parent.name)
        everything += [f.why for f in d.fix_patterns] + _actions(d)
    text = "\n".join(everything)
    assert not regex.search(r"\bnaN\b|\bzeRO\b|\bnCCL\b", text)
    assert not re.search(r"\brank \d+, \d+", text), "rank 0, 1"
    assert not re.search(r"(\w+) \(\1 \(", text), "upload (upload (...))"
    assert not re.search(r"\{'\w+':", text), "a Python repr"


GPU_ADVICE = re.compile(r"\bCUDA\b|\bGPUs?\b|\bfp16\b|\bbf16\b|flash-attn|TransformerEngine|apex")


def test_a_job_its_environment_report_shows_on_cpus_gets_no_gpu_advice() -> None:
    """The nan and segfault bundles ran on gloo with `Is CUDA available: False` in their
    collect_env: fp16, CUDA_LAUNCH_BLOCKING or flash-attn advice would be for another job."""
    for name in ("nan_from_one_rank_shard", "segfault_native_augment", "second_node_never_joins"):
        parsed = pipeline.read_inputs([str(ROOT / "corpus_samples" / name / "bundle")])
        assert correlate(parsed).facts.device == "cpu", name
        d = pipeline.diagnose_parsed(parsed)
        said = [a for f in d.fix_patterns for a in f.actions]
        assert said, name
        assert not [a for a in said if GPU_ADVICE.search(a)], (name, said)


def test_the_device_condition_keeps_gpu_advice_where_nothing_says_cpu() -> None:
    problems: list[tuple[str, str]] = []
    action = parse_action(
        [
            {"text": "Use bf16 instead of fp16.", "when": {"device": "gpu"}},
            {"text": "Look at the batch that made the NaN.", "when": {"device": "cpu"}},
        ],
        "test",
        lambda item, msg: problems.append((item, msg)),
    )
    assert action is not None and problems == []
    assert (
        action.fill({}, JobConditions()) == "Use bf16 instead of fp16."
    )  # a paste: nothing says CPU
    assert action.fill({}, JobConditions(device="gpu")) == "Use bf16 instead of fp16."
    assert action.fill({}, JobConditions(device="cpu")) == "Look at the batch that made the NaN."
    parse_action(
        {"text": "x", "when": {"device": "tpu"}}, "bad", lambda i, m: problems.append((i, m))
    )
    assert problems and "device" in problems[-1][1]


def test_the_same_advice_in_other_words_is_given_once() -> None:
    """Raising the timeout, lowering the learning rate, one collective order for every rank:
    a rule's wording and the playbook's are one step for the user (review of the bundles)."""
    once = {
        "rank0_preprocessing_exceeds_timeout": r"(?i)\braise\b.{0,40}timeout",
        "nan_from_one_rank_shard": r"(?i)^lower the learning rate",
        "process_groups_entered_out_of_order": (
            r"(?i)same order|outside the branch|same collectives"
        ),
    }
    for name, idea in once.items():
        d = pipeline.diagnose([str(ROOT / "corpus_samples" / name / "bundle")])
        said = [a for f in d.fix_patterns for a in f.actions if re.search(idea, a)]
        assert len(said) == 1, (name, said)
