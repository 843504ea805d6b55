"""Hand-built diagnoses for the report tests: a hang, an abstention, hostile text, a big job."""

from __future__ import annotations

from triage.model import (
    CollectiveProgress,
    CollectiveRef,
    Diagnosis,
    Evidence,
    FailureRef,
    Finding,
    FindingKind,
    FixRecommendation,
    GroupProgress,
    HangReport,
    InputSummary,
    RankExit,
    ScoredLabel,
    SimilarCase,
    SourceKind,
    StackFrame,
    StackGroup,
    TimelineEntry,
)

T0 = 1_764_663_475.25  # 2025-12-02 08:17:55.250 UTC

TOP_ACTION = "Find what rank 3 was doing: `py-spy dump --pid 4242` on host `node-b`"
INPUT_WARNING = "truncated pickle: flight-recorder dump ends after 1,024 bytes"

WATCHDOG = (
    "[rank{r}]:[E1202 08:27:55.251] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, NumelIn=1048576, "
    "NumelOut=1048576, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
)


def hang_on_rank3() -> Diagnosis:
    """Four ranks; rank 3 never entered all_reduce seq 57, the other three timed out waiting."""
    stall = "step 1200 done; rank 3 entered the eval branch alone"
    timeline = (
        TimelineEntry(T0, 3, stall, "logs/3.log", 880, "initiating"),
        *(
            TimelineEntry(T0 + 600 + r, r, WATCHDOG.format(r=r), f"logs/{r}.log", 1201, "cascade")
            for r in range(3)
        ),
        TimelineEntry(
            T0 + 610, None, "torchrun: sending SIGTERM to workers", "logs/agent.log", 40, "context"
        ),
    )
    return Diagnosis(
        summary=(
            "Rank 3 stopped before all_reduce #57; ranks 0-2 waited for it until the NCCL "
            "watchdog timed out after 600 s."
        ),
        symptoms=(
            ScoredLabel(
                "S17", "collective_hang_timeout", "Collective hang or watchdog timeout", 0.91
            ),
            ScoredLabel("S24", "straggler_imbalance", "Straggler rank or load imbalance", 0.22),
        ),
        root_causes=(
            ScoredLabel(
                "R09", "uneven_work_across_ranks", "Uneven work or data across ranks", 0.74
            ),
        ),
        stage=ScoredLabel("ST4", "training_execution", "Training execution", 1.0),
        fix_patterns=(
            FixRecommendation(
                "F6",
                "code_fix",
                "Code fix",
                0.8,
                (TOP_ACTION, "Make every rank call `all_reduce` the same number of times."),
                why="rank 3 is the only rank missing from collective seq 57",
            ),
            FixRecommendation(
                "F4",
                "communication_fix",
                "Communication fix",
                0.35,
                (
                    "Raise the timeout while you investigate: "
                    "`init_process_group(timeout=timedelta(minutes=30))`",
                ),
                why="the watchdog fired after the default 600 s",
            ),
        ),
        first_failure=FailureRef(3, "node-b", T0, "logs/3.log", 880, stall),
        culprit_ranks=(3,),
        hang=HangReport(
            detected=True,
            lagging_ranks=(3,),
            process_group="0 (default_pg)",
            collective=CollectiveRef(
                op="all_reduce",
                seq=57,
                profiling_name="nccl:all_reduce",
                input_sizes=((1048576,),),
                input_dtypes=("Float",),
            ),
            account="ranks 0-2 completed seq 56 and started seq 57; rank 3 never enqueued it",
        ),
        evidence=(
            Evidence("logs/0.log", 1201, 0, WATCHDOG.format(r=0), "rule nccl-watchdog-timeout"),
            Evidence("fr/rank_3", None, 3, "last enqueued collective seq 56", "rule fr-lagging"),
        ),
        similar_cases=(
            SimilarCase("pt-117", "https://github.com/pytorch/pytorch/issues/117", 0.83),
            SimilarCase("bad-link", "javascript:alert(1)", 0.5),
        ),
        inputs=(
            InputSummary("logs/0.log", SourceKind.RANK_LOG, 0, "node-a", events=12),
            InputSummary("logs/1.log", SourceKind.RANK_LOG, 1, "node-a", events=11),
            InputSummary("logs/2.log", SourceKind.RANK_LOG, 2, "node-b", events=11),
            InputSummary("logs/3.log", SourceKind.RANK_LOG, 3, "node-b", events=4),
            InputSummary(
                "fr/rank_2", SourceKind.FLIGHT_RECORDER, 2, "node-b", warnings=(INPUT_WARNING,)
            ),
        ),
        findings=(
            Finding("lagging_rank", "rank 3 is behind: last collective seq 56, others 57", (3,)),
            Finding("cascade", "ranks 0-2 timed out waiting (watchdog)", (0, 1, 2)),
        ),
        timeline=timeline,
        rank_exits=(
            *(
                RankExit(r, r, "node-a", 100 + r, -6, "SIGABRT", T0 + 605 + r, None, None)
                for r in range(3)
            ),
            RankExit(3, 1, "node-b", 103, -15, "SIGTERM", T0 + 610, None, None),
        ),
        process_groups=(
            GroupProgress(
                "0",
                "default_pg",
                (
                    *(CollectiveProgress(r, 57, 57, 56) for r in range(3)),
                    CollectiveProgress(3, 56, 56, 56),
                ),
                lagging=(3,),
                stuck_seq=57,
                stuck_op="all_reduce",
            ),
        ),
        stack_groups=(
            StackGroup(
                (0, 1, 2),
                (
                    StackFrame("all_reduce", "torch/distributed/distributed_c10d.py", 2950),
                    StackFrame("train_step", "train.py", 88),
                ),
                waiting=True,
                outlier=False,
            ),
            StackGroup(
                (3,),
                (
                    StackFrame("evaluate", "train.py", 140),
                    StackFrame("main", "train.py", 201),
                ),
                waiting=False,
                outlier=True,
            ),
        ),
    )


