"""The initiating failure decides the labels, in bundles too (issue 10 item 6, issue 13).

Stories built by hand, one per mechanism, each checked as a user reads the report: who started
it, whether it hung, and which labels the rules give. A rank that raised (in a chained
traceback, in a thread) is the failure even when the flight recorder and py-spy show it behind
or elsewhere; a rank whose collective had other dtypes is the cause even when another rank is
the one gloo aborted; a slow rank in its own code and a rank that ran out of work are not
"collective mismatch"; a lone watchdog line blames nobody.
"""

from __future__ import annotations

from collections.abc import Sequence

from test_analysis import (
    T0,
    ev,
    fr_source,
    ps,
    rank_exit,
    source,
    spy_source,
    stack,
)
from test_analysis import (
    entry as fr_entry,
)

from triage.analysis import correlate
from triage.classify import rule_hits
from triage.classify.types import RuleHit
from triage.model import Analysis, EventKind, Finding, HangShape, ParsedSource, SourceKind

GLOO_RECV = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
    "waiting 12000ms for recv operation to complete"
)
# rank 2's validation batch has one label short; its `finally: dist.barrier()` then times out
CHAINED = (
    "Traceback (most recent call last):\n"
    '  File "/workspace/eval.py", line 58, in main\n'
    "    loss = F.cross_entropy(model(x), y)\n"
    '  File "/opt/venv/lib/python3.11/site-packages/torch/nn/functional.py", line 3555, in '
    "cross_entropy\n"
    "    return torch._C._nn.cross_entropy_loss(\n"
    "ValueError: Expected input batch_size (8) to match target batch_size (7).\n"
    "\n"
    "During handling of the above exception, another exception occurred:\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/workspace/eval.py", line 63, in main\n'
    "    dist.barrier()\n"
    '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
    "line 5356, in barrier\n"
    "    work.wait()\n"
    f"{GLOO_RECV}"
)
WAITER = (
    "Traceback (most recent call last):\n"
    '  File "/workspace/eval.py", line 60, in main\n'
    "    dist.all_reduce(total)\n"
    f"{GLOO_RECV}"
)


def finding(a: Analysis, kind: str) -> Finding:
    return next(f for f in a.findings if f.kind == kind)


def hits_of(parsed: Sequence[ParsedSource], a: Analysis, rule_id: str) -> list[RuleHit]:
    return [h for h in rule_hits(parsed, a) if h.rule_id == rule_id]


def label_weight(hits: Sequence[RuleHit], label: str) -> float:
    """What the hits that count (not the cascade) say for a label, at their strongest."""
    return max(
        ({**h.symptom, **h.root_cause}.get(label, 0.0) for h in hits if not h.from_cascade),
        default=0.0,
    )


# ------------------------------------------------------------------ a chained traceback


def raise_then_wait() -> list[ParsedSource]:
    """Rank 2 raised and went to the barrier of its `finally:`; ranks 0-1 wait in the
    all_reduce it never entered; py-spy and the flight recorder both show rank 2 elsewhere."""
    log = ps(
        source("console.log"),
        [
            ev(EventKind.TRACEBACK, WAITER, rank=0, t=T0 + 12, line=10),
            ev(EventKind.TRACEBACK, WAITER, rank=1, t=T0 + 12, line=20),
            ev(EventKind.TRACEBACK, CHAINED, rank=2, t=T0 + 12.5, line=30),
            rank_exit(0, 1, pid=100, root=True),
            rank_exit(1, 1, pid=101),
            rank_exit(2, -15, pid=102),
        ],
    )
    dumps = []
    for r in range(3):
        es = [fr_entry(s, sizes=((5514,),)) for s in range(1, 22)]
        es.append(fr_entry(22, "barrier", sizes=()) if r == 2 else fr_entry(22, sizes=((2,),)))
        dumps.append(fr_source(r, es, pg_config={"0": (0, 1, 2)}))
    waiting = stack(
        ("all_reduce", "torch/distributed/distributed_c10d.py"), ("main", "/workspace/eval.py")
    )
    barrier = stack(
        ("barrier", "torch/distributed/distributed_c10d.py"), ("main", "/workspace/eval.py")
    )
    spies = [spy_source(100 + r, barrier if r == 2 else waiting) for r in range(3)]
    return [log, *dumps, *spies]


