"""A job's budget is one for the process and the workers it forks: what was counted before
the fork carries over, and what a worker takes the others cannot take again."""

from __future__ import annotations

import multiprocessing

import pytest

from triage.budget import JobBudget, JobLimits

pytestmark = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="workers are forked"
)


def _take(found: JobBudget, n: int) -> None:
    found.take_fr_entries(n)


def test_a_forked_worker_counts_against_the_same_budget() -> None:
    found = JobBudget(JobLimits(fr_entries=100), shared=True)
    assert found.take_fr_entries(30) == 30  # before any worker: this process alone
    found.before_fork()
    worker = multiprocessing.get_context("fork").Process(target=_take, args=(found, 50))
    worker.start()
    worker.join(30)
    assert worker.exitcode == 0
    assert found.take_fr_entries(100) == 20  # 100 - 30 here - 50 in the worker


def test_a_budget_not_shared_stays_this_process_alone() -> None:
    found = JobBudget(JobLimits(fr_entries=100))
    found.before_fork()
    worker = multiprocessing.get_context("fork").Process(target=_take, args=(found, 50))
    worker.start()
    worker.join(30)
    assert found.take_fr_entries(100) == 100
