"""Whole jobs as they really are, through the CLI, on real logs third parties committed.

Every case here is from the reference part of `corpus_samples/third_party/` (the URL-hash
split of bench/eval_jobs.py): rules may be written from these, never from the held-out part,
and a test that read a held-out case would leak it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.cli_runs import advice_of
from triage.cli import main

CASES = Path(__file__).resolve().parents[1] / "corpus_samples" / "third_party"


def _held_out(url: str) -> bool:
    digest = hashlib.sha256(url.strip().rstrip("/").lower().encode()).hexdigest()
    return int(digest, 16) % 10 < 3


def _files(case: str) -> list[str]:
    folder = CASES / case
    meta = json.loads((folder / "case.json").read_text(encoding="utf-8"))
    assert not _held_out(meta["url"]), f"{case} is held out: no test may read it"
    return [str(p) for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "case.json"]


def _diagnose(case: str, *, embed: bool = False) -> dict[str, Any]:
    flags = [] if embed else ["--no-embed"]
    result = CliRunner().invoke(main, [*_files(case), *flags, "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _diagnose_lines(tmp_path: Path, name: str, lines: list[str]) -> dict[str, Any]:
    """Diagnose a log of these lines, written to `name`, through the CLI."""
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, [str(path), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _top_symptom_score(d: dict[str, Any]) -> float:
    return d["symptoms"][0]["score"] if d["symptoms"] else 0.0


def test_a_healthy_fp16_run_with_loss_scale_overflows_is_finished_with_no_symptom() -> None:
    # DeepSpeed-Chat step 1: 139 `OVERFLOW! Rank 0 Skipping step` lines of dynamic loss scaling,
    # then every process of the launcher exits 0
    d = _diagnose("a_dschat_step1_sft_opt13b")
    assert d["outcome"]["id"] == "succeeded"
    assert "exit 0" in d["outcome"]["why"]
    assert _top_symptom_score(d) < 0.3
    assert d["culprit_ranks"] == [] and d["first_failure"] is None


def test_a_slurm_time_limit_is_a_stop_on_purpose_not_a_failure() -> None:
    d = _diagnose("b_attnbench_megatron_srun_40rank_time_limit")
    assert d["outcome"]["id"] == "stopped"
    assert "time limit" in d["outcome"]["why"]
    assert any("DUE TO TIME LIMIT" in e["text"] for e in d["outcome"]["evidence"])
    assert _top_symptom_score(d) < 0.3


def test_a_user_scancel_is_stopped_and_never_host_oom() -> None:
    d = _diagnose("a_bigscience_meg_gpt2_n8_scancel")
    assert d["outcome"]["id"] == "stopped"
    assert "scancel" in d["outcome"]["why"]
    assert not any(s["id"] == "S15" and s["score"] >= 0.3 for s in d["symptoms"])


def test_a_ctrl_c_under_the_deepspeed_launcher_is_stopped_although_tracebacks_follow() -> None:
    # every rank prints a garbled KeyboardInterrupt traceback, and the launcher's own handler
    # raises a NameError while it kills the workers
    d = _diagnose("a_msmegads_random_ltd_baseline_ctrlc")
    assert d["outcome"]["id"] == "stopped"
    assert _top_symptom_score(d) < 0.3


def test_a_log_that_ends_mid_training_is_incomplete_even_with_an_op_report_at_its_top() -> None:
    d = _diagnose("a_msmegads_moe_tokendrop_logends")
    assert d["outcome"]["id"] == "incomplete"
    assert "step 120" in d["outcome"]["why"]
    assert d["inputs"][0]["kind"] == "rank_log"
    assert _top_symptom_score(d) < 0.3


def test_warnings_while_workers_start_are_no_failure_and_a_loading_bar_is_no_last_step() -> None:
    # verl on Ray: vLLM's version-file warning (the ImportError's text on its next line) and
    # wandb's "git root error" print while the workers start; the committed log ends before
    # the first step, after a `Loading checkpoint shards ... 2/2` bar
    d = _diagnose("b_logic_rl_verl_reinforcepp_log_incomplete")
    assert d["outcome"]["id"] not in ("failed", "succeeded"), d["outcome"]
    assert _top_symptom_score(d) < 0.3, d["symptoms"][:1]


def test_a_setup_progress_bar_is_not_the_training_loops_last_step(tmp_path: Path) -> None:
    # a bar that loads or prepares (transformers' shards, datasets' map) reaches 100% and its
    # last count; the training loop's own progress says where the job stood
    (tmp_path / "train.log").write_text(
        "Loading checkpoint shards: 100%|##########| 2/2 [00:05<00:00,  2.55s/it]\n"
        + "".join(f" iteration {i:8d}/ 1000 | lm loss: 7.1E+00 |\n" for i in (10, 20, 30))
        + "Map (num_proc=8): 100%|##########| 5000/5000 [00:02<00:00, 2100.12 examples/s]\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.output)["outcome"]
    assert outcome["id"] == "incomplete", outcome
    assert "30" in outcome["why"] and "5000" not in outcome["why"], outcome


def test_the_batch_scripts_own_error_before_the_launch_does_not_name_the_ranks_failure(
    tmp_path: Path,
) -> None:
    # a Slurm script ran the `wandb` CLI under the login node's Python before `srun -l` started
    # the ranks (the traceback is untagged, above every tagged line); rank 3 then ran out of
    # GPU memory and the others were stopped
    preamble = [
        "Traceback (most recent call last):",
        '  File "/users/u/.local/bin/wandb", line 5, in <module>',
        "    from wandb.cli.cli import cli",
        '  File "/users/u/.local/lib/python3.6/site-packages/wandb/util.py", line 28, in <module>',
        "    from dataclasses import asdict, is_dataclass",
        "ModuleNotFoundError: No module named 'dataclasses'",
    ]
    ranks = [f"{r}:  iteration       10/    1000 | lm loss: 7.1E+00 |" for r in range(4)]
    failure = [
        "3: Traceback (most recent call last):",
        '3:   File "/work/pretrain_gpt.py", line 300, in <module>',
        "3:     loss.backward()",
        "3: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has "
        "a total capacity of 79.10 GiB of which 1.21 GiB is free.",
        "srun: error: nid001: task 3: Exited with exit code 1",
    ]
    (tmp_path / "job.err").write_text(
        "\n".join([*preamble, *ranks, *failure]) + "\n", encoding="utf-8"
    )
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert d["symptoms"][0]["id"] == "S14", d["symptoms"][:2]
    assert all(s["id"] != "S02" or s["score"] < 0.3 for s in d["symptoms"]), d["symptoms"][:3]


def test_an_op_report_at_the_top_does_not_make_a_whole_pdsh_log_an_environment_report() -> None:
    d = _diagnose("a_starksim_dual8_ib_pdsh_done")
    assert d["inputs"][0]["kind"] == "rank_log"
    assert d["outcome"]["id"] == "succeeded"
    assert "8 worker processes exit 0" in d["outcome"]["why"]


def test_a_deepspeed_launcher_oom_blames_the_oom_not_the_last_spawned_rank() -> None:
    d = _diagnose("a_gptneox_llemma_debug_oom")
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"][0]["id"] == "S14"
    # the launcher's `exits with return code` line names its last command (--local_rank=7)
    assert 7 not in d["culprit_ranks"]


def test_a_watchdog_timeout_is_a_hang_not_a_death_by_signal() -> None:
    d = _diagnose("a_torchtitan_qwen3_run285_allgather_timeout")
    assert d["outcome"]["id"] == "hung"
    assert d["symptoms"][0]["id"] == "S17"
    # only rank 0's output is kept and every rank exited -6: each watchdog ended its own
    # process the same way, so no rank is named as the one the others waited for; nor are
    # the watchdog's own diagnostics (its C++ stack frames, `Fatal Python error: Aborted`)
    # the failure
    assert d["culprit_ranks"] == []
    assert "Watchdog caught collective operation timeout" in d["first_failure"]["text"]


def test_a_container_runtimes_time_stamps_hide_no_rank_prefix() -> None:
    # AReaL under docker (`docker logs --timestamps`): every line starts with an RFC 3339
    # stamp, then torch's `[rank0]:` on the traceback; the one trainer process is rank 0
    d = _diagnose("e_areal_pr_docker_torchrun_1gpu_grpo_cuda_oom_beside_sglang_twice")
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"][0]["id"] == "S14"
    assert d["culprit_ranks"] == [0]


def test_vllm_loading_its_shards_is_no_training_step_taken_past_a_failure() -> None:
    # SkyRL's vLLM rollout engine dies of a busy GPU; the other engines go on printing
    # vLLM's `Loading safetensors checkpoint shards: 100% Completed | 1/1`: set-up, not a
    # training loop that reached its last step, so the job failed, it was not still running
    d = _diagnose("e_skyrl_pr_ray_vllm_engine_cuda_device_busy_actor_died")
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert d["symptoms"][0]["id"] == "S04"


def test_interleaved_watchdog_teardowns_of_many_ranks_are_no_failure_of_their_own() -> None:
    # 16 ranks on 2 MI300 nodes under srun -l: every rank's watchdog but one reports the first
    # all-reduce timed out, then their uncaught c10::DistBackendErrors interleave into garbled
    # `terminate called after throwing ...` lines on one stream; the job hung, it did not fail
    d = _diagnose("e_rocm_megatron_srun_l_2node_mi300_first_allreduce_watchdog_hang")
    assert d["outcome"]["id"] == "hung", d["outcome"]
    assert d["symptoms"][0]["id"] == "S17"
    assert "terminate called" not in (d["first_failure"] or {}).get("text", "")


def test_the_watchdogs_own_diagnostics_are_not_the_failure_nor_name_a_laggard(
    tmp_path: Path,
) -> None:
    # rank 0's watchdog caught the timeout of all-reduce #20585 that it had enqueued (last
    # enqueued 20589): it waited, it was not the rank the others waited for
    lines = [
        "[rank0]:[E709 17:05:38.161114220 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=20585, OpType=ALLREDUCE, NumelIn=1259621, NumelOut=1259621, Timeout(ms)=600000) ran for 600000 milliseconds before timing out.",  # noqa: E501
        "[rank0]:[E709 17:05:38.162814866 ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 20585 PG status: last enqueued work: 20589, last completed work: 20584",  # noqa: E501
        "[rank0]:[E709 17:05:38.162832798 ProcessGroupNCCL.cpp:670] Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.",  # noqa: E501
        "[rank0]:[E709 17:05:38.162895613 ProcessGroupNCCL.cpp:2106] [PG ID 0 PG GUID 0(default_pg) Rank 0] First PG on this rank to signal dumping.",  # noqa: E501
    ]
    d = _diagnose_lines(tmp_path, "rank0.log", lines)
    assert d["outcome"]["id"] == "hung"
    assert d["symptoms"][0]["id"] == "S17"
    assert d["culprit_ranks"] == []
    assert "Watchdog caught" in d["first_failure"]["text"]


def test_an_srun_dash_l_job_that_failed_names_the_failure_of_its_ranks() -> None:
    d = _diagnose("b_attnbench_megatron_srun_56rank_resume_iters_mismatch")
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"][0]["id"] == "S29"
    assert "OptimizerParamScheduler" in d["outcome"]["why"]


def test_tasks_srun_killed_while_it_ended_the_step_are_survivors_not_host_oom() -> None:
    # 56 ranks: the even ranks' data iterator ran out (StopIteration), the odd ranks' broadcast
    # timed out, then srun said `Terminating StepId=...` and reported 14 nodes' tasks `Killed`
    d = _diagnose("b_attnbench_megatron_srun_56rank_data_exhausted_then_bcast_timeout")
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"][0]["id"] == "S08"
    assert not any(s["id"] == "S15" and s["score"] >= 0.3 for s in d["symptoms"])


def _srun_log(tmp_path: Path, terminating_first: bool) -> str:
    killed = "srun: error: node02: task 1: Killed"
    lines = [
        "0: [rank0]: iteration 120/1000 | lm loss: 2.31",
        "1: [rank1]: iteration 120/1000 | lm loss: 2.29",
        *(["srun: Terminating StepId=4242.0"] if terminating_first else []),
        killed,
        *([] if terminating_first else ["srun: Terminating StepId=4242.0"]),
        "srun: error: node01: task 0: Killed",
    ]
    path = tmp_path / "slurm-4242.out"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("terminating_first", [False, True])
def test_a_task_killed_before_srun_ends_the_step_stays_the_cause(
    tmp_path: Path, terminating_first: bool
) -> None:
    # the same kill report is the job's first fault when nothing came before it, and srun's
    # own SIGKILL of the step when it follows srun's `Terminating StepId=...`
    log = _srun_log(tmp_path, terminating_first)
    result = CliRunner().invoke(main, [log, "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    killed = [s for s in d["symptoms"] if s["id"] in ("S15", "S27") and s["score"] >= 0.3]
    assert bool(killed) is not terminating_first, d["symptoms"]
    if terminating_first:  # the fault shown is srun ending the step, not a victim of it
        assert "Terminating StepId" in d["outcome"]["why"]


def test_a_log_that_ends_while_the_job_still_sets_up_is_incomplete_not_unknown() -> None:
    # verl on Ray: workers build their FSDP models, wandb starts, then only raylet's
    # disk-space warnings until the file ends: no step, no error, no exit, no stop
    d = _diagnose("b_logic_rl_verl_reinforcepp_log_incomplete")
    assert d["outcome"]["id"] == "incomplete"
    assert "before any training step" in d["outcome"]["why"]
    assert _top_symptom_score(d) < 0.3


def test_earlier_slurm_jobs_appended_to_the_same_file_are_not_this_jobs_failures() -> None:
    # one slurm.out that a dozen sbatch runs appended to: the earlier ones failed on missing
    # datasets and a ValueError, or were cancelled; the last one trains until a user's scancel
    d = _diagnose("b_openvla_oft_fork_slurm_out_appended_jobs_scancel")
    assert d["outcome"]["id"] == "stopped"
    assert "JOB 267039" in d["outcome"]["evidence"][0]["text"]
    assert "earlier Slurm jobs" in d["outcome"]["why"]
    assert _top_symptom_score(d) < 0.3
    assert d["culprit_ranks"] == [] and d["first_failure"] is None


def test_runs_appended_to_one_nohup_out_before_the_last_one_finished_are_not_its_faults() -> None:
    # `nohup python train.py >> nohup.out` three times: an IndentationError, then TRL's "You
    # need to have PEFT library installed", then a GRPO run of 100 steps to the Trainer's
    # final metrics
    d = _diagnose("h_grpo_nohup_appended_two_failed_starts_then_trl_grpo_100_steps_done")
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert "earlier runs wrote to the same file (nohup.out up to line 17" in d["outcome"]["why"]
    assert _top_symptom_score(d) < 0.3, d["symptoms"][:1]
    assert d["first_failure"] is None


_EARLIER_RUN_DIED = [
    "Traceback (most recent call last):",
    '  File "/work/train.py", line 13, in <module>',
    "    from utils import build_model",
    '  File "/work/utils.py", line 87',
    "    return model",
    "IndentationError: unindent does not match any outer indentation level",
    "{'loss': 2.31, 'learning_rate': 1e-05, 'epoch': 0.5}",
    "{'loss': 1.02, 'learning_rate': 0.0, 'epoch': 1.0}",
    "{'train_runtime': 812.4, 'train_samples_per_second': 3.9, 'train_steps_per_second': 0.12,"
    " 'train_loss': 1.6, 'epoch': 1.0}",
]


def test_a_script_that_died_then_trained_to_its_end_in_the_same_file_was_run_twice(
    tmp_path: Path,
) -> None:
    # an uncaught exception ends the Python process: the training and end line after it in a
    # file one process wrote are a later run's, and that run finished
    d = _diagnose_lines(tmp_path, "nohup.out", _EARLIER_RUN_DIED)
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert "1 ended by an uncaught exception" in d["outcome"]["why"]
    assert not any(s["id"] == "S18" for s in d["symptoms"][:1]), d["symptoms"][:1]


def test_one_ranks_death_in_a_file_two_ranks_share_is_still_the_jobs_fault(
    tmp_path: Path,
) -> None:
    # the same lines, one rank's: another rank went on and printed the end line, so the file
    # was not written by one process after another, and the fault stays
    lines = [f"[rank1]: {line}" for line in _EARLIER_RUN_DIED[:6]]
    lines += [f"[rank0]: {line}" for line in _EARLIER_RUN_DIED[6:]]
    d = _diagnose_lines(tmp_path, "nohup.out", lines)
    assert "earlier runs" not in d["outcome"]["why"], d["outcome"]
    assert d["symptoms"] and d["symptoms"][0]["score"] >= 0.3, d["symptoms"][:1]


# transformers' example-script logging (`%m/%d/%Y %H:%M:%S - LEVEL - name - message`): a
# fine-tuning that died loading its adapter, then a later run of the same command that trained
# until the file was copied
_RERUN_AFTER_DEATH = [
    "07/15/2023 12:51:00 - INFO - dsets.loader - Loading dataset WebQSP_train.json...",
    "07/15/2023 12:51:00 - WARNING - dsets.loader - Checksum failed: missing SHA-1 hash value in"
    " dataset_info.json or too many files.",
    "Traceback (most recent call last):",
    '  File "/home/u/ChatGLM-Efficient-Tuning/src/train_bash.py", line 21, in <module>',
    "    main()",
    '  File "/home/u/ChatGLM-Efficient-Tuning/src/pet/core/adapter.py", line 58, in init_adapter',
    '    assert load_trainable_params(model, model_args.checkpoint_dir[0]), "Model checkpoint is'
    ' not correctly loaded."',
    "AssertionError: Model checkpoint is not correctly loaded.",
    "07/15/2023 13:02:45 - INFO - pet.core.parse - Process rank: 0, device: cuda:0, n_gpu: 1",
    "07/15/2023 13:02:45 - WARNING - dsets.loader - Checksum failed: missing SHA-1 hash value in"
    " dataset_info.json or too many files.",
    " 66%|██████▌   | 14253/21500 [15:32:24<8:04:01,  4.01s/it]",
    " 66%|██████▋   | 14254/21500 [15:32:28<8:03:32,  4.00s/it]",
]


def test_a_run_that_trained_on_after_an_earlier_runs_death_in_the_same_file_is_the_job(
    tmp_path: Path,
) -> None:
    # the AssertionError ended its process: the progress after it is a later run's, which met
    # no error; the checksum line is a logged warning
    d = _diagnose_lines(tmp_path, "result.txt", _RERUN_AFTER_DEATH)
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert "earlier runs wrote to the same file (result.txt up to line 8" in d["outcome"]["why"]
    assert _top_symptom_score(d) < 0.3, d["symptoms"][:1]
    assert d["first_failure"] is None


def test_one_processs_death_then_progress_then_the_launchers_errors_is_one_failed_run(
    tmp_path: Path,
) -> None:
    # untagged ranks sharing a file: one died, another printed a step, then torchrun reported
    # the failure. That is one run, and it failed
    lines = [
        *_RERUN_AFTER_DEATH[2:8],
        _RERUN_AFTER_DEATH[-1],
        "E0715 13:02:50.000000 1234 torch/distributed/elastic/multiprocessing/api.py:869] failed"
        " (exitcode: 1) local_rank: 1 (pid: 5678) of binary: /usr/bin/python3",
    ]
    d = _diagnose_lines(tmp_path, "train.log", lines)
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "earlier runs" not in d["outcome"]["why"]
    assert "AssertionError" in d["first_failure"]["text"], d["first_failure"]


# transformers 5's Trainer prints each float of its logs as a string of 4 significant digits
# (trainer_callback.py: f"{v:.4g}")
def _v5_logs(*losses: str) -> list[str]:
    lines = [
        f"{{'loss': '{loss}', 'grad_norm': '1.204', 'learning_rate': '4.9e-05', 'epoch': '{n}'}}"
        for n, loss in enumerate(losses, 1)
    ]
    return [" 33%|███▎      | 100/300 [02:11<04:22,  1.31s/it]", *lines]


def test_a_transformers_5_run_that_printed_its_final_metrics_finished(tmp_path: Path) -> None:
    lines = _v5_logs("2.31", "1.87", "1.62")
    lines.append(
        "{'train_runtime': '2918', 'train_samples_per_second': '9.19',"
        " 'train_steps_per_second': '0.575', 'train_loss': '0.7331', 'epoch': '3'}"
    )
    d = _diagnose_lines(tmp_path, "train.log", lines)
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert "'train_runtime': '2918'" in d["outcome"]["why"]


def test_a_transformers_5_run_whose_loss_went_nan_diverged(tmp_path: Path) -> None:
    d = _diagnose_lines(tmp_path, "train.log", _v5_logs("2.31", "nan", "nan"))
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "diverged" in d["outcome"]["why"]
    assert d["symptoms"][0]["id"] == "S19", d["symptoms"][:2]


def test_a_training_stopped_at_its_wall_clock_budget_finished_short_of_its_step_total() -> None:
    # a parameter-golf fork under torchrun: 20000 steps planned, a 600 s budget; the loop logs
    # `stopping_early: wallclock_cap ... step:5735/20000`, then serialization and evaluations
    d = _diagnose("j_paramgolf_fork_torchrun_8gpu_wallclock_cap_then_ttt_eval_done")
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert "stopping_early: wallclock_cap" in d["outcome"]["why"]
    assert _top_symptom_score(d) < 0.3, d["symptoms"][:1]


def test_a_fault_after_the_wall_clock_stop_failed_the_job_after_its_training(
    tmp_path: Path,
) -> None:
    lines = [
        "step:5700/20000 train_loss:2.0282 train_time:595325ms step_avg:104.45ms",
        "step:5735/20000 val_loss:1.9384 val_bpb:1.1480 train_time:600084ms step_avg:104.64ms",
        "stopping_early: wallclock_cap train_time:600084ms step:5735/20000",
        "Traceback (most recent call last):",
        '  File "/workspace/train_gpt.py", line 1312, in <module>',
        "    main()",
        '  File "/workspace/train_gpt.py", line 1280, in main',
        "    torch.save(quant_obj, 'final_model.int8.ptz')",
        "OSError: [Errno 28] No space left on device",
    ]
    d = _diagnose_lines(tmp_path, "train.log", lines)
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "after the job said it was done" in d["outcome"]["why"]


def test_a_failed_inference_step_is_named_by_its_own_reviewed_message_not_a_later_step() -> None:
    # srun ran two steps of one Slurm job: four tensor-parallel ranks of Megatron's inference
    # all hit "Inference must always gather TP logits" (a message whose atlas labels were
    # reviewed: the inference path), torchrun SIGTERMed the rest; then a second step's helper
    # script failed to import `src`. The job failed in its first step, in inference
    d = _diagnose("b_attnbench_megatron_srun_4rank_tp_inference_assert")
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"][0]["id"] == "S32", d["symptoms"][:3]
    assert all(s["id"] != "S02" for s in d["symptoms"][:3]), d["symptoms"][:3]


def test_a_later_steps_failure_does_not_name_the_jobs_failure(tmp_path: Path) -> None:
    # one Slurm job, two srun steps: the training step runs out of GPU memory and srun ends
    # it; the evaluation step that follows fails to import its package. The job failed in
    # training: the OOM is its symptom, the later import error is only quoted
    lines = [
        "0: [rank0]: Traceback (most recent call last):",
        '0: [rank0]:   File "/work/train.py", line 12, in <module>',
        "0: [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
        " GPU 0 has a total capacity of 79.11 GiB of which 1.02 GiB is free.",
        "srun: error: node07: task 0: Exited with exit code 1",
        "srun: Terminating StepId=5501.0",
        "0: Traceback (most recent call last):",
        '0:   File "/work/eval.py", line 3, in <module>',
        "0:     from evalkit.metrics import score",
        "0: ModuleNotFoundError: No module named 'evalkit'",
        "srun: error: node07: task 0: Exited with exit code 1",
        "srun: Terminating StepId=5501.1",
    ]
    d = _diagnose_lines(tmp_path, "5501.err", lines)
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert d["symptoms"][0]["id"] == "S14", d["symptoms"][:3]
    assert all(s["id"] != "S02" for s in d["symptoms"][:3]), d["symptoms"][:3]
    assert "OutOfMemoryError" in d["first_failure"]["text"]
    assert d["fix_patterns"][0]["id"] == "F5", d["fix_patterns"][:2]
    assert "a later job step failed too" in d["outcome"]["why"]


def test_mp_spawns_re_raise_is_not_the_first_failure_the_childs_own_error_is() -> None:
    # icefall under torch.multiprocessing.spawn: the parent re-raises process 0's failure as
    # `ProcessRaisedException:` and prints the child's traceback under it; the job failed
    # with the child's TypeError, which the headline and the first failure quote
    d = _diagnose("c_icefall_pr_mpspawn_3gpu_rir_transform_typeerror")
    assert d["outcome"]["id"] == "failed"
    assert "missing 1 required positional argument" in d["first_failure"]["text"]
    assert "missing 1 required positional argument" in d["outcome"]["why"]


def test_a_progress_bar_redrawn_at_its_step_after_an_oom_is_no_step_taken_past_it() -> None:
    # Oumi on one GPU: the first step's OOM traceback, then tqdm redraws `0/1000` as it
    # closes; the job failed at step 0, it was not still running
    d = _diagnose("d_lcn_llama_oumi_sbatch_1gpu_cuda_oom_step0")
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "OutOfMemoryError" in d["outcome"]["why"]
    assert d["symptoms"][0]["id"] == "S14"
    # Oumi's `DeviceRankInfo(world_size=1, rank=0, ...)` says the job is one process: the
    # traceback in the .err (no rank prefix) is rank 0's
    assert d["culprit_ranks"] == [0]


def test_a_transform_the_data_pipeline_cannot_call_is_a_data_loading_error() -> None:
    # icefall under mp.spawn: lhotse's dataset calls the user's cut transform as `tnfm(cuts)`
    # and the transform wants another argument; the traceback's innermost frame is lhotse's
    d = _diagnose("c_icefall_pr_mpspawn_3gpu_rir_transform_typeerror")
    assert d["symptoms"][0]["id"] == "S08"
    assert d["root_causes"][0]["id"] == "R27"
    actions = [a for f in d["fix_patterns"] for a in f.get("actions", [])]
    # the script called lhotse there; it did not raise the error itself
    assert not any("raised by the script" in a for a in actions), actions
    assert any("train.py:1134" in a and "inside the library" in a for a in actions), actions


def test_a_job_of_one_process_names_that_process_as_the_culprit() -> None:
    # Colossal-AI's inference test under mp.spawn states `world size: 1`; its traceback has no
    # rank prefix, and with one process it can only be rank 0's
    d = _diagnose("d_colossalai_pr_mpspawn_1rank_infer_device_side_assert")
    assert d["outcome"]["id"] == "failed"
    assert d["culprit_ranks"] == [0]
    assert d["symptoms"][0]["id"] == "S26"


def test_colossalai_runs_report_of_a_failed_command_is_no_launcher_failure() -> None:
    # `colossalai run` prints `Error: failed to run torchrun ...` for any non-zero exit of
    # the command; the training script's own output was not captured, so nothing says why
    d = _diagnose("d_colossalai_pr_colossalai_run_1gpu_sft_exit1_no_traceback")
    assert d["outcome"]["id"] == "failed"
    assert "failed to run torchrun" in d["outcome"]["why"]
    assert all(
        "exporting the environment" not in line
        for f in d["fix_patterns"]
        for line in [f.get("why", ""), *f.get("actions", [])]
    ), d["fix_patterns"]


def test_a_run_whose_loss_is_nan_on_its_last_steps_diverged_though_it_kept_stepping() -> None:
    # nanochat SFT on one GPU: the loss rises, then reads `loss: nan` from step 9 to the
    # last line (step 133); no exception, no exit: the run is lost all the same
    d = _diagnose("d_nanochat_pr_sft_1gpu_loss_nan_from_step9")
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "diverged" in d["outcome"]["why"]
    assert d["symptoms"][0]["id"] == "S19"


@pytest.mark.parametrize(
    ("last_line", "diverged"),
    [
        ("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.4}", True),
        # fp16 loss scaling skipped this step: its gradient norm is inf, its loss a number
        ("{'loss': 1.7342, 'grad_norm': inf, 'learning_rate': 1e-05, 'epoch': 0.4}", False),
    ],
)
def test_only_a_non_finite_loss_on_the_last_step_is_a_diverged_run(
    tmp_path: Path, last_line: str, diverged: bool
) -> None:
    lines = [
        "{'loss': 2.3456, 'grad_norm': 1.234, 'learning_rate': 1e-05, 'epoch': 0.1}",
        "{'loss': 2.1002, 'grad_norm': 1.101, 'learning_rate': 1e-05, 'epoch': 0.2}",
        last_line,
    ]
    d = _diagnose_lines(tmp_path, "train.log", lines)
    assert (d["outcome"]["id"] == "failed") is diverged, d["outcome"]
    assert any(s["id"] == "S19" for s in d["symptoms"][:1]) is diverged, d["symptoms"]


@pytest.mark.parametrize(
    ("case", "symptom"),
    [
        # torch_xla's xmp.spawn takes 1 or one host's devices, and was asked for 32
        ("d_aws_neuronx_nemo_xmp_spawn_32_devices_refused", "S09"),
        # the XRT client's global device map of a 2-node job lacks this process's device
        ("d_aws_neuronx_nemo_xmp_spawn_2node_xrt_device_map_check_failed", "S13"),
    ],
)
def test_torch_xla_launch_checks_name_the_layout_not_a_runtime_exception(
    case: str, symptom: str
) -> None:
    d = _diagnose(case)
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"][0]["id"] == symptom, d["symptoms"][:3]
    assert d["root_causes"][0]["id"] == "R06", d["root_causes"][:3]


def test_tcpstores_libuv_refusal_as_a_dist_store_error_starts_the_failure(tmp_path: Path) -> None:
    # torch >= 2.5 raises the store's libuv check as a DistStoreError, the family of a lost
    # store; it is the store's own refusal on a build without libuv, and says its remedy
    lines = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "C:\\work\\train.py", line 14, in <module>',
        '[rank0]:     dist.init_process_group("gloo")',
        "[rank0]: torch.distributed.DistStoreError: use_libuv was requested but PyTorch was built"
        " without libuv support, run with USE_LIBUV=0 to disable it.",
        "E1207 10:00:01.000000 1234 torch/distributed/elastic/multiprocessing/api.py:869] failed"
        " (exitcode: 1) local_rank: 0 (pid: 4242) of binary: C:\\Python311\\python.exe",
    ]
    d = _diagnose_lines(tmp_path, "train.log", lines)
    assert d["root_causes"][0]["id"] == "R04", d["root_causes"][:2]
    assert "USE_LIBUV=0" in json.dumps(d["fix_patterns"][:1])


def test_nemos_own_warning_level_is_read_and_its_model_instantiation_failure_named() -> None:
    # NeMo's logger writes `[NeMo W <date> exp_manager:966] ... will not error out.`: a warning
    # by its own level letter, not an error because it says `error`; the failure is the model
    # NeMo could not build (`[NeMo E ...] Model instantiation failed!` and its AttributeError)
    d = _diagnose("d_nemo_pr_bert_embedding_rank0_log_model_instantiation_failed")
    assert d["outcome"]["id"] == "failed"
    assert "AttributeError" in d["first_failure"]["text"], d["first_failure"]
    assert d["symptoms"][0]["id"] == "S06", d["symptoms"][:3]
    assert all("exp_manager" not in t["text"] for t in d["timeline"] if t["role"] == "initiating")


def _appended(tmp_path: Path, first_job: str) -> str:
    lines = [
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "train.py", line 9, in <module>',
        "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered",
        f"slurmstepd: error: *** JOB {first_job} ON node07 CANCELLED AT 2025-01-02T10:00:00 ***",
        "{'loss': 2.31, 'learning_rate': 1e-05, 'epoch': 0.1}",
        "slurmstepd: error: *** JOB 1002 ON node07 CANCELLED AT 2025-01-03T10:00:00 ***",
    ]
    path = tmp_path / "slurm.out"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("first_job", ["1001", "1002"])
def test_a_fault_before_a_cancel_of_the_same_job_id_is_still_this_jobs(
    tmp_path: Path, first_job: str
) -> None:
    # the same lines: when the first cancel names another job id it ended an earlier job, and
    # its fault is not this one's; when it names the same id, the fault is this job's own
    result = CliRunner().invoke(
        main, [_appended(tmp_path, first_job), "--no-embed", "-q", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    own_fault = first_job == "1002"
    assert (d["outcome"]["id"] == "failed") is own_fault, d["outcome"]
    assert any(s["id"] == "S26" for s in d["symptoms"][:1]) is own_fault, d["symptoms"]


def test_an_earlier_jobs_failure_is_not_read_as_the_failed_last_jobs_evidence(
    tmp_path: Path,
) -> None:
    # two runs of one sbatch script appended to slurm.out: the first hit an illegal memory
    # access and was cancelled, the second ran out of GPU memory and srun cancelled its step.
    # The report is the second job's: its OOM, not the earlier job's CUDA fault
    lines = [
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "train.py", line 9, in <module>',
        "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "slurmstepd: error: *** JOB 1001 ON node07 CANCELLED AT 2025-01-02T10:00:00 ***",
        "{'loss': 2.31, 'learning_rate': 1e-05, 'epoch': 0.1}",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "train.py", line 12, in <module>',
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0"
        " has a total capacity of 79.11 GiB of which 1.02 GiB is free.",
        "srun: error: node07: task 0: Exited with exit code 1",
        "slurmstepd: error: *** STEP 1002.0 ON node07 CANCELLED AT 2025-01-03T10:00:00 ***",
    ]
    d = _diagnose_lines(tmp_path, "slurm.out", lines)
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "earlier Slurm jobs" in d["outcome"]["why"]
    assert d["symptoms"][0]["id"] == "S14", d["symptoms"]
    quoted = json.dumps([d["evidence"], d["first_failure"], d["timeline"]])
    assert "illegal memory access" not in quoted


@pytest.mark.parametrize(
    "case",
    [
        # a set-up helper's `srun: error: ... Exited with exit code 1` above the ranks' first
        # tagged line; the benchmark step then runs and logs run_stop with status success
        "c_mlperf_v40_fujitsu_sd_nemo_srun_l_ok",
        # ten multiprocessing finalizer tracebacks (sem_unlink: FileNotFoundError) printed at
        # interpreter exit, after run_stop with status success
        "c_mlperf_v40_hpe_ssd_srun_teardown_tracebacks_ok",
        # nanochat prints `Total training time: 179.44m` once its loop is over
        "c_nanochat_pr_speedrun_d24_8gpu_done",
        # nanoGPT's `iter 6000` lines carry no total; its printed config says max_iters = 6000
        "c_nanogpt_pr_gpt2_resumed_iter1000_to_6000_done",
    ],
)
def test_a_run_that_finished_is_finished_whatever_noise_came_before_or_after(case: str) -> None:
    d = _diagnose(case)
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert _top_symptom_score(d) < 0.3


def test_every_worker_ended_by_sigterm_and_none_failed_is_a_stop_from_outside() -> None:
    # nanoGPT under torchrun at iter 9900 of 10000: both workers exit -15 at once, no error of
    # their own, and torchrun's ChildFailedError summary follows
    d = _diagnose("c_nanogpt_pr_linesearch_torchrun_2gpu_sigterm_near_end")
    assert d["outcome"]["id"] == "stopped", d["outcome"]
    assert not any(s["id"] == "S15" and s["score"] >= 0.3 for s in d["symptoms"])


_AGENT = "1454052 torch/distributed/elastic/multiprocessing/api.py"


def test_a_worker_that_failed_before_the_others_were_sigtermed_is_a_failure(
    tmp_path: Path,
) -> None:
    # torchrun stops the survivors of a failure with SIGTERM: one worker's own exit 1 says
    # the job failed, whatever the others' -15 say
    log = tmp_path / "torchrun.log"
    log.write_text(
        "\n".join(
            [
                "iter 10: loss 3.2",
                "[rank1]: Traceback (most recent call last):",
                '[rank1]:   File "train.py", line 9, in <module>',
                "[rank1]: ValueError: bad batch",
                f"E0330 06:18:42.1 {_AGENT}:874] failed (exitcode: 1) local_rank: 1 (pid: 11)",
                f"W0330 06:18:42.2 {_AGENT}:897] Sending process 10 closing signal SIGTERM",
                f"E0330 06:18:43.1 {_AGENT}:874] failed (exitcode: -15) local_rank: 0 (pid: 10)",
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, [str(log), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["outcome"]["id"] == "failed"


def test_a_first_failure_cut_by_another_ranks_lines_is_quoted_from_one_that_holds_its_error() -> (
    None
):
    # DeepSpeed-Chat: 16 ranks' tracebacks interleave and the first is cut after its first
    # frame; "first failure: `Traceback (most recent call last):`" said nothing, its frame
    # (`File "main.py", line 343, in <module>`) only where it was: the next traceback holds
    # the exception
    d = _diagnose("a_dschat_sft_llama7b_zero3_device_mismatch")
    assert "Traceback (most recent call last)" not in d["outcome"]["why"]
    assert d["first_failure"]["text"].startswith("RuntimeError: Expected all tensors")
    assert "RuntimeError: Expected all tensors" in d["outcome"]["why"]


def test_a_worker_the_launcher_names_without_a_rank_is_not_rank_none() -> None:
    # GPT-NeoX under the DeepSpeed launcher: `exits with return code = 1` names no rank
    d = _diagnose("a_gptneox_llemma_debug_oom")
    texts = [t["text"] for t in d["timeline"]]
    assert not any("rank(s) none" in t for t in texts)
    assert any(t.startswith("a worker exited 1") for t in texts), texts


def test_a_submitit_job_that_never_found_its_pickle_is_a_launch_failure() -> None:
    # llm.c under submitit: the job on the node waits 60 s for the pickled function and gives
    # up; the user's code never ran
    d = _diagnose("c_llmc_pr_submitit_srun_pickle_not_found")
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"][0]["id"] == "S05"
    assert d["root_causes"][0]["id"] == "R06"
    assert "shared" in d["fix_patterns"][0]["actions"][0]


def test_what_python_printed_and_ignored_is_not_the_jobs_failure() -> None:
    # verl with a TensorRT-LLM rollout at TP 8: eight engines torn down half-built print
    # `Exception ignored in: <function PyTorchModelEngine.__del__>` tracebacks, and a Ray
    # driver without a GPU warns `No CUDA runtime is found, using CUDA_HOME=...`; the failure
    # is the engine's build (an attention assert on the heads per TP rank)
    d = _diagnose("c_verl_pr_ray_trtllm_heads_not_divisible_by_tp")
    assert d["outcome"]["id"] == "failed"
    assert "cuda_graph_runner" not in d["outcome"]["why"]
    assert d["symptoms"][0]["id"] in ("S09", "S32", "S06"), d["symptoms"]
    assert not any(s["id"] == "S01" and s["score"] >= 0.3 for s in d["symptoms"])


def test_the_process_mp_spawn_says_died_is_the_culprit_on_one_node() -> None:
    # icefall under mp.spawn (3 processes, one node): the parent's join raises
    # `ProcessExitedException: process 0 terminated with signal SIGKILL`, no traceback of its own
    d = _diagnose("c_icefall_pr_mpspawn_3gpu_rank0_sigkill")
    assert d["outcome"]["id"] == "failed"
    assert d["culprit_ranks"] == [0]
    assert d["first_failure"]["rank"] == 0
    assert "ProcessExitedException" in d["first_failure"]["text"]


@pytest.mark.parametrize(
    "case", ["a_mlperf_v10_nvidia_unet3d_n13_diverged", "a_mlperf_v10_inspur_bert_notconverged"]
)
def test_an_mlperf_run_that_says_it_aborted_is_a_convergence_failure(case: str) -> None:
    # MLPerf's run_stop with status `aborted` (out of epochs, or `MODEL DIVERGED`) is the job's
    # own word that it failed: the rule's convergence failure leads, whatever the words of the
    # eval_accuracy lines resemble (the default settings: the similarity model read them S33)
    d = _diagnose(case, embed=True)
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"][0]["id"] == "S20", d["symptoms"]


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_every_format_leads_with_the_outcome(fmt: str) -> None:
    result = CliRunner().invoke(
        main, [*_files("a_bigscience_meg_gpt2_n64_timelimit"), "--no-embed", "-q", "--format", fmt]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Stopped on purpose" in out
    # the outcome comes before any section of the report
    assert out.index("Stopped on purpose") < min(
        (out.index(word) for word in ("Inputs", "Evidence") if word in out), default=len(out)
    )


def test_brief_leads_with_the_outcome() -> None:
    result = CliRunner().invoke(
        main, [*_files("a_dschat_step1_sft_opt13b"), "--no-embed", "-q", "--brief"]
    )
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("triage:") and "Finished: the launcher saw 16 worker" in first


def test_a_pasted_overflow_line_is_still_read_as_the_users_complaint() -> None:
    # the user who pastes it asks about it: in a paste the routine line still counts
    result = CliRunner().invoke(
        main,
        [
            "explain",
            "--no-embed",
            "--format",
            "json",
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1\n"
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1",
        ],
    )
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["symptoms"] and d["symptoms"][0]["id"] == "S19"


DIARY = """# Training diary, run 17