def test_the_first_exception_of_a_chain_is_the_failure_when_its_last_is_a_timeout() -> None:
    a = correlate(raise_then_wait())
    assert a.culprit_ranks == (2,)
    assert a.first_failure is not None and a.first_failure.rank == 2
    # the report quotes what went wrong, not the timeout its handler ran into
    assert a.first_failure.text.startswith("ValueError: Expected input batch_size")
    assert [e.rank for e in a.initiating_events] == [2]
    assert {e.rank for e in a.cascade_events} == {0, 1}
    assert a.hang is not None and a.hang.detected
    assert "had already hit an error" in a.hang.explanation
    assert finding(a, "hang").facts.shape is HangShape.FAILED


def test_where_the_rank_that_raised_stood_afterwards_is_a_consequence_not_a_mismatch() -> None:
    parsed = raise_then_wait()
    a = correlate(parsed)
    # the flight recorder and py-spy do see rank 2 at another collective: true, and explained
    for kind in ("collective_mismatch", "stack_outlier", "hang"):
        assert finding(a, kind).consequence_of, kind
    hits = rule_hits(parsed, a)
    assert label_weight(hits, "R08") == 0.0  # nothing but the consequences said R08
    assert label_weight(hits, "S17") == 0.0
    assert label_weight(hits, "S18") >= 0.7  # the batch-size check names the failure
    # the timeout of rank 2's own barrier is quoted, as something its handler ran into
    timeout = [h for h in hits if h.rule_id == "gloo-timeout" and h.event and h.event.rank == 2]
    assert timeout and all(h.from_cascade for h in timeout)


def test_a_chain_that_starts_with_a_timeout_stays_a_consequence() -> None:
    text = (
        f'Traceback (most recent call last):\n  File "eval.py", line 60, in main\n{GLOO_RECV}\n'
        "\nDuring handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "eval.py", line 63, in main\n'
        "RuntimeError: Application timeout caused pair closure"
    )
    a = correlate([ps(source("console.log"), [ev(EventKind.TRACEBACK, text, rank=1, t=T0)])])
    assert a.initiating_events == ()
    assert [e.rank for e in a.cascade_events] == [1]


# ------------------------------------------------------------------ an exception in a thread


def test_an_exception_in_a_helper_thread_of_a_ranks_own_log_is_that_ranks_failure() -> None:
    # torchrun --log-dir: one file per worker, known by local rank only. Ranks 0 and 2 print
    # through torch's `[rankN]:` prefix; the prefetch thread's excepthook on rank 1 does not.
    def worker(local: int, events: list) -> ParsedSource:
        path = f"logs/attempt_0/{local}/stderr.log"
        src = source(path)
        src = type(src)(**{**src.__dict__, "local_rank": local})
        return ps(src, [e.__class__(**{**e.__dict__, "source": path}) for e in events])

    thread = (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.11/threading.py", line 982, in run\n'
        '  File "/workspace/finetune.py", line 43, in assemble\n'
        "KeyError: 'attention_mask'"
    )
    parsed = [
        worker(0, [ev(EventKind.TRACEBACK, WAITER, rank=0, t=T0 + 12, line=2)]),
        worker(
            1,
            [
                ev(EventKind.ERROR_LINE, "Exception in thread prefetch-1:", line=1),
                ev(EventKind.TRACEBACK, thread, line=2),
            ],
        ),
        worker(2, [ev(EventKind.TRACEBACK, WAITER, rank=2, t=T0 + 12, line=2)]),
    ]
    a = correlate(parsed)
    assert a.culprit_ranks == (1,)
    assert a.first_failure is not None and a.first_failure.text == "KeyError: 'attention_mask'"
    # the excepthook's heading is not a failure of its own
    assert [e.kind for e in a.initiating_events] == [EventKind.TRACEBACK]
    assert finding(a, "hang").facts.shape is HangShape.FAILED


# ------------------------------------------------------------------ dtype odd one out