def abstention() -> Diagnosis:
    """One pasted line that says nothing about why the job ended."""
    return Diagnosis(
        summary="Not enough evidence; collect every rank's log and py-spy dumps of stuck ranks.",
        inputs=(InputSummary("<pasted>", SourceKind.TEXT, None, None, events=1),),
    )


HOSTILE = (
    "RuntimeError: <script>alert(1)</script> </details> ``` `tick` "
    "<img src=x onerror=document.title='pwned'> \x1b[31mred\x1b[0m \x1b]0;title\x07 "
    "[bold]markup[/bold] @octocat #12 | pipe"
)


def hostile() -> Diagnosis:
    """Every user-visible string carries text that would break a careless renderer."""
    base = hang_on_rank3()
    return Diagnosis(
        summary=f"Rank 3 failed: {HOSTILE}",
        symptoms=base.symptoms,
        root_causes=base.root_causes,
        stage=base.stage,
        fix_patterns=(
            FixRecommendation(
                "F6",
                "code_fix",
                "Code fix",
                0.6,
                (TOP_ACTION, f"Check `{HOSTILE}` and {HOSTILE}"),
                why=HOSTILE,
            ),
        ),
        first_failure=FailureRef(3, "node-b", T0, "logs/3.log", 7, HOSTILE + "\n" + HOSTILE),
        culprit_ranks=(3,),
        hang=HangReport(True, (3,), HOSTILE, CollectiveRef(op=HOSTILE), HOSTILE),
        evidence=(Evidence("logs/3.log", 7, 3, HOSTILE + "\n```\n</details>\n", HOSTILE),),
        similar_cases=(SimilarCase(HOSTILE, "https://example.org/x?a=<script>", 0.4),),
        inputs=(InputSummary(f"logs/{HOSTILE}.log", SourceKind.RANK_LOG, 3, HOSTILE, (HOSTILE,)),),
        # a finding's kind is one of the FindingKind values: only its summary can be hostile
        findings=(Finding(FindingKind.HANG, HOSTILE, (3,)),),
        timeline=(TimelineEntry(T0, 3, HOSTILE, HOSTILE, 7, "initiating"),),
    )


def big_job(ranks: int = 1024, cascade_per_rank: int = 4) -> Diagnosis:
    """A 1,024-rank job: one initiating error, thousands of cascade lines, 1,024 inputs."""
    base = hang_on_rank3()
    crash = "CUDA error: an illegal memory access was encountered"
    timeline = [TimelineEntry(T0, 517, crash, "logs/517.log", 9001, "initiating")]
    for k in range(cascade_per_rank):
        for r in range(ranks):
            timeline.append(
                TimelineEntry(
                    T0 + 1 + k * 30 + r / ranks,
                    r,
                    f"[rank{r}] NCCL communicator was aborted on rank {r} (attempt {k})\n  line 2",
                    f"logs/{r}.log",
                    9000 + k,
                    "cascade",
                )
            )
    inputs = tuple(
        InputSummary(
            f"job/{r // 8}/rank{r}.log",
            SourceKind.RANK_LOG,
            r,
            f"node{r // 8:03d}",
            ("could not decode 12 bytes as UTF-8",) if r == 1000 else (),
            events=cascade_per_rank,
        )
        for r in range(ranks)
    )
    return Diagnosis(
        summary="Rank 517 hit an illegal memory access; 1,023 ranks aborted after it.",
        symptoms=(
            ScoredLabel(
                "S26", "cuda_kernel_fault", "CUDA kernel fault or illegal memory access", 0.88
            ),
        ),
        root_causes=(ScoredLabel("R28", "hardware_fault", "Hardware fault", 0.61),),
        stage=base.stage,
        fix_patterns=base.fix_patterns,
        first_failure=FailureRef(517, "node064", T0, "logs/517.log", 9001, crash),
        culprit_ranks=(517,),
        evidence=tuple(
            Evidence(f"logs/{r}.log", 9000, r, "NCCL communicator was aborted", "rule nccl-abort")
            for r in range(200)
        ),
        inputs=inputs,
        timeline=tuple(timeline),
    )