The job stopped making progress at step 4100. I attached py-spy to rank 3:

<details><summary>py-spy dump rank 3</summary>

```
Process 41210: python train.py --config big.yaml
Python v3.11.7 (/usr/bin/python3.11)

Thread 0x7F3A2C1FF740 (active): "MainThread"
    wait (torch/distributed/distributed_c10d.py:2215)
    barrier (torch/distributed/distributed_c10d.py:4159)
    save_checkpoint (train.py:212)
    main (train.py:301)
```
</details>
"""


def test_a_py_spy_dump_inside_a_markdown_diary_is_read_as_a_stack(tmp_path: Path) -> None:
    (tmp_path / "diary.md").write_text(DIARY, encoding="utf-8")
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert any(e["why"] == "pyspy-waiting-in-collective" for e in d["evidence"])
    # the prose's `step 4100` is no rank's progress: the job is not "still running"
    assert d["outcome"]["id"] != "incomplete"
    assert d["inputs"][0]["rank"] is None


def test_the_shipped_bundles_all_end_failed_or_hung() -> None:
    # real torchrun jobs that crashed or hung: none may be read as a job that ended well
    root = CASES.parent
    for bundle in sorted(root.glob("*/bundle")):
        result = CliRunner().invoke(main, [str(bundle), "--no-embed", "-q", "--format", "json"])
        assert result.exit_code == 0, result.output
        d = json.loads(result.output)
        expected = json.loads((bundle.parent / "expected.json").read_text(encoding="utf-8"))
        assert d["outcome"]["id"] in ("failed", "hung"), bundle.parent.name
        if d["outcome"]["id"] == "hung":
            assert expected["hang"], bundle.parent.name


def _nccl_init(rank: int, nranks: int, comm: str) -> str:
    return (
        f"node01:{4200 + rank}:{4300 + rank} [{rank}] NCCL INFO comm 0x55d0{comm} rank "
        f"{rank % nranks} nRanks {nranks} nNodes 1 localRanks {nranks} localRank "
        f"{rank % nranks} MNNVL 0\n"
    )


def test_sub_communicators_set_up_first_do_not_make_the_world_size_disagree(
    tmp_path: Path,
) -> None:
    # Megatron sets up TP/PP/DP groups (sizes 1 and 2) before the world one (40): more
    # set-up lines than the parser keeps, so the world's own may never be read
    lines = []
    for rank in range(40):
        lines += [_nccl_init(rank, 1, f"{rank}a"), _nccl_init(rank, 2, f"{rank // 2}b")]
    lines += [_nccl_init(rank, 40, "ff") for rank in range(40)]
    lines += [f" iteration {i:8d}/ 1000 | lm loss: 7.1E+00 |\n" for i in range(10, 110, 10)]
    (tmp_path / "train.log").write_text("".join(lines), encoding="utf-8")
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert not any("world sizes" in f["summary"] for f in d["findings"])
    assert d["outcome"]["id"] == "incomplete"
    assert _top_symptom_score(d) < 0.3


def test_an_exception_after_the_trainers_final_metrics_is_how_the_job_ended(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.log").write_text(
        "{'loss': 2.1, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': 1.0}\n"
        "{'train_runtime': 1234.5, 'train_samples_per_second': 12.3, 'train_loss': 1.2, "
        "'epoch': 1.0}\n"
        "Traceback (most recent call last):\n"
        '  File "/work/train.py", line 88, in <module>\n'
        "    trainer.save_model(args.output_dir)\n"
        "OSError: [Errno 28] No space left on device\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["outcome"]["id"] == "failed"
    assert "No space left on device" in d["outcome"]["why"]


def _routine_examples() -> list[tuple[str, str]]:
    from triage import knowledge

    return [(line.id, ex) for line in knowledge.load().routine.lines for ex in line.examples]


@pytest.mark.parametrize(("routine_id", "line"), _routine_examples())
def test_a_routine_line_in_a_running_job_invents_no_failure(
    tmp_path: Path, routine_id: str, line: str
) -> None:
    progress = [f" iteration {i:8d}/ 1000 | lm loss: 7.1E+00 |" for i in range(10, 60, 10)]
    (tmp_path / "train.log").write_text(
        "\n".join([*progress[:2], line, *progress[2:]]) + "\n", encoding="utf-8"
    )
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["outcome"]["id"] == "incomplete", (routine_id, d["outcome"])
    assert _top_symptom_score(d) < 0.3, (routine_id, d["symptoms"][:1])


def _causes(d: dict[str, Any]) -> list[str]:
    """The timeline lines the report marks as starting the failure."""
    return [t["text"] for t in d["timeline"] if t["role"] == "initiating"]


def test_a_git_version_stamp_that_cannot_read_the_repository_starts_no_failure() -> None:
    # icefall's get_env_info asks git for the commit; git prints `fatal: detected dubious
    # ownership` on stderr and training runs for minutes before rank 0 is SIGKILLed
    d = _diagnose("c_icefall_pr_mpspawn_3gpu_rank0_sigkill")
    causes = _causes(d)
    assert not any("dubious ownership" in t for t in causes), causes
    assert any("SIGKILL" in t for t in causes), causes
    # Megatron-DeepSpeed's git_ds_info in a folder that is no repository
    causes = _causes(_diagnose("a_starksim_dual8_pdsh_missing_index_hang"))
    assert not any("not a git repository" in t for t in causes), causes


def test_a_git_failure_that_stops_the_launch_script_is_still_the_failure(tmp_path: Path) -> None:
    # the same git message as the log's last words: the script died of it
    (tmp_path / "job.log").write_text(
        "+ cd /work/repo\n+ git pull\n"
        "fatal: not a git repository (or any of the parent directories): .git\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "not a git repository" in d["first_failure"]["text"]


def test_verl_s_shell_echo_config_dump_and_library_probes_are_not_causes() -> None:
    # bash -x's echo of the command, the printed config (`'truncation': 'error',`), Open MPI's
    # hcoll fallback, Megatron's unified-memory warning: all printed by a job that ran on
    d = _diagnose("c_verl_pr_ray_trtllm_heads_not_divisible_by_tp")
    causes = _causes(d)
    assert causes, d["timeline"][:5]
    for ordinary in ("+ python3", "'truncation'", "Hcol library", "unified memory mempool"):
        assert not any(ordinary in t for t in causes), (ordinary, causes)
    causes = _causes(_diagnose("c_verl_pr_ray_trtllm_openaiserver_unexpected_kwarg"))
    assert not any("confidential compute" in t or "hcoll" in t for t in causes), causes
    assert any("unexpected keyword argument 'llm'" in t for t in causes), causes


def test_a_lightning_log_cut_mid_redraw_ends_at_the_bar_s_last_global_step() -> None:
    # NeMo's bar: 165 redraws on one `\r` line, the last cut off; the line before deletes a
    # checkpoint named `...-step=5100-...ckpt`, which is no step the job reached
    d = _diagnose("c_nemo_pr_slurm_megatron_gpt_8gpu_lightning_logends")
    assert d["outcome"]["id"] == "incomplete"
    assert "step 5281" in d["outcome"]["why"], d["outcome"]["why"]


def test_an_error_printed_without_a_rank_is_not_put_to_the_rank_that_exited_first() -> None:
    # eight ModuleNotFoundError tracebacks with no rank prefix; torchrun reports rank 0's exit
    # first. The outcome line and the First failure section say the same: no rank named
    d = _diagnose("c_modded_nanogpt_nebius_triton_kernels_missing")
    assert d["first_failure"]["rank"] is None
    assert "triton_kernels" in d["outcome"]["why"]
    assert "rank 0" not in d["outcome"]["why"], d["outcome"]["why"]


def test_a_ray_driver_console_named_log_5_is_not_rank_5_s_log() -> None:
    # verl's driver console, saved as `log-5.txt`: the TypeError comes from a Ray actor, and
    # the file names every rank of the job as often as rank 5
    d = _diagnose("c_verl_pr_ray_trtllm_openaiserver_unexpected_kwarg")
    assert "rank 5" not in d["outcome"]["why"], d["outcome"]["why"]
    assert d["first_failure"]["rank"] is None
    assert all(i["rank"] is None for i in d["inputs"]), d["inputs"]


@pytest.mark.parametrize(
    ("name", "first_line", "rank"),
    [
        ("stdout_3.log", "rank 3: step 10 loss 2.1", 3),  # its lines say rank 3: a rank's log
        ("log-5.txt", "starting driver", None),  # nothing says rank 5: a guess, dropped
        ("rank_5.txt", "starting driver", 5),  # an explicit rank word needs no agreement
    ],
)
def test_a_number_in_a_file_name_is_a_rank_only_where_the_name_or_the_lines_say_so(
    tmp_path: Path, name: str, first_line: str, rank: int | None
) -> None:
    (tmp_path / name).write_text(
        f"{first_line}\nTraceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\nValueError: bad batch\n',
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert [i["rank"] for i in d["inputs"]] == [rank]
    assert d["culprit_ranks"] == ([] if rank is None else [rank])


_LAUNCHER_ONLY = "b_superbench_fixture_megatron_deepspeed_pdsh_2node"


def _launcher_only_variant(tmp_path: Path, edit: Any) -> dict[str, Any]:
    """The launcher-only DeepSpeed job with its log edited by `edit(lines) -> lines`."""
    (src,) = _files(_LAUNCHER_ONLY)
    lines = Path(src).read_text(encoding="utf-8").splitlines()
    return _diagnose_lines(tmp_path, "megatron_deepspeed.log", edit(lines))


def test_a_failure_known_only_from_the_launchers_exit_status_names_no_cause() -> None:
    # Megatron-DeepSpeed on 2 nodes: every iteration ran, the checkpoint save began, then the
    # DeepSpeed launcher's sigkill_handler killed the other workers and reported `exits with
    # return code = 1` on both nodes; no worker printed why. The handler's name and its
    # `Killing subprocess` lines are printed for any failed worker: they read like the OOM
    # killer's work (host OOM at 92% before), a claim the exit status 1 does not support.
    d = _diagnose(_LAUNCHER_ONLY, embed=True)
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"] == [] and d["root_causes"] == []
    assert "launcher's report that a worker exited with status 1" in d["summary"]
    assert "Collect next: the failing worker's own output" in d["summary"]
    # NCCL's account, flight-recorder dumps and stacks of stuck ranks are no help here
    assert "py-spy" not in d["summary"] and "NCCL_DEBUG" not in d["summary"]


def test_the_same_launcher_report_with_a_kill_signal_still_names_the_failure(
    tmp_path: Path,
) -> None:
    # the same log where the worker's exit status is -9: a SIGKILL is a fact of the failure
    d = _launcher_only_variant(
        tmp_path, lambda lines: [ln.replace("return code = 1", "return code = -9") for ln in lines]
    )
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"] and d["symptoms"][0]["id"] in {"S15", "S27"}


def test_the_same_launcher_report_after_a_workers_traceback_names_the_workers_error(
    tmp_path: Path,
) -> None:
    # the same log where a worker printed its error before the launcher killed the others
    traceback = [
        "vm-07-05: Traceback (most recent call last):",
        'vm-07-05:   File "/root/Megatron-DeepSpeed/megatron/checkpointing.py", line 250, '
        "in save_checkpoint",
        "vm-07-05:     torch.save(state_dict, checkpoint_name)",
        "vm-07-05: OSError: [Errno 28] No space left on device",
    ]

    def with_traceback(lines: list[str]) -> list[str]:
        at = next(i for i, ln in enumerate(lines) if "Killing subprocess" in ln)
        return [*lines[:at], *traceback, *lines[at:]]

    d = _launcher_only_variant(tmp_path, with_traceback)
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"] and d["symptoms"][0]["id"] == "S28"
    assert "launcher's report" not in d["summary"]


def test_torchruns_summary_of_a_worker_that_printed_no_error_names_no_cause(
    tmp_path: Path,
) -> None:
    # torchrun's own ChildFailedError traceback and its summary (no `@record`, so the traceback
    # field only says how to enable one) report that rank 0 exited 1, not why
    d = _diagnose_lines(
        tmp_path,
        "train.log",
        [
            "step 10 loss 2.31",
            "step 20 loss 2.10",
            "E0301 10:05:00.000000 140 torch/distributed/elastic/multiprocessing/api.py:826] "
            "failed (exitcode: 1) local_rank: 0 (pid: 41210) of binary: /usr/bin/python",
            "Traceback (most recent call last):",
            '  File "/usr/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            '  File "/usr/lib/python3/dist-packages/torch/distributed/run.py", line 812, in main',
            "    run(args)",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
            "============================================================",
            "train.py FAILED",
            "------------------------------------------------------------",
            "Failures:",
            "  <NO_OTHER_FAILURES>",
            "------------------------------------------------------------",
            "Root Cause (first observed failure):",
            "[0]:",
            "  time      : 2024-03-01_10:05:00",
            "  host      : node01",
            "  rank      : 0 (local_rank: 0)",
            "  exitcode  : 1 (pid: 41210)",
            "  error_file: <N/A>",
            "  traceback : To enable traceback see: "
            "https://pytorch.org/docs/stable/elastic/errors.html",
            "============================================================",
        ],
    )
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"] == [] and d["root_causes"] == []
    assert "launcher's report that a worker exited with status 1" in d["summary"]


_IB_PLUGIN_JOB = "e_dsexamples_random_ltd_gpt2_fp16_kernel_illegal_memory_access"


def _finding_kinds(d: dict[str, Any]) -> set[str]:
    return {f["kind"] for f in d["findings"]}


def test_one_process_naming_its_infiniband_transport_twice_is_no_transport_mismatch() -> None:
    # the one rank prints `NET/IB : Using [0]mlx5_ib0:1/IB/SHARP ...` and `Using network IBext`
    # (nccl-rdma-sharp-plugins' name for the same InfiniBand path); the job died of an illegal
    # memory access, and a "transport differs" finding put a network cause and an NCCL
    # transport fix first
    d = _diagnose(_IB_PLUGIN_JOB)
    assert "transport_mismatch" not in _finding_kinds(d)
    assert d["symptoms"][0]["id"] == "S26"
    assert d["root_causes"][0]["id"] != "R07"
    assert d["fix_patterns"][0]["id"] != "F4"


def test_a_second_host_on_sockets_beside_infiniband_is_a_transport_mismatch(
    tmp_path: Path,
) -> None:
    (src,) = _files(_IB_PLUGIN_JOB)
    lines = Path(src).read_text(encoding="utf-8").splitlines()
    other = [
        "node07:4242:4242 [0] NCCL INFO NET/Socket : Using [0]eth0:192.168.0.138<0>",
        "node07:4242:4242 [0] NCCL INFO Using network Socket",
    ]
    d = _diagnose_lines(tmp_path, "train.log", [*lines[:28], *other, *lines[28:]])
    assert "transport_mismatch" in _finding_kinds(d)


def test_the_shell_killing_the_launcher_after_the_workers_errors_is_not_read_as_the_cause() -> None:
    # Open-Sora-Plan on 8 NPUs: every rank's collate raised `NameError: name 'tracker' is not
    # defined` in the project's own mask_utils.py; torchrun stopped the rest, and at the end
    # bash printed `line 81: 203 Killed  accelerate launch ...`: the launcher's end, read
    # before as the first failure and as host OOM (the OOM killer's advice first)
    d = _diagnose(
        "e_opensoraplan_accelerate_ds_npu_collate_nameerror_then_launcher_killed", embed=True
    )
    assert "NameError" in d["first_failure"]["text"]
    assert d["root_causes"][0]["id"] == "R26"
    assert d["fix_patterns"][0]["id"] == "F6"
    assert "mask_utils.py" in d["fix_patterns"][0]["actions"][0]


def test_a_sandbox_whose_docker_binary_is_missing_is_a_missing_dependency() -> None:
    # SkyRL's terminal-bench rollouts build their sandbox with `docker compose`; uvloop's
    # spawn raises `FileNotFoundError: [Errno 2] No such file or directory` (no name): the
    # docker executable is not in the container, not a data sample (the data-pipeline advice
    # came first)
    d = _diagnose("e_skyrl_pr_ray_tbench_rollout_docker_binary_missing")
    assert d["root_causes"][0]["id"] == "R02"
    assert d["fix_patterns"][0]["id"] == "F1"
    assert "Install the program the job starts" in d["fix_patterns"][0]["actions"][0]


def test_a_rank_named_for_its_silence_is_not_credited_to_a_flight_recorder_the_job_lacks() -> None:
    # 16 ROCm ranks, every watchdog but rank 13's timed out in allreduce #2; the job left no
    # flight-recorder dump, so "rank 13 (flight recorder)" named evidence it does not have
    d = _diagnose("e_rocm_megatron_srun_l_2node_mi300_first_allreduce_watchdog_hang")
    assert d["outcome"]["id"] == "hung"
    assert d["first_failure"]["rank"] == 13
    assert d["first_failure"]["source"] == "no output of its own"


def test_the_stack_faulthandler_printed_when_the_watchdog_aborted_is_not_where_it_failed() -> None:
    # torchtitan: the allgather timed out, the watchdog aborted the process and faulthandler
    # printed the main thread's stack, which passes through torch._dynamo's eval_frame; that
    # is where it waited, not a failure raised inside torch.compile (its advice came first)
    d = _diagnose("a_torchtitan_qwen3_run285_allgather_timeout")
    assert d["outcome"]["id"] == "hung"
    told = advice_of(d)
    assert "torch.compile" not in told


def test_a_launcher_given_an_empty_machine_rank_is_a_launch_script_misconfiguration() -> None:
    # `accelerate launch --machine_rank=$MACHINE_RANK` with the variable unset: argparse's
    # `invalid int value: ''` and nothing started (a framework bug before, with its advice)
    d = _diagnose("e_dia_stereo_accelerate_launch_empty_machine_rank")
    assert d["symptoms"][0]["id"] == "S05"
    assert d["root_causes"][0]["id"] == "R06"
    assert "`--machine_rank` an empty value" in d["fix_patterns"][0]["actions"][0]


def test_a_log_that_stops_mid_run_is_not_said_to_be_still_running() -> None:
    # BigScience Megatron-DeepSpeed: the log ends at step 49 of 1000 with nothing after it; the
    # summary said "The job was still running", which the log does not show (it may have been
    # cut when copied, or its end not logged)
    d = _diagnose("a_bigscience_meg_ds_3d_n16_logends")
    assert d["outcome"]["id"] == "incomplete"
    assert d["summary"].startswith("No end in the logs: ")
    assert "was still running" not in d["summary"]


def test_a_checkpoint_write_that_came_up_short_is_the_storage_not_a_load() -> None:
    # torchtitan's DCP save at step 10000: each rank's torch.save of its shard stops with
    # `unexpected pos 704 vs 598` (inline_container.cc: the file took fewer bytes than given);
    # the advice to load into a model with the same FQNs (a load rule) came first
    d = _diagnose("e_qiu_torchtitan_torchrun_4gpu_fsdp_dcp_save_fails_step10000")
    assert d["symptoms"][0]["id"] == "S28"
    assert d["root_causes"][0]["id"] == "R05"
    assert "free space and quota" in d["fix_patterns"][0]["actions"][0]
    told = advice_of(d)
    assert "Load into a model" not in told


def test_a_clean_nccl_tests_run_with_libfabric_debug_warnings_finished() -> None:
    # all_reduce_perf on 2 Perlmutter nodes with FI_LOG_LEVEL=debug: libfabric's own `<warn>`
    # lines ("Failed to dlopen libze_loader.so": no Level Zero on an NVIDIA node) are its
    # warnings, the header's `step: 2(factor)` no training step, and `# Avg bus bandwidth`
    # the benchmark's closing line
    d = _diagnose("f_perlmutter_shifter_srun_8rank_nccl_tests_allreduce_libfabric_warns_ok")
    assert d["outcome"]["id"] == "succeeded"
    assert d["symptoms"] == []


def test_libibverbs_warnings_for_absent_adapters_do_not_name_a_watchdog_hang_an_import_error() -> (
    None
):
    # MU-Diff under Slurm: 28 `libibverbs: Warning: couldn't load driver ...` lines at start-up
    # (providers for adapters the node lacks), an hour later rank 1's watchdog times out in
    # allreduce 668; the job hung, it did not fail to import (S02 at 0.91 before)
    d = _diagnose("f_mudiff_slurm_mpspawn_2gpu_rank1_allreduce_watchdog_timeout")
    assert d["outcome"]["id"] == "hung"
    assert d["symptoms"][0]["id"] == "S17"


def test_a_cobalt_walltime_after_a_first_successful_launch_is_a_stop() -> None:
    # ThetaGPU: a sweep's first launch finishes, the second is starting when Cobalt logs
    # `maximum execution time exceeded; initiating job termination` (.cobaltlog)
    d = _diagnose("f_thetagpu_cobalt_megds_mpirun_40rank_sweep_walltime_during_second_launch")
    assert d["outcome"]["id"] == "stopped"
    assert "Cobalt" in d["outcome"]["why"]


def test_a_stderr_file_that_opens_with_module_notices_is_read_beside_the_logs() -> None:
    # LUMI, 1024 ranks: 128-node.err opens with `srun -l`-tagged module-reload notices (no
    # mark of a log in its head) and ends with Slurm's `CANCELLED AT ... DUE TO TIME LIMIT`;
    # set aside as a note beside 128-node.out, the job read as cut off at step 28
    d = _diagnose("f_lumi_megds_srun_l_128node_1024rank_175b_comms_profile_time_limit")
    assert d["outcome"]["id"] == "stopped"
    assert "time limit" in d["outcome"]["why"]


def test_an_mpi_abort_that_slurm_then_cancels_is_a_failure_not_a_users_scancel() -> None:
    # ProcessGroupMPI over UCX on Cori-GPU: pages of UCX DEBUG lines (`... failed: No such
    # device` at its debug level), then UCX cannot register rank 0's GPU buffer, Open MPI's
    # MPI_ERRORS_ARE_FATAL aborts, and Slurm cancels the step with no reason and kills the
    # tasks; it read as a user's scancel, then as a host OOM from the killed tasks
    d = _diagnose("f_nersc_cgpu_srun_2rank_processgroupmpi_ucx_register_failed_mpi_abort")
    assert d["outcome"]["id"] == "failed"
    assert "MPI_ERRORS_ARE_FATAL" in d["outcome"]["why"]
    assert "scancel" not in d["outcome"]["why"]
    assert d["symptoms"] and d["symptoms"][0]["id"] == "S12"
    assert 0 in d["culprit_ranks"]


def test_a_job_that_sat_on_an_ib_error_until_its_time_limit_hung() -> None:
    # nccl test on 2 Cori-GPU nodes: rank 10's `NCCL WARN NET/IB : Got completion with error
    # 12`, then nothing (no exit, no result from the other ranks) until Slurm's time limit:
    # it sat there, it was not stopped while working
    case = "f_nersc_nccl_test_srun_16rank_ib_completion_error_then_time_limit"
    d = _diagnose(case)
    assert d["outcome"]["id"] == "hung"
    assert "Got completion with error 12" in d["outcome"]["why"]
    assert d["symptoms"][0]["id"] == "S12"
    # the report's hang says what the outcome says (it was null: "no hang" beside "Hung")
    assert d["hang"]["detected"] is True
    assert d["hang"]["explanation"].startswith("hang: no progress and no process exit after")
    assert d["hang"]["lagging_ranks"] == []  # who the others waited for is not in the log
    shown = CliRunner().invoke(
        main,
        [*_files(case), "--no-embed", "-q", "--format", "text"],
        env={"COLUMNS": "200"},
    )
    (hang_row,) = [line for line in shown.output.splitlines() if "Hang " in line]
    assert "no progress and no process exit after" in hang_row, hang_row


def test_a_time_limit_after_a_process_reported_its_exit_is_still_a_stop() -> None:
    # ALCF's checkpoint-restart test: clush reports a node's `exited with exit code 255` (a
    # planned failure), the reruns go on, and PBS ends the job at its walltime
    d = _diagnose("e_alcf_ckptrestart_pbs_mpiexec_24rank_fail_test_reruns_then_walltime")
    assert d["outcome"]["id"] == "stopped"


def test_errors_a_rank_raised_after_its_own_watchdog_fired_do_not_make_it_the_culprit() -> None:
    # parameter-golf on 8 H100s: rank 0 quantises alone after training; ranks 1-7 wait in
    # allreduce 19563 until their watchdogs fire, then go on and fail to open the file rank 0
    # has not written; those FileNotFoundErrors made ranks 1-7 "the ranks the others waited
    # for" and the job failed, where rank 0 is the one that never arrived
    d = _diagnose("f_paramgolf_pr_torchrun_8gpu_rank0_gptq_while_peers_allreduce_watchdog")
    assert d["outcome"]["id"] == "hung"
    assert d["culprit_ranks"] == [0]
    assert d["symptoms"][0]["id"] == "S17"


def test_a_platform_timeout_after_the_work_was_done_is_a_stop_not_its_teardown_noise() -> None:
    # parameter-golf on Modal: the final evaluation is printed, then Modal cancels the input
    # at its 1500 s timeout; 32 TCPStore `recvValue failed` blocks follow as the container
    # goes away (they read as a communication backend failure)
    d = _diagnose("f_paramgolf_pr_modal_8gpu_function_timeout_after_final_eval_tcpstore_noise")
    assert d["outcome"]["id"] == "stopped"
    assert "Modal" in d["outcome"]["why"]
    assert d["symptoms"] == []


def test_a_failed_job_of_one_process_names_rank_0() -> None:
    # `colossalai run` with --nproc_per_node=1 on one host ('world size: 1'): whatever the
    # worker died of (its error is not in the log), it died on rank 0
    d = _diagnose("d_colossalai_pr_colossalai_run_1gpu_sft_exit1_no_traceback")
    assert d["outcome"]["id"] == "failed"
    assert d["culprit_ranks"] == [0]
    assert d["symptoms"] == []


def test_a_healthy_job_of_one_process_names_no_culprit() -> None:
    d = _diagnose("b_attnbench_megatron_srun_1gpu_train_ok")
    assert d["outcome"]["id"] == "succeeded"
    assert d["culprit_ranks"] == []


def test_a_first_failure_only_a_waiting_rank_reported_says_so() -> None:
    # torchtitan, rank 0's log only: its watchdog's timeout is the first error, and it names no
    # rank as the one that failed ("no rank named" said no more)
    result = CliRunner().invoke(
        main,
        [*_files("a_torchtitan_qwen3_run285_allgather_timeout"), "--no-embed", "--format", "md"],
    )
    assert result.exit_code == 0, result.output
    assert "the first error in the logs is rank 0's report of its own wait" in result.output


def test_wandbs_exit_summary_after_a_traceback_is_not_progress_past_it(tmp_path: Path) -> None:
    # a Trainer's checkpoint save raises; wandb then prints its run summary as the process
    # exits (`wandb:   train/global_step 260`): read as a step logged after the exception,
    # it made the traceback one the job went on from, and the job "incomplete"
    lines = [
        "{'loss': 1.4358, 'learning_rate': 7e-05, 'epoch': 0.52}",
        " 52%|█████▏    | 260/500 [13:20<12:18,  3.08s/it]Traceback (most recent call last):",
        '  File "/home/u/sft.py", line 201, in <module>',
        "    trainer.train()",
        '  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2350, '
        "in _save_checkpoint",
        "    self.save_model(output_dir, _internal_call=True)",
        '  File "/venv/lib/python3.11/site-packages/safetensors/torch.py", line 281, in save_file',
        "    serialize_file(_flatten(tensors), filename, metadata=metadata)",
        "safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 122, "
        'kind: FilesystemQuotaExceeded, message: "Disk quota exceeded" })',
        "wandb: Run summary:",
        "wandb:         train/epoch 0.52",
        "wandb:   train/global_step 260",
        "wandb:          train/loss 1.4358",
        "wandb: Synced 5 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)",
    ]
    d = _diagnose_lines(tmp_path, "train.err", lines)
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "Disk quota exceeded" in d["outcome"]["why"]
    assert d["symptoms"][0]["id"] == "S28"


def _two_streams(tmp_path: Path, stdout_after_end: list[str]) -> dict[str, Any]:
    """A Slurm job's `.out` (a training that says it is done, then `stdout_after_end`) and
    `.err` (ending in an uncaught ImportError), diagnosed together."""
    (tmp_path / "qwen-16453144.out").write_text(
        "\n".join(
            [
                "{'loss': 1.05, 'grad_norm': 0.4, 'learning_rate': 2e-06, 'epoch': 0.99}",
                "{'train_runtime': 7301.29, 'train_samples_per_second': 1.948, 'epoch': 1.0}",
                "Training completed!",
                *stdout_after_end,
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    (tmp_path / "qwen-16453144.err").write_text(
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.11/site-packages/lm_eval/__main__.py", line 10, in <module>\n'
        "    from lm_eval import evaluator, utils\n"
        '  File "/venv/lib/python3.11/site-packages/lm_eval/api/metrics.py", line 9, in <module>\n'
        "    import sacrebleu\n"
        "ModuleNotFoundError: No module named 'sacrebleu'\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_an_exception_closing_stderr_after_stdout_went_past_its_end_line_is_how_it_ended(
    tmp_path: Path,
) -> None:
    # a batch script trains ("Training completed!"), starts its evaluation phase on stdout,
    # and the evaluation's import fails, the last thing on stderr: the job as submitted
    # failed there, not "finished, with a fault somewhere"
    d = _two_streams(tmp_path, ["", "========== PHASE 2: Evaluation (MMLU, GSM8K) =========="])
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "sacrebleu" in d["outcome"]["why"]
    # ... and the training's own end is said beside it: the model may well be saved
    assert "after the job said it was done (`Training completed!`)" in d["outcome"]["why"]


def test_an_exception_on_stderr_beside_a_stdout_that_ends_at_its_end_line_is_not_ordered(
    tmp_path: Path,
) -> None:
    # nothing shows the job going on after it said it was done: which came last is not in
    # the logs, and the end line stands, with the fault said beside it
    d = _two_streams(tmp_path, [])
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert "its logs hold a fault" in d["summary"]


def test_an_untagged_oom_before_the_others_wait_is_the_failure_not_a_silent_rank(
    tmp_path: Path,
) -> None:
    # the `deepspeed` runner on two local GPUs writes one untagged console: rank 0's CUDA
    # OOM has no rank on its lines, and rank 1's watchdog names itself (`[Rank 1]`) half an
    # hour later. The OOM sat "before the ranks' own output" and the job read as hung, with
    # rank 0 "printing nothing while the others failed"
    oom = (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.90 GiB. GPU 0 "
        "has a total capacty of 39.39 GiB of which 8.17 GiB is free."
    )
    watchdog = (
        "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=175487, OpType=ALLREDUCE, NumelIn=103022592, NumelOut=103022592, "
        "Timeout(ms)=1800000) ran for 1800721 milliseconds before timing out."
    )
    d = _diagnose_lines(
        tmp_path,
        "finetune.out",
        [
            "[2024-08-18 05:18:21,804] [INFO] [launch.py:151:main] nnodes=1, "
            "num_local_procs=2, node_rank=0",
            "[2024-08-18 05:18:21,804] [INFO] [launch.py:163:main] dist_world_size=2",
            "{'loss': 1.2, 'learning_rate': 2e-05, 'epoch': 0.02}",
            "  2%|▏         | 775/33687 [36:10<24:45:22,  2.71s/it]Traceback (most recent call "
            "last):",
            '  File "/home/u/llava/train/train.py", line 1026, in train',
            "    trainer.train()",
            '  File "/env/lib/python3.10/site-packages/transformers/models/mistral/'
            'modeling_mistral.py", line 1176, in forward',
            "    shift_logits = logits[..., :-1, :].contiguous()",
            oom,
            watchdog,
            "[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to "
            "the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
            "corrupted/incomplete data.",
            "[E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire "
            "process down.",
            "[2024-08-18 06:28:59,972] [INFO] [launch.py:315:sigkill_handler] Killing subprocess "
            "120084",
        ],
    )
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "OutOfMemoryError" in d["outcome"]["why"]
    assert d["culprit_ranks"] == [0]
    assert "OutOfMemoryError" in d["first_failure"]["text"]
    # quoted as no rank's line: it is not rank 1's report about rank 0
    assert d["first_failure"]["rank"] is None
    assert d["symptoms"][0]["id"] == "S14"
    said = " ".join(f["summary"] for f in d["findings"])
    assert "printed nothing while the others failed" not in said, said
    assert "no error of their own" not in said, said
    assert "went silent" not in advice_of(d)  # its OOM may be the line no rank names


def test_a_best_effort_numa_binding_warning_is_not_why_a_ray_worker_died(tmp_path: Path) -> None:
    # verl's train workers try to bind to their GPU's NUMA node and log the failure and go on:
    # the missing libnuma.so read as an import error (S02 at 94%) for a job whose actor
    # process died 21 steps later
    d = _diagnose_lines(
        tmp_path,
        "train.out",
        [
            "(WorkerDict pid=626895) Warning: Failed to set NUMA affinity: libnuma.so: cannot "
            "open shared object file: No such file or directory",
            *[f"step:{i} - actor/loss:0.1 - critic/score/mean:0.5" for i in range(1, 6)],
            "(raylet) A worker died or was killed while executing a task by an unexpected system "
            "error. To troubleshoot the problem, check the logs for the dead worker. Worker exit "
            "type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection "
            "error code 2. End of file.",
        ],
    )
    assert d["outcome"]["id"] == "failed"
    assert d["symptoms"][0]["id"] in ("S27", "S15"), d["symptoms"][:2]
    assert "S02" not in [s["id"] for s in d["symptoms"] if s["score"] >= 0.3]


@pytest.mark.parametrize(
    ("case", "outcome", "symptoms", "culprits"),
    [
        # lane G, each read as it arrived and then fixed by the mechanism named in the tests
        # above: the same verdicts on the jobs' real, whole logs
        (
            "g_peft_trl_eddie_1gpu_trl_sft_checkpoint_save_disk_quota_exceeded",
            "failed",
            ["S28"],
            [],
        ),
        ("g_hftrl_slurm_1gpu_trl_sft_done_then_lm_eval_sacrebleu_missing", "failed", ["S02"], []),
        ("g_bris_lumi_srun_8task_singularity_executable_not_found", "failed", ["S05"], []),
        # lane H: the batch script's shell found neither conda nor torchrun, nothing ran
        ("h_credit_cwa_slurm_conda_missing_torchrun_not_found", "failed", ["S05"], []),
        # lane I: torchvision's MNIST download refused before any step; Lightning's test
        # stage called with no test_dataloader after the fit finished
        (
            "i_container_conda_run_1gpu_layout_transformer_mnist_download_http_403_before_training",
            "failed",
            ["S08"],
            [],
        ),
        (
            "i_vt_tinkercliffs_slurm_lightning_cpu_fit_max_epochs_then_test_without_test_dataloader_misconfiguration",
            "failed",
            ["S18", "S09"],
            [],
        ),
        (
            "g_chartwiz_deepspeed_2gpu_rank0_cuda_oom_then_rank1_allreduce_watchdog",
            "failed",
            ["S14"],
            [0],
        ),
        (
            "g_verl_fork_ray_1gpu_grpo_actor_worker_died_unexpected_system_error_step21",
            "failed",
            ["S27", "S15"],
            [],
        ),
    ],
)
def test_lanes_g_to_i_jobs_read_as_their_logs_show(
    case: str, outcome: str, symptoms: list[str], culprits: list[int]
) -> None:
    d = _diagnose(case)
    assert d["outcome"]["id"] == outcome, d["outcome"]
    assert d["symptoms"][0]["id"] in symptoms, d["symptoms"][:2]
    assert d["culprit_ranks"] == culprits


def test_a_command_the_shell_missed_before_a_training_that_ran_is_no_failure(
    tmp_path: Path,
) -> None:
    # a batch script's `module load` on a machine without environment modules: bash says
    # `module: command not found` and the script goes on to train to its end
    d = _diagnose_lines(
        tmp_path,
        "slurm-42.out",
        [
            "/var/spool/slurmd/job00042/slurm_script: line 9: module: command not found",
            *[f" iteration {i:8d}/ 50 | lm loss: 7.1E+00 |" for i in range(10, 60, 10)],
        ],
    )
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert d["symptoms"] == []


@pytest.mark.parametrize(
    ("case", "outcome"),
    [
        # OpenCLIP on 16 ranks, its log copied 8% into the first of five epochs: slurmstepd's
        # chdir fallback and Polars' fork warning ("... you are seeing this error ...") are no
        # failure, and a data library's `Merging loaded results: 100% 2176/2176` bar is no
        # training's last step (OpenCLIP's own `Train Epoch: 0 [823296/10977280 (8%)]` is)
        (
            "i_cscs_alps_srun_l_4node_16rank_openclip_mixtera_5epochs_log_ends_at_8pct_pil_exif_warnings",
            "incomplete",
        ),
        # MiniMind prints no end line: `Epoch:[1/1](56608/56608)` is the run's last step
        ("j_minimind_sft_1gpu_56608_steps_done", "succeeded"),
        ("j_minimind_grpo_9751_steps_done_debug_samples", "succeeded"),
    ],
)
def test_lanes_i_and_j_jobs_that_did_not_fail_read_so(case: str, outcome: str) -> None:
    d = _diagnose(case)
    assert d["outcome"]["id"] == outcome, d["outcome"]
    assert _top_symptom_score(d) < 0.3, d["symptoms"][:1]


def test_a_bar_done_before_the_training_logged_on_is_not_the_jobs_last_step(
    tmp_path: Path,
) -> None:
    # a set-up bar at 100% in one stream, the training's own steps after it in another (here
    # rank 0's, tagged): the bar's 50/50 is not where the job ended
    d = _diagnose_lines(
        tmp_path,
        "train.log",
        [
            "Counting tokens: 100%|██████████| 50/50 [00:01<00:00, 41.2it/s]",
            *[f"[rank0]: Step {i}/5000 loss 2.3" for i in range(100, 600, 100)],
        ],
    )
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert "500 of 5000" in d["outcome"]["why"]


# ------------------------------------------------------------------ files that are no output

# A log that ends mid-training: nothing in it says how the job ended.
_CUT_OFF_LOG = [
    "[2025-03-02 10:00:01,112] [INFO] [real_accelerator.py:203:get_accelerator] Setting"
    " ds_accelerator to cuda",
    "{'loss': 2.412, 'grad_norm': 1.31, 'learning_rate': 4.9e-05, 'epoch': 0.1}",
    "{'loss': 2.108, 'grad_norm': 1.02, 'learning_rate': 4.7e-05, 'epoch': 0.2}",
]

# The first merges of GPT-2's byte-level BPE (the `merges.txt` a tokenizer saves beside every
# checkpoint), with the merge that makes ` error`.
_MERGES = ["#version: 0.2", "Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r", "Ġ s"]
_MERGES += ["a t", "Ġ w", "Ġ o", "e n", "Ġ c", "i t", "i s", "a n", "o r", "e s", "Ġ b"]
_MERGES += ["e d", "Ġ f", "in g", "Ġ p", "o u", "Ġa n", "a l", "a r", "Ġt o", "Ġ m", "Ġo f"]
_MERGES += ["Ġ in", "Ġ d", "Ġ h", "Ġan d", "i c", "a s", "l e", "Ġt h", "i on", "o m", "l l"]
_MERGES += ["en t", "Ġ n", "Ġ l", "s t", "Ġ re", "v e", "Ġ e", "r o", "l y", "Ġb e", "Ġ error"]

# A notice of the kind a library ships beside its code, in its own words here.
_NOTICE = [
    "Notices for the components this package bundles",
    "Each component below keeps the terms its authors chose for it, and those terms",
    "apply to that component alone and to nothing else in this package.",
    "The authors give no promise that a component works for any purpose at all;",
    "they are not liable for lost work, lost data, a computer failure or malfunction,",
    "or any other harm that follows from using the components in any way.",
] * 4


def _bundle(tmp_path: Path, files: dict[str, list[str]], *, found: bool = True) -> dict[str, Any]:
    """Diagnose a folder of these files through the CLI; `found=False`: nothing in it is
    evidence, and the CLI says so with its exit code."""
    for name, lines in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert (result.exit_code == 0) is found, result.output
    return json.loads(result.output)


def _input_warnings(d: dict[str, Any]) -> dict[str, list[str]]:
    return {Path(i["path"]).name: i["warnings"] for i in d["inputs"]}


def test_a_tokenizers_merges_and_a_licence_beside_the_logs_are_no_failure_of_the_job(
    tmp_path: Path,
) -> None:
    # an output folder as a trainer leaves it: the log, a checkpoint's tokenizer files and the
    # notices of a bundled library. Their `error` and `computer failure` are no job's failure
    d = _bundle(
        tmp_path,
        {
            "train.log": _CUT_OFF_LOG,
            "checkpoint-500/merges.txt": _MERGES,
            "THIRD_PARTY_NOTICES.txt": _NOTICE,
        },
    )
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert d["first_failure"] is None
    warnings = _input_warnings(d)
    assert any("word list" in w and "not read" in w for w in warnings["merges.txt"]), warnings
    assert any("prose" in w and "not read" in w for w in warnings["THIRD_PARTY_NOTICES.txt"])


def test_a_training_script_beside_its_log_is_not_read_as_output(tmp_path: Path) -> None:
    script = [
        "#!/bin/bash",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=8",
        "set -euo pipefail",
        "export NCCL_DEBUG=WARN",
        "cd /scratch/run",
        'if [ ! -d "$DATA" ]; then',
        '  echo "ERROR: no dataset at $DATA, training failed to start"',
        "  exit 1",
        "fi",
        "srun torchrun --nproc_per_node=8 train.py --config cfg.yaml",
        'echo "done"',
    ]
    d = _bundle(tmp_path, {"train.log": _CUT_OFF_LOG, "run.sbatch": script})
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert any("script" in w for w in _input_warnings(d)["run.sbatch"])


# ------------------------------------------------------------------ faults the job handles


def _reward_loop_error(item: str, thought: str) -> list[str]:
    """One sample whose model output the reward loop cannot parse: logged and skipped."""
    return [
        "ERROR:2025-11-19 20:53:29,520:Traceback (most recent call last):",
        '  File "/app/cursor/env_and_state.py", line 450, in update_state',
        "    self._extract_action_and_update_cursor(observation, text)",
        '  File "/app/cursor/env_and_state.py", line 266, in _extract_action_and_update_cursor',
        "    raise ValueError(msg)",
        f"ValueError: step 0 - extract action failed from: Thought: {thought}",
        f"ERROR:2025-11-19 20:53:29,521:Error extracting action for item {item}",
    ]


def _per_sample_errors_then(last: list[str]) -> list[str]:
    lines = _reward_loop_error("48f9596c-9146-4f19", "I click the search box")
    lines += ["step:1 - actor/entropy:1.1691 - critic/score/mean:0.41 - response_length/mean:212"]
    lines += _reward_loop_error("0f7fa891-9ee5-46a3", "the page lists languages")
    lines += ["step:2 - actor/entropy:1.1520 - critic/score/mean:0.44 - response_length/mean:208"]
    return lines + last


def test_an_error_the_job_went_on_past_again_and_again_is_not_how_it_ended(
    tmp_path: Path,
) -> None:
    # verl's reward loop catches a sample it cannot parse, logs it and goes on; the file was
    # copied while the run went on, in the middle of the next such error
    lines = _per_sample_errors_then(_reward_loop_error("de4a1f2c-77b0-41d9", "scroll down"))
    d = _diagnose_lines(tmp_path, "verl_demo.log", lines)
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert _top_symptom_score(d) < 0.3, d["symptoms"][:1]


def test_another_error_after_the_handled_ones_is_how_the_job_ended(tmp_path: Path) -> None:
    oom = [
        "Traceback (most recent call last):",
        '  File "/app/verl/workers/actor/dp_actor.py", line 301, in update_policy',
        "    loss.backward()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a"
        " total capacity of 79.11 GiB of which 1.02 GiB is free.",
    ]
    d = _diagnose_lines(tmp_path, "verl_demo.log", _per_sample_errors_then(oom))
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert d["symptoms"][0]["id"] == "S14", d["symptoms"][:2]


def test_verls_trainer_that_printed_its_final_validation_metrics_finished() -> None:
    # verl's FSDP SFT trainer: 372 steps, `Final validation metrics: {...}` at its last step,
    # then a stale tqdm redraw of `Epoch 6/6: 98%` as the bar closes
    d = _diagnose("l_aopd_verl_fsdp_sft_4rank_372_steps_done_hf_hub_ssl_retry_warning")
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert "Final validation metrics" in d["outcome"]["why"]
    assert _top_symptom_score(d) < 0.3, d["symptoms"][:1]


def test_a_tpu_program_that_needs_more_hbm_than_the_chip_has_is_out_of_device_memory() -> None:
    # verl on torch_xla: XLA's compiler plans 100.38G of HBM on a 31.75G TPU v4 chip
    d = _diagnose("l_verltpu_ray_torch_xla_ppo_critic_update_hbm_out_of_memory")
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert d["symptoms"][0]["id"] == "S14", d["symptoms"][:2]
    assert d["root_causes"][0]["id"] == "R16", d["root_causes"][:2]


def test_a_log_call_that_logging_could_not_format_after_the_training_is_no_failure() -> None:
    # the script's last statement, `logger.info('Total Runtime :', t)`, has no placeholder:
    # logging prints `--- Logging error ---`, the traceback from `emit`, the call stack and
    # `Message: 'Total Runtime :'`, and the program ends normally
    d = _diagnose(
        "k_slurm_1gpu_mbart_emergent_communication_training_done_then_python_logging_error_total_runtime"
    )
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert _top_symptom_score(d) < 0.3, d["symptoms"][:1]
    assert d["first_failure"] is None


def test_an_ultralytics_run_that_completed_its_epochs_before_slurmstepds_cgroup_errors() -> None:
    # `20 epochs completed in 1.109 hours.`, the final validation, then slurmstepd's errors
    # while it tears down the finished step's cgroup
    d = _diagnose(
        "k_ufal_slurm_1gpu_ultralytics_yolov8_20_epochs_done_then_slurmstepd_cgroup_errors"
    )
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert "epochs completed" in d["outcome"]["why"]
    assert _top_symptom_score(d) < 0.3, d["symptoms"][:1]


def test_htcondors_event_log_says_how_the_job_ended() -> None:
    # HTCondor keeps .out, .err and its own event .log: `(1) Normal termination (return
    # value 0)` after 250 epochs; the wrapper's failed `cd` in .err did not stop the job
    d = _diagnose("k_cern_htcondor_1gpu_zuko_flow_250_epochs_done_exit_code_0_afs_cd_noise")
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert "exit-code 0" in d["outcome"]["why"] or "return value 0" in d["outcome"]["why"]


def test_htcondors_non_zero_return_value_is_the_jobs_exit(tmp_path: Path) -> None:
    lines = [
        "000 (14999986.000.000) 04/25 05:12:33 Job submitted from host: <188.184.1.1:9618>",
        "001 (14999986.000.000) 04/25 05:12:35 Job executing on host: <188.184.2.2:9618>",
        "005 (14999986.000.000) 04/25 05:13:56 Job terminated.",
        "\t(1) Normal termination (return value 1)",
    ]
    d = _diagnose_lines(tmp_path, "train14999986_0.log", lines)
    assert d["outcome"]["id"] == "failed", d["outcome"]


def test_a_lightning_fit_with_no_training_batches_trained_nothing() -> None:
    # 'Train dataset size: 0', Lightning's zero-length DataLoader warnings, then "`Trainer.fit`
    # stopped: No training batches." and a normal exit: the job did no work
    d = _diagnose(
        "k_adelaide_slurm_lightning_policy_empty_task_list_train_dataset_size_0_fit_stopped_no_training_batches"
    )
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert d["symptoms"][0]["id"] == "S08", d["symptoms"][:2]


def test_a_broken_pth_file_at_start_up_is_not_the_failure_the_missing_dataset_is() -> None:
    # site.py's `Error processing line 1 of ...-nspkg.pth:` and its indented traceback, four
    # times, then torchvision's ImageNet: "The archive ILSVRC2012_devkit_t12.tar.gz is not
    # present in the root directory or is corrupted"
    d = _diagnose(
        "k_nyu_greene_slurm_timm_cct_imagenet_devkit_archive_missing_after_pth_traceback_noise"
    )
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "ILSVRC2012_devkit" in d["first_failure"]["text"], d["first_failure"]
    assert d["symptoms"][0]["id"] == "S08", d["symptoms"][:2]


def test_lightnings_received_sigterm_is_a_stop_its_dataloader_workers_dying_follow() -> None:
    # `[rank: 2] Received SIGTERM: 15` at step 1225 of epoch 0, then each DataLoader worker's
    # "killed by signal: Terminated" in the teardown
    d = _diagnose(
        "k_nohup_lightning_ddp_5gpu_a800_qcnet_epoch0_step1225_received_sigterm_dataloader_workers_terminated"
    )
    assert d["outcome"]["id"] == "stopped", d["outcome"]
    assert _top_symptom_score(d) < 0.3, d["symptoms"][:1]


def test_a_script_that_says_its_training_is_complete_finished(tmp_path: Path) -> None:
    # a plain script's epochs (no total printed), then its own last word
    lines = [f"Epoch {n}: Train=2823{n}.9  Val=2814{n}.0  MAE=49{n}.2" for n in range(10, 13)]
    lines += ["Saved new best model.", "Training complete!"]
    d = _diagnose_lines(tmp_path, "traininginfo.out", lines)
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert "Training complete!" in d["outcome"]["why"]


def test_a_diff_of_two_scripts_is_not_read_as_a_log(tmp_path: Path) -> None:
    # `diff` of an example script against its port, as a repository's tests keep them: its
    # `> except ImportError:` is code that changed, not an import error
    lines = ["1a2", "> # coding=utf-8", "26c27", "< from typing import Optional, Union", "---"]
    lines += ["> from typing import Dict, List, Optional, Union", "31,32d31"]
    lines += ["< from datasets import DatasetDict, load_dataset", "< ", "33a33"]
    lines += ["> try:", ">     import evaluate", "> except ImportError:", ">     evaluate = None"]
    d = _bundle(tmp_path, {"run_clm.txt": lines}, found=False)
    assert d["outcome"] is None and d["symptoms"] == [], d["summary"]
    assert any("diff" in w and "not read" in w for w in _input_warnings(d)["run_clm.txt"])


def test_the_same_death_in_each_appended_run_is_the_last_runs_failure(tmp_path: Path) -> None:
    # two runs of one command appended to one file, each ended by the same uncaught
    # AssertionError: not a fault the job handled, and the job is the last run
    def death(path: str) -> list[str]:
        return [
            "Traceback (most recent call last):",
            '  File "/home/u/ChatGLM-Efficient-Tuning/src/train_bash.py", line 21, in <module>',
            "    main()",
            '  File "/home/u/ChatGLM-Efficient-Tuning/src/pet/core/adapter.py", line 65, in'
            " init_adapter",
            "    assert os.path.exists(os.path.join(model_args.checkpoint_dir[0], WEIGHTS_NAME))",
            f"AssertionError: Provided path ({path}) does not contain a LoRA weight.",
        ]

    lines = death("ckpt_lora_epoch200")
    lines += ["100%|██████████| 1/1 [00:00<00:00,  1.00it/s]"]
    lines += death("ckpt_lora_epoch200/checkpoint-13000")
    d = _diagnose_lines(tmp_path, "result.txt", lines)
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "checkpoint-13000" in d["first_failure"]["text"], d["first_failure"]
    assert "earlier runs wrote to the same file" in d["outcome"]["why"]


def test_a_quiet_log_is_read_and_says_it_does_not_show_how_the_job_ended(
    tmp_path: Path,
) -> None:
    # a distributed run's hydra log with nothing but set-up notes: the log was read, it just
    # holds no step, fault, exit or stop (not "no evidence, collect every rank's log")
    lines = [
        f"[2022-09-16 23:14:51,2{n:02d}][torch.distributed.distributed_c10d][INFO] - Added key:"
        f" store_based_barrier_key:1 to store for rank: {n}"
        for n in range(8)
    ]
    lines += [
        "[2022-09-16 23:15:15,163][torch.nn.parallel.distributed][INFO] - Reducer buckets have"
        " been rebuilt in this iteration."
    ]
    d = _diagnose_lines(tmp_path, "main.log", lines)
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert "does not say how the job ended" in d["outcome"]["why"]
    assert d["symptoms"] == [] and d["first_failure"] is None


def test_bitsandbytes_banners_and_warnings_at_start_up_are_no_failure() -> None:
    # two processes' bitsandbytes 'BUG REPORT' welcome banners and CUDA set-up warnings (one
    # lists torchelastic's error.json path), then the log ends while checkpoint shards load
    d = _diagnose(
        "n_modelscope_sora_accelerate_ds_zero2_2proc_log_ends_loading_shards_bnb_bug_report_banners"
    )
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert _top_symptom_score(d) < 0.3, d["symptoms"][:1]


@pytest.mark.parametrize(
    "case",
    [
        "m_gaitset_training_complete",
        "m_p2igan_nohup_gan_618_epochs_200000_steps_reached_stopping_training",
    ],
)
def test_a_scripts_own_end_of_its_step_budget_is_the_jobs_end(case: str) -> None:
    # 'Training COMPLETE' after iter 80000; 'Reached max steps (200000). Stopping training.'
    d = _diagnose(case)
    assert d["outcome"]["id"] == "succeeded", d["outcome"]


# --------------------------------------------------------------- files and lines a sweep found
# (an unlabelled sweep of logs committed to public repositories: each a verdict that invented
# a failure or missed an end)

# A licence of the kind bundled libraries ship, in its own words here: numbered sections,
# years, short headings between the paragraphs.
_NUMBERED_LICENCE = [
    "Third Party Components Notice",
    "",
    "1. Scope",
    "This notice lists the components that were bundled with release 2.3 of the package",
    "in 2019 and 2024, and the terms under which each of them may be copied or changed.",
    "",
    "2. No warranty",
    "2.1 The components are given as they are, and their authors promise nothing about them,",
    "whether they work for a purpose, or keep working after a computer failure or malfunction,",
    "a work stoppage, or any other loss that follows from their use in version 3 or later.",
    "",
    "3. Attribution",
    "Each copy of a component keeps the notice its authors wrote, in every file that has one,",
    "and a changed file says so, with the date of the change and the name of who changed it.",
] * 3


def test_a_numbered_licence_beside_the_logs_is_not_read_as_a_failure(tmp_path: Path) -> None:
    # its section numbers and years kept the earlier prose test (no digit in a line) off it
    d = _bundle(
        tmp_path, {"train.log": _CUT_OFF_LOG, "third-party-programs.txt": _NUMBERED_LICENCE}
    )
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert d["first_failure"] is None
    warnings = _input_warnings(d)["third-party-programs.txt"]
    assert any("prose" in w and "not read" in w for w in warnings), warnings


def test_a_tex_build_log_a_tree_listing_and_a_data_list_beside_the_logs_are_not_read(
    tmp_path: Path,
) -> None:
    tex = [
        "This is pdfTeX, Version 3.141592653-2.6-1.40.25 (TeX Live 2023) (preloaded"
        " format=pdflatex)",
        " restricted \\write18 enabled.",
        " file:line:error style messages enabled.",
        "entering extended mode",
        "./report.tex:42: Undefined control sequence.",
    ]
    tree = [
        "notebook.ipynb [error opening dir]",
        "project",
        "├── train.py",
        "├── model",
        "│   ├── layers.py",
        "│   └── attention.py",
        "├── data",
        "│   └── prepare.py",
        "└── README.md",
        "",
        "3 directories, 6 files",
    ]
    records = [
        f"/data/speech/wavs/clip-{n:04d}.wav|The guard was killed at the gate, and the failure"
        " of the watch was plain."
        for n in range(30)
    ]
    d = _bundle(
        tmp_path,
        {
            "train.log": _CUT_OFF_LOG,
            "report.log": tex,
            "tree.txt": tree,
            "filelists/test.txt": records,
        },
    )
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert d["first_failure"] is None
    warnings = _input_warnings(d)
    assert any("TeX" in w and "not read" in w for w in warnings["report.log"]), warnings
    assert any("directory listing" in w for w in warnings["tree.txt"]), warnings
    assert any("data list" in w for w in warnings["test.txt"]), warnings


def test_an_info_record_that_prints_a_sample_saying_killed_is_no_failure(tmp_path: Path) -> None:
    # Hydra's log format (`[time][logger][LEVEL] - message`): an INFO record's words are a
    # message's, here a transcript an evaluation loop prints
    lines = [
        "[2023-11-20 09:57:23,884][root][INFO] - /data/speech/wavs/clip-0068.wav",
        "[2023-11-20 09:57:27,683][root][INFO] - Log-likelihood tensor([8169.2305])",
        "[2023-11-20 09:57:27,760][root][INFO] - the fatal consequences might have been prevented",
        "[2023-11-20 09:57:27,760][root][INFO] - he was killed before the guard arrived",
        "[2023-11-20 09:57:31,059][root][INFO] - Log-likelihood tensor([4157.1660])",
    ]
    d = _diagnose_lines(tmp_path, "main.log", lines)
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert d["first_failure"] is None and d["symptoms"] == []


def test_an_error_metric_and_a_config_dump_are_no_failure(tmp_path: Path) -> None:
    # a solver's printed result (`Error: 3.903987`, a reconstruction error) and the config a
    # wandb debug.log dumps, whose `'truncation': 'error'` is a setting's value
    lines = [
        "Number of Threads : 8",
        "Total iterations : 16",
        "Total time including communication intervals:",
        "12.698979",
        "Error: 3.903987",
        "2025-12-03 21:32:14,960 INFO    MainThread:3956608 [wandb_init.py:init():845] wandb.init"
        " called with sweep_config: {}",
        "config: {'data': {'truncation': 'error', 'max_prompt_length': 1024}, 'trainer':"
        " {'total_epochs': 15}}",
        "test error = 0.125",
    ]
    d = _diagnose_lines(tmp_path, "run.out", lines)
    assert d["outcome"]["id"] != "failed", d["outcome"]
    assert d["first_failure"] is None and d["symptoms"] == []


def test_a_big_nanogpt_log_is_read_to_its_last_iteration_not_its_first_evaluation(
    tmp_path: Path,
) -> None:
    # nanoGPT's train.py: `step N: train loss ..., val loss ...` at each evaluation and
    # `iter N: loss ..., time ...ms` each log interval; a log past the size read whole (64 KB)
    # is read by its progress lines, and `iter` is one
    lines = ["tokens per iteration will be: 16,384", "step 0: train loss 10.9536, val loss 10.9510"]
    lines += [
        f"iter {n}: loss {3 + (n % 7) / 10:.4f}, time 561.{n % 97:02d}ms"
        for n in range(10, 20010, 10)
    ]
    d = _diagnose_lines(tmp_path, "log_train.txt", lines)
    assert (tmp_path / "log_train.txt").stat().st_size > 64 * 1024
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert "step 20000" in d["outcome"]["why"], d["outcome"]["why"]


def test_a_loops_own_last_epoch_early_stop_and_exit_lines_end_the_job(tmp_path: Path) -> None:
    # pytorch-CycleGAN-and-pix2pix's `End of epoch N / N`, an early stop, StyleGAN2-ADA's
    # `Exiting...` after its ticks (its `Skipping tfevents export:` is the ImportError it
    # catches when TensorBoard is missing, and training goes on)
    cyclegan = [
        "End of epoch 99 / 100 \t Time Taken: 236 sec",
        "saving the model at the end of epoch 100, iters 448000",
        "End of epoch 100 / 100 \t Time Taken: 236 sec",
    ]
    early = [
        f"[EPOCH {n}]\tTrain Acc: 0.77\tTrain Loss: 0.0021\tValid Acc: 0.74" for n in range(38)
    ]
    early += ["Early stopping in epoch 37"]
    stylegan = [
        "Initializing logs...",
        "Skipping tfevents export: No module named 'tensorboard'",
        "Training for 40 kimg...",
        "",
    ]
    stylegan += [
        f"tick {n:<5d} kimg {n * 4.0:<8.1f} time 1h 0{n}m 00s  sec/tick 884.8   sec/kimg 221.20"
        for n in range(11)
    ]
    stylegan += ["", "Exiting..."]
    for name, lines in (("loss_log.txt", cyclegan), ("train.out", early), ("log.txt", stylegan)):
        d = _diagnose_lines(tmp_path, name, lines)
        assert d["outcome"]["id"] == "succeeded", (name, d["outcome"])
        assert d["symptoms"] == [], (name, d["symptoms"])
    d = _diagnose_lines(tmp_path, "loss_log.txt", cyclegan[:1])
    assert d["outcome"]["id"] == "incomplete", d["outcome"]


def test_a_scripts_source_printed_into_its_log_is_no_failure(tmp_path: Path) -> None:
    # parameter-golf's train_gpt.py and its forks write their own source at the top of the log
    # (`log0(code)`): its `raise ValueError("... must be divisible by ...")` and `except
    # ImportError:` are statements, not what happened (a listing of 30 lines or more)
    code = [
        "import torch",
        "from torch import nn",
        "class GPT(nn.Module):",
        "    def __init__(self, model_dim: int, num_heads: int):",
        "        if model_dim % num_heads != 0:",
        '            raise ValueError("model_dim must be divisible by num_heads")',
        "try:",
        "    import flash_attn",
        "except ImportError:",
        '    print("ERROR: flash_attn missing, using SDPA")',
        '        if not torch.cuda.is_available(): raise RuntimeError("CUDA is required")',
        "def hyperparameters() -> dict:",
        "    out = {}",
    ]
    code += [
        f"    out['setting_{n}'] = float(os.environ.get('SETTING_{n}', {n}))" for n in range(30)
    ]
    code += ["    return out", ""]
    run = [f"step:{n}/100 train_loss:{3 - n / 100:.4f} train_time:{n * 90}ms" for n in range(1, 61)]
    d = _diagnose_lines(tmp_path, "run.txt", [*code, *run])
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert d["symptoms"] == [] and d["first_failure"] is None, d["symptoms"]
    # and where the run does fail, the statements lend it no symptom of their own
    crash = [
        "Traceback (most recent call last):",
        '  File "/work/train_gpt.py", line 1210, in <module>',
        "    main()",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    d = _diagnose_lines(tmp_path, "run.txt", [*code, *run, *crash])
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert "S09" not in [s["id"] for s in d["symptoms"]], d["symptoms"]
    cited = {e["text"].strip() for e in d["evidence"]}
    assert not cited & {line.strip() for line in code if line.strip()}, cited


def test_peers_waiting_for_the_roots_nccl_id_name_the_root_not_themselves(tmp_path: Path) -> None:
    # ProcessGroupNCCL's broadcastUniqueNCCLID: ranks 1-3 wait for the unique id under a key only
    # rank 0 sets; rank 0 printed nothing. The workers' output is not rank-tagged (torchrun
    # without --tee): each error names its rank in its own `[N]` tag. torchrun names the first
    # waiter that exited as the root cause; the rank they all waited for is rank 0
    lines = ["W0427 01:50:35.612000 38144 torch/distributed/run.py:766] *****"]
    for r in (1, 2, 3):
        lines += [
            "Traceback (most recent call last):",
            '  File "/root/golf/train_gpt.py", line 1402, in <module>',
            "    main()",
            '  File "/root/golf/train_gpt.py", line 1120, in main',
            '    dist.init_process_group(backend="nccl", device_id=device)',
            '  File "/usr/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py",'
            " line 1710, in init_process_group",
            "    default_pg, _ = _new_process_group_helper(",
            '  File "/usr/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py",'
            " line 2019, in _new_process_group_helper",
            "    eager_backend.eager_connect_single_device(device_id)",
            f"torch.distributed.DistBackendError: [{r}] is setting up NCCL"
            " communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key"
            " '0', but store->get('0') got error: wait timeout after 600000ms",
        ]
    lines += [
        "W0427 02:00:40.257000 38144 torch/distributed/elastic/multiprocessing/api.py:1012]"
        " Sending process 38213 closing signal SIGTERM",
        "W0427 02:00:40.258000 38144 torch/distributed/elastic/multiprocessing/api.py:1012]"
        " Sending process 38216 closing signal SIGTERM",
        "E0427 02:00:40.521000 38144 torch/distributed/elastic/multiprocessing/api.py:874]"
        " failed (exitcode: 1) local_rank: 2 (pid: 38215) of binary: /usr/bin/python3",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "============================================================",
        "train_gpt.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-04-27_02:00:40",
        "  host      : gpu-node-3",
        "  rank      : 2 (local_rank: 2)",
        "  exitcode  : 1 (pid: 38215)",
        "  error_file: <N/A>",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "============================================================",
    ]
    d = _diagnose_lines(tmp_path, "train.log", lines)
    assert d["culprit_ranks"] == [0], (d["culprit_ranks"], d["summary"])
    # they timed out inside init_process_group: a wait in set-up, no collective's hang
    assert d["symptoms"][0]["id"] == "S10", d["symptoms"][:2]


def test_a_scripts_own_no_cuda_check_and_lsfs_exit_report_fail_the_job(tmp_path: Path) -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/work/train_gpt.py", line 1210, in <module>',
        "    main()",
        '  File "/work/train_gpt.py", line 912, in main',
        '    raise RuntimeError("CUDA is required")',
        "RuntimeError: CUDA is required",
    ]
    d = _diagnose_lines(tmp_path, "run.log", lines)
    assert d["outcome"]["id"] == "failed", d["outcome"]
    assert d["symptoms"][0]["id"] == "S04", d["symptoms"][:2]
    # an LSF job whose script exited 1 with no error printed: its report says so
    lsf = [f"Epoch [{n}/10] Train Loss: 0.41" for n in range(1, 4)]
    lsf += [
        "------------------------------------------------------------",
        "Sender: LSF System <lsfadmin@cluster>",
        "Subject: Job 26496985: <train> in cluster <dcc> Exited",
        "------------------------------------------------------------",
        "Exited with exit code 1.",
        "Resource usage summary:",
        "    CPU time :                                   62.17 sec.",
    ]
    d = _diagnose_lines(tmp_path, "train.out", lsf)
    assert d["outcome"]["id"] == "failed", d["outcome"]


def test_a_python_warning_that_names_a_failure_it_fell_back_from_is_no_failure(
    tmp_path: Path,
) -> None:
    # warnings.formatwarning: `path.py:LINE: Category: message`; the program took the fallback
    # and trained on
    lines = [f"step:{n}/9000 train_loss:{4 - n / 1000:.4f}" for n in range(1, 40)]
    lines += [
        "/workspace/golf/utils/flash_attention.py:192: RuntimeWarning: Flash attention backend"
        " disabled after runtime failure; falling back to SDPA. ValueError: Operation creation"
        " failed",
        "  _disable_flash_runtime(exc)",
    ]
    # the log was copied while the run went on, right after the warning
    d = _diagnose_lines(tmp_path, "launch.log", lines)
    assert d["outcome"]["id"] == "incomplete", d["outcome"]
    assert d["symptoms"] == [] and d["first_failure"] is None, d["symptoms"]


def test_a_progress_line_inside_a_ctrl_c_traceback_leaves_it_a_stop(tmp_path: Path) -> None:
    # the loop's stdout line landed between the traceback's header and its frames (stderr):
    # the traceback's exception is the KeyboardInterrupt after the frames, not `Step: 99`
    lines = [f"Step: {n} (0) | Loss: 1.30987 | Grad: 17.24 | Lr: 1.1e-06" for n in range(90, 99)]
    lines += [
        "Traceback (most recent call last):",
        "Step: 99 (0) | Loss: 1.30987 | Grad: 17.24082 | Lr: 1.110e-06",
        '  File "/home/u/d-flow/train.py", line 113, in <module>',
        "    scaler.scale(loss).backward()",
        '  File "/home/u/venv/lib/python3.9/site-packages/torch/_tensor.py", line 648, in backward',
        "    torch.autograd.backward(",
        "KeyboardInterrupt",
    ]
    d = _diagnose_lines(tmp_path, "output.log", lines)
    assert d["outcome"]["id"] == "stopped", d["outcome"]
    assert d["symptoms"] == [], d["symptoms"]


def test_a_config_file_printed_at_the_top_is_read_not_skipped_as_code(tmp_path: Path) -> None:
    # nanoGPT's configurator prints the config file it reads (assignments only, no program):
    # its `max_iters` is the loop's total, so the last `iter` line is the run's last step
    lines = ["Overriding config with config/train_small.py:", "# a small character-level model"]
    lines += [f"setting_{n} = {n}  # tuned on the small set" for n in range(40)]
    lines += ["max_iters = 200", "", "tokens per iteration will be: 16,384"]
    lines += [f"iter {n}: loss {3 - n / 400:.4f}, time 56.10ms" for n in range(0, 201, 10)]
    d = _diagnose_lines(tmp_path, "train.log", lines)
    assert d["outcome"]["id"] == "succeeded", d["outcome"]
    assert "200 of 200" in d["outcome"]["why"], d["outcome"]["why"]


def test_parameter_golf_runs_as_committed_name_their_own_failure() -> None:
    # real logs (lane P, reference): a run whose script found no GPU, and a 4-rank run whose
    # log opens with the script's 3,500-line source and whose ranks 1-3 timed out waiting for
    # rank 0's NCCL id
    no_gpu = _diagnose("p_paramgolf_exp_torchrun_cuda_is_required_no_gpu_then_wrapper_done_line")
    assert no_gpu["outcome"]["id"] == "failed", no_gpu["outcome"]
    assert no_gpu["symptoms"][0]["id"] == "S04", no_gpu["symptoms"][:2]
    silent = _diagnose(
        "p_paramgolf_fork_code_snapshot_torchrun_4gpu_rank0_silent_peers_ncclid_store_timeout_600s"
    )
    assert silent["culprit_ranks"] == [0], silent["summary"]
    assert silent["symptoms"][0]["id"] == "S10", silent["symptoms"][:2]
    assert "S09" not in [s["id"] for s in silent["symptoms"]], silent["symptoms"]


def test_an_lsf_run_limit_names_the_signal_of_its_exit_not_a_failed_worker() -> None:
    # LSF sends SIGUSR2 at the run limit; its report says `Exited with exit code 140.` (128+12)
    d = _diagnose("o_dtu_lsf_painn_1gpu_compiled_silent_24h_term_runlimit_sigusr2")
    assert d["outcome"]["id"] == "stopped", d["outcome"]
    said = " ".join(row["text"] for row in d["timeline"])
    assert "killed by SIGUSR2" in said and "the worker failed" not in said, said