def dtype_differs(*, with_dumps: bool = True) -> list[ParsedSource]:
    """Rank 3 all_reduces float64 where ranks 0-2 use float32; gloo aborts rank 2, which
    receives more bytes than it expects, and leaves no dump; 1 and 3 see the reset."""
    reset = (
        'Traceback (most recent call last):\n  File "eval.py", line 66, in main\n'
        "RuntimeError: [../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:41104: "
        "Connection reset by peer"
    )
    abort = (
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
        "  what():  [enforce fail at ../gloo/transport/tcp/pair.cc:456] op.preamble.length <= "
        "op.nbytes. 8 vs 4. Received data size doesn't match expected size. Is there a "
        "distributed collective mismatch in your code?"
    )
    log = ps(
        source("console.log"),
        [
            ev(EventKind.CPP_EXCEPTION, abort, rank=2, t=T0, line=5),
            ev(EventKind.TRACEBACK, reset, rank=1, t=T0 + 0.1, line=10),
            ev(EventKind.TRACEBACK, reset, rank=3, t=T0 + 0.1, line=20),
            rank_exit(2, -6, pid=102, root=True),
            *[rank_exit(r, -15, pid=100 + r) for r in (0, 1, 3)],
        ],
    )
    if not with_dumps:
        return [log]
    dumps = []
    for r in (0, 1, 3):
        es = [fr_entry(s) for s in range(1, 21)]
        es.append(fr_entry(21, sizes=((6,),), dtype="Double" if r == 3 else "Float"))
        dumps.append(fr_source(r, es, pg_config={"0": (0, 1, 2, 3)}))
    return [log, *dumps]


def test_the_rank_whose_collective_had_another_dtype_is_the_cause_not_the_one_gloo_aborted():
    parsed = dtype_differs()
    a = correlate(parsed)
    assert a.culprit_ranks == (3,)
    assert a.first_failure is not None and a.first_failure.rank == 3
    # quoted from rank 3's own dump record, whose dtype differs (not triage's sentence)
    assert a.first_failure.text.startswith("rank 3:") and "Double" in a.first_failure.text
    # rank 2 only detected it: its abort is listed with the consequences
    assert 2 in {e.rank for e in a.cascade_events} and a.initiating_events == ()
    assert a.hang is not None and not a.hang.detected  # gloo stopped the job at once
    mismatch = finding(a, "collective_mismatch")
    assert mismatch.ranks == (3,) and mismatch.facts.ended == "error"
    assert not mismatch.consequence_of
    hits = rule_hits(parsed, a)
    # a communication-library error (S12) caused by mismatched collectives (R08)
    assert label_weight(hits, "S12") >= 0.7 and label_weight(hits, "R08") >= 0.75
    assert label_weight(hits, "S12") > label_weight(hits, "S21")


def test_without_the_flight_recorder_the_rank_that_aborted_is_still_the_lead() -> None:
    a = correlate(dtype_differs(with_dumps=False))
    assert a.culprit_ranks == (2,)
    assert [e.rank for e in a.initiating_events] == [2]


# ------------------------------------------------------------------ slow rank vs mismatch


def two_rank_hang(*, elsewhere: tuple, behind_seq: int = 24) -> list[ParsedSource]:
    """Rank 1 waits in the gradient all_reduce; rank 0 is `elsewhere` (py-spy), behind in the
    flight recorder; rank 1 times out, the launcher stops rank 0."""
    log = ps(
        source("console.log"),
        [
            ev(EventKind.TRACEBACK, WAITER, rank=1, t=T0 + 10, line=3),
            rank_exit(1, 1, pid=201, root=True),
            rank_exit(0, -15, pid=200),
        ],
    )
    dumps = [
        fr_source(r, [fr_entry(s) for s in range(1, (behind_seq if r == 0 else 26) + 1)])
        for r in range(2)
    ]
    waiting = stack(
        ("_engine_run_backward", "torch/autograd/graph.py"),
        ("backward", "torch/autograd/__init__.py"),
        ("main", "/workspace/train.py"),
    )
    return [log, *dumps, spy_source(200, stack(*elsewhere)), spy_source(201, waiting)]


def test_a_rank_busy_uploading_past_the_timeout_is_a_short_timeout_not_a_mismatch() -> None:
    parsed = two_rank_hang(
        elsewhere=(
            ("upload", "/workspace/train.py"),
            ("main", "/workspace/train.py"),
        )
    )
    a = correlate(parsed)
    assert a.culprit_ranks == (0,)
    assert finding(a, "hang").facts.shape is HangShape.BUSY_OUTSIDE_COLLECTIVES
    outlier = finding(a, "stack_outlier")
    assert outlier.ranks == (0,) and not outlier.facts.in_collective
    hits = rule_hits(parsed, a)
    assert label_weight(hits, "R11") > label_weight(hits, "R09") > label_weight(hits, "R08")


def test_a_rank_waiting_in_another_collective_is_not_called_slow() -> None:
    parsed = two_rank_hang(
        elsewhere=(
            ("barrier", "torch/distributed/distributed_c10d.py"),
            ("main", "/workspace/train.py"),
        )
    )
    a = correlate(parsed)
    assert finding(a, "hang").facts.shape is HangShape.ANOTHER_CALL_SITE
    hits = rule_hits(parsed, a)
    assert label_weight(hits, "R08") > label_weight(hits, "R11")


