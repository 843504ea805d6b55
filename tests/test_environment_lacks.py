"""What the job's environment lacks, as the call that needed it reports it: a program the job
starts (the spawn's own FileNotFoundError, not a missing data file) and room on the storage a
checkpoint is written to (torch.save's short write)."""

from __future__ import annotations

import pytest

from tests.cli_runs import advice_of, assert_the_check_decides, explained

_POPEN = (
    "Traceback (most recent call last):\n"
    '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 2100, '
    "in _run_ninja_build\n"
    "    subprocess.run(command, stdout=stdout_fileno, stderr=subprocess.STDOUT, cwd=build_dir)\n"
    '  File "/opt/conda/lib/python3.10/subprocess.py", line 503, in run\n'
    "    with Popen(*popenargs, **kwargs) as process:\n"
    '  File "/opt/conda/lib/python3.10/subprocess.py", line 1847, in _execute_child\n'
    "    raise child_exception_type(errno_num, err_msg, err_filename)\n"
    "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'"
)


def test_a_program_popen_cannot_find_is_a_missing_tool_named_in_the_advice() -> None:
    assert_the_check_decides(_POPEN, "S18/S01", "R02", "Install `ninja` where the job runs")


def test_a_data_file_the_script_opens_is_not_a_missing_program() -> None:
    d = explained(
        "Traceback (most recent call last):\n"
        '  File "/home/me/train.py", line 20, in load\n'
        "    with open(path) as f:\n"
        "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.jsonl'",
        "--no-embed",
    )
    told = advice_of(d)
    assert "program the job starts" not in told and "R02" not in [
        c["id"] for c in d["root_causes"][:1]
    ]


def test_a_checkpoint_file_the_storage_took_only_part_of_is_a_storage_limit() -> None:
    assert_the_check_decides(
        "RuntimeError: [enforce fail at inline_container.cc:595] . PytorchStreamWriter failed "
        "writing file data/3: file write failed",
        "S28",
        "R05",
        "check free space and quota on the checkpoint path",
    )


@pytest.mark.parametrize(
    "said",
    [
        # Apptainer on LUMI, each of eight srun tasks
        'FATAL:   "bris": executable file not found in $PATH',
        # bash running a Slurm batch script
        "/var/spool/slurmd/job4242/slurm_script: line 12: bris: command not found",
        # zsh
        "zsh: command not found: bris",
    ],
)
def test_a_command_the_shell_or_container_cannot_find_is_a_missing_program(said: str) -> None:
    # nothing of the job ran: the program is missing where its tasks run, which is what to
    # fix (an environment not activated, an image without it), named in the advice
    assert_the_check_decides(said, "S05", "R02", "Make `bris` exist where the tasks run")