def mismatch_at_the_end(odd_op: str, majority_sizes: tuple) -> list[ParsedSource]:
    """Four ranks repeat the gradient all_reduce; at #14 rank 3 issues `odd_op` while ranks
    0-2 issue an all_reduce of `majority_sizes`; everyone times out."""
    dumps = []
    for r in range(4):
        es = [fr_entry(s, sizes=((1665,),)) for s in range(1, 14)]
        es.append(fr_entry(14, odd_op, sizes=()) if r == 3 else fr_entry(14, sizes=majority_sizes))
        dumps.append(fr_source(r, es, pg_config={"0": (0, 1, 2, 3)}))
    log = ps(
        source("console.log"),
        [ev(EventKind.TRACEBACK, WAITER, rank=r, t=T0 + 15, line=r + 1) for r in range(4)],
    )
    return [log, *dumps]


def test_a_rank_that_ran_out_of_batches_first_is_uneven_work() -> None:
    # the others issue the all_reduce they had been repeating once more: rank 3 left the loop
    parsed = mismatch_at_the_end("barrier", ((1665,),))
    a = correlate(parsed)
    assert a.culprit_ranks == (3,)
    assert finding(a, "collective_mismatch").facts.pattern is HangShape.LEFT_LOOP
    assert finding(a, "hang").facts.shape is HangShape.LEFT_LOOP
    hits = rule_hits(parsed, a)
    assert label_weight(hits, "R09") > label_weight(hits, "R08")


def test_a_rank_that_skipped_a_collective_is_a_collective_mismatch() -> None:
    # the others issue a new collective (the validation sum) that rank 3 never issued
    parsed = mismatch_at_the_end("barrier", ((2,),))
    a = correlate(parsed)
    assert a.culprit_ranks == (3,)
    assert finding(a, "hang").facts.shape is HangShape.DIVERGED
    hits = rule_hits(parsed, a)
    assert label_weight(hits, "R08") > label_weight(hits, "R09")
    assert label_weight(hits, "R08") > label_weight(hits, "R11")


def test_a_rank_waiting_on_another_process_group_is_a_collective_mismatch() -> None:
    dumps = []
    for r in range(3):
        es = [fr_entry(s) for s in range(1, 9 if r == 0 else 10)]
        if r == 0:
            es.append(fr_entry(1, pg="1", desc="metrics", sizes=((2,),), dtype="Double"))
        dumps.append(fr_source(r, es, pg_config={"0": (0, 1, 2), "1": (0, 1, 2)}))
    log = ps(
        source("console.log"),
        [ev(EventKind.TRACEBACK, WAITER, rank=r, t=T0 + 15, line=r + 1) for r in range(3)],
    )
    a = correlate([log, *dumps])
    assert a.culprit_ranks == (0,)
    lag = next(f for f in a.findings if f.kind == "lagging_rank" and f.facts.pg == "0")
    assert lag.facts.waits_in_group == ("1",)
    assert finding(a, "hang").facts.shape is HangShape.OTHER_GROUP


def test_two_ranks_split_on_a_collective_the_one_that_left_the_loop_is_the_odd_one() -> None:
    # two ranks cannot outvote each other; the one that stopped repeating the step's
    # all_reduce is the one that left
    dumps = []
    for r in range(2):
        es = [fr_entry(s, sizes=((33280,),)) for s in range(1, 16)]
        es.append(fr_entry(16, "barrier", sizes=()) if r == 0 else fr_entry(16, sizes=((33280,),)))
        dumps.append(fr_source(r, es, pg_config={"0": (0, 1)}))
    a = correlate(dumps)
    mismatch = finding(a, "collective_mismatch")
    assert mismatch.ranks == (0,) and "left the loop" in mismatch.summary
    assert a.culprit_ranks == (0,)


# ------------------------------------------------------------------ a lone watchdog line


def test_a_lone_watchdog_line_names_no_rank_as_the_one_that_failed() -> None:
    watchdog = (
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=57, "
        "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for "
        "600041 milliseconds before timing out."
    )
    a = correlate(
        [ps(source("<pasted>", SourceKind.TEXT), [ev(EventKind.ERROR_LINE, watchdog, rank=3)])]
    )
    assert a.culprit_ranks == ()
    # the line is quoted as the earliest error, but rank 3 only reported the wait
    assert a.first_failure is not None and a.first_failure.rank is None
    assert "Watchdog caught" in a.first_failure.text
