"""The failure scenarios: which job runs how, and the truth each bundle is labelled with.

Labels are ids of ``shared/taxonomy.yaml``. The culprit is the rank that started the failure (for a
hang: the rank that is missing, behind or elsewhere), not the first one to print an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Node:
    """One launcher (torchrun agent) of the job; several nodes make a multi-node job."""

    host: str
    nproc: int
    console: str  # bundle path of this agent's combined output
    logs: str  # bundle folder that receives this agent's --log-dir tree
    env: dict[str, str] = field(default_factory=dict)
    start_delay_s: float = 0.0
    site: str | None = None  # jobs/sites/<site> goes on PYTHONPATH, shipped as site-packages


@dataclass(frozen=True)
class Scenario:
    name: str
    script: str  # file under jobs/
    nodes: tuple[Node, ...]
    expected: dict[str, Any]  # the truth: labels, culprit ranks, hang, story
    readme: str  # one paragraph: mechanism and how it is made
    culprit_pattern: str  # regex that must show in a culprit rank's own log
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    launcher_args: tuple[str, ...] = ()
    fr_dir: str = "fr"  # bundle folder for flight-recorder dumps
    fr_prefix: str = "comm_lib_trace_rank_"  # TORCH_FR_DUMP_TEMP_FILE file-name part
    fr_json: bool = False
    fr_ship_dir: str | None = None  # where the dumps seem to have been written, in shipped text
    hang_marker: str | None = None  # console regex after which the job is hung
    hang_settle_s: float = 3.0
    pyspy_name: str = "pyspy/rank{rank}"  # + .txt / .json
    pyspy_agent: str | None = None  # also dump the launcher itself, under this name
    oom_kill: tuple[int, int] | None = None  # (rank, RSS MiB) at which the "OOM killer" strikes
    occupy_port: bool = False
    env_report: str = "collect_env.txt"
    wall_limit_s: float = 120.0
    world_size: int | None = None  # when not every rank is started
    fr_ranks: tuple[int, ...] = ()  # ranks that must leave a flight-recorder dump
    # False when every rank stopped on the same collective (the culprit shows only in its logs).
    fr_shows_culprit: bool = True

    @property
    def ranks(self) -> int:
        return self.world_size or sum(n.nproc for n in self.nodes)


def _story(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"symptom_alt": [], "root_cause_alt": [], "fix_alt": []}
    base.update(kw)
    return base


_LIST = [
    Scenario(
        name="raise_mid_step",
        script="train_lm_ddp.py",
        args=("--steps", "12"),
        nodes=(Node(host="node01", nproc=4, console="console.log", logs="logs"),),
        fr_json=True,
        expected=_story(
            story="rank 2's collate_fn raises on a truncated corpus record at step 7; the other "
            "ranks, waiting in DDP's gradient all-reduce, see the connection to rank 2 close",
            symptom="S18",
            symptom_alt=["S08"],
            root_cause="R26",
            root_cause_alt=["R27"],
            fix="F6",
            fix_alt=["F3"],
            stage="ST4",
            culprit_ranks=[2],
            hang=False,
        ),
        readme="""
Four-rank DDP language-model pretraining (gloo, CPU). The collate function stacks records cut to
the context length without padding; record 206 of the corpus is shorter than the context, and it
lands in rank 2's seventh batch. Rank 2 raises `RuntimeError: stack expects each tensor to be
equal size` inside the DataLoader; ranks 0, 1 and 3 are already in DDP's backward all-reduce and
fail with gloo's "Connection closed by peer". The script uses `@record`, so the launcher log
directory holds `error.json` files, and every surviving rank dumps its flight recorder.
""",
        culprit_pattern=r"stack expects each tensor to be equal size",
        fr_ranks=(0, 1, 2, 3),
    ),
    Scenario(
        name="skip_collective_empty_val_shard",
        script="train_classifier_eval.py",
        args=("--epochs", "2", "--timeout", "12"),
        nodes=(Node(host="gpu-a07", nproc=3, console="slurm-81723.out", logs="torchrun_logs"),),
        launcher_args=("--rdzv-id=81723",),
        fr_dir="fr_traces",
        fr_prefix="comm_lib_trace_rank_{host}_",
        fr_ship_dir="/scratch/job81723/fr_traces",
        hang_marker=r"epoch 0 done, evaluating on 0 file",
        hang_settle_s=4.0,
        pyspy_name="stacks/py-spy-rank{rank}",
        expected=_story(
            story="two validation files split over three ranks leave rank 2 with none; it skips "
            "the val-loss all_reduce and waits at the barrier while ranks 0-1 wait in the "
            "all_reduce until gloo times out",
            symptom="S17",
            root_cause="R08",
            root_cause_alt=["R09"],
            fix="F6",
            fix_alt=["F3"],
            stage="ST4",
            culprit_ranks=[2],
            hang=True,
        ),
        readme="""
Three-rank DDP classifier (gloo, CPU) with an end-of-epoch validation pass. Validation files are
split as `VAL_FILES[rank::world]`: with two files and three ranks, rank 2 gets none and its
`if val is not None: dist.all_reduce(val)` is skipped (rank-dependent control flow). Rank 2 goes
on to `dist.barrier()`; ranks 0 and 1 wait in the all_reduce. The hang lasts until the 12 s gloo
timeout. py-spy dumps of every rank were taken while it hung (`stacks/`); flight-recorder dumps
(`fr_traces/`, hostname in the file name) show ranks 0-1 last in `all_reduce` and rank 2 in
`barrier`. Console is a Slurm-style `slurm-81723.out`; logs are glog-formatted.
""",
        culprit_pattern=r"evaluating on 0 file",
        fr_ranks=(0, 1, 2),
    ),
    Scenario(
        name="allgather_uneven_eval_slice",
        script="eval_gather_preds.py",
        nodes=(Node(host="node03", nproc=3, console="eval.log", logs="logs"),),
        launcher_args=("--rdzv-id=eval-0412",),
        fr_prefix="nccl_trace_rank_",
        fr_dir="fr",
        env={"TORCH_INCLUDE_STACK_TRACE": "0"},
        expected=_story(
            story="1000 test samples split with ceil() give rank 2 only 332 rows; all_gather into "
            "buffers shaped like the local tensor mismatches in size and gloo aborts rank 2 "
            "(SIGABRT); ranks 0-1 then lose their peer",
            symptom="S21",
            # gloo itself reports the size mismatch: S12 by taxonomy_notes (as for
            # metric_dtype_differs_on_one_rank, the same check on a dtype)
            symptom_alt=["S27", "S17", "S12"],
            root_cause="R08",
            root_cause_alt=["R09"],
            fix="F6",
            fix_alt=["F3"],
            stage="ST4",
            culprit_ranks=[2],
            hang=False,
        ),
        readme="""
Three-rank distributed evaluation (gloo, CPU). The test set (1000 rows) is sliced with
`ceil(n / world)` rows per rank, so rank 2 scores 332 rows and ranks 0-1 score 334. Predictions
are collected with `dist.all_gather` into buffers shaped like each rank's *own* tensor, so the
collective's shapes differ across ranks. gloo enforces the message size: rank 2 is aborted
(`gloo::EnforceNotMet ... Received data size doesn't match expected size`, exit -6) and leaves
no flight-recorder dump; ranks 0 and 1 fail with a closed connection and dump theirs (`fr/`),
which record the different `all_gather` shapes. Plain `print` logging.
""",
        culprit_pattern=r"Received data size doesn't match expected size",
        fr_ranks=(0, 1),
    ),
    Scenario(
        name="uneven_shards_rank_exits_loop",
        script="train_sharded_regression.py",
        args=("--timeout", "15"),
        nodes=(Node(host="trn-node-2", nproc=4, console="train.log", logs="elastic_logs"),),
        launcher_args=("--rdzv-id=regress-7",),
        fr_dir="flight_recorder",
        fr_json=True,
        hang_marker=r"finished epoch after",
        hang_settle_s=3.0,
        pyspy_name="pyspy/trn-node-2.rank{rank}.pid{pid}",
        expected=_story(
            story="shard files are split per rank without balancing; rank 3 holds a short shard, "
            "runs out of batches after 8 steps and waits at the end-of-epoch barrier while "
            "ranks 0-2 wait in DDP's gradient all_reduce for step 9",
            symptom="S17",
            symptom_alt=["S24"],
            root_cause="R09",
            root_cause_alt=["R27"],
            fix="F3",
            fix_alt=["F6"],
            stage="ST4",
            culprit_ranks=[3],
            hang=True,
        ),
        readme="""
Four-rank DDP regression (gloo, CPU) that reads pre-sharded files `shards[rank::world]` instead of
using a `DistributedSampler`. The last shard is short, so rank 3 has 8 batches per epoch and the
others 12. Rank 3 leaves the loop and waits in `dist.barrier()`; ranks 0-2 block in DDP's backward
all_reduce of step 9 until the 15 s gloo timeout. py-spy dumps (text and JSON) of all four ranks
were taken during the hang; flight-recorder dumps (pickle and JSON) show rank 3's last collective
is a barrier while the others are in an all_reduce. loguru-style log lines.
""",
        culprit_pattern=r"finished epoch after 8 steps",
        fr_ranks=(0, 1, 2, 3),
    ),
    Scenario(
        name="rank0_preprocessing_exceeds_timeout",
        script="prepare_then_train.py",
        args=("--merges", "4000", "--timeout", "10"),
        nodes=(Node(host="node07", nproc=3, console="job.out", logs="logs"),),
        fr_prefix="fr_rank",
        fr_dir="dumps",
        fr_ship_dir="/home/mluser/.cache/torch/dumps",
        hang_marker=r"waiting for rank 0 to finish preprocessing",
        hang_settle_s=4.0,
        pyspy_name="pyspy-dumps/node07-{rank}",
        expected=_story(
            story="rank 0 builds the vocabulary in pure Python for longer than the 10 s process "
            "group timeout; ranks 1-2 time out at the barrier that waits for it",
            symptom="S17",
            root_cause="R11",
            root_cause_alt=["R24"],
            fix="F4",
            fix_alt=["F3"],
            stage="ST2",
            culprit_ranks=[0],
            hang=True,
        ),
        readme="""
Three ranks (gloo, CPU). Rank 0 builds a BPE-style vocabulary in a slow pure-Python loop while
ranks 1 and 2 wait at `dist.barrier()`. The process group timeout is 10 s, far shorter than the
preprocessing, so the waiting ranks fail with gloo's "Timed out waiting 10000ms" and the launcher
then stops rank 0 with SIGTERM (its handler dumps the flight recorder on the way out). py-spy
dumps taken during the wait show rank 0 inside `build_vocab` and ranks 1-2 in `barrier`.
Python `logging` with a `[rankN]` tag.
""",
        culprit_pattern=r"building vocabulary",
        fr_ranks=(0, 1, 2),
    ),
    Scenario(
        name="oom_killed_rank_image_cache",
        script="train_image_cache.py",
        nodes=(Node(host="node11", nproc=3, console="console.log", logs="logs"),),
        fr_prefix="comm_lib_trace_rank_",
        oom_kill=(1, 700),
        expected=_story(
            story="rank 1 caches decoded 1024x1024 images in host RAM, grows past the memory "
            "limit and is SIGKILLed as the OOM killer does; ranks 0 and 2 lose their peer in "
            "DDP's all_reduce",
            symptom="S15",
            symptom_alt=["S27"],
            root_cause="R17",
            root_cause_alt=["R18"],
            fix="F5",
            fix_alt=["F6"],
            stage="ST4",
            culprit_ranks=[1],
            hang=False,
        ),
        readme="""
Three-rank DDP image classifier (gloo, CPU) that keeps every decoded image in a host-RAM cache.
Rank 1's shard holds 1024x1024 images, so its cache grows by ~48 MiB a step. The generator plays
the kernel OOM killer: it sends SIGKILL to rank 1 once its resident memory passes 700 MiB (no
traceback, no flight-recorder dump, exit -9). Ranks 0 and 2 fail in the all_reduce with a closed
connection and dump their recorders. Plain `print` logging; rank 1's log simply stops.
""",
        culprit_pattern=r"rank      : 1 \(local_rank: 1\)\n  exitcode  : -9",
        fr_ranks=(0, 2),
    ),
    Scenario(
        name="segfault_native_augment",
        script="train_native_aug.py",
        nodes=(Node(host="node02", nproc=2, console="run.log", logs="logs"),),
        launcher_args=("--rdzv-id=aug-test",),
        fr_prefix="comm_lib_trace_rank_",
        expected=_story(
            story="rank 1 hands a null staging pointer to a native memcpy at step 9 and dies of "
            "SIGSEGV; rank 0 loses its peer in the gradient all_reduce",
            symptom="S27",
            symptom_alt=["S26"],
            root_cause="R26",
            root_cause_alt=["R23"],
            fix="F6",
            fix_alt=["F1"],
            stage="ST4",
            culprit_ranks=[1],
            hang=False,
        ),
        readme="""
Two-rank DDP training (gloo, CPU) whose augmentation copies pixels through `libc.memcpy` via
ctypes. Rank 1's shard has a 48 px batch at step 9; the staging-buffer lookup returns a null
pointer for that size and the native copy segfaults (exit -11). `faulthandler` prints the Python
stack of the crash to rank 1's stderr. Rank 0 fails with a closed connection in the all_reduce
and dumps its flight recorder; rank 1 leaves none.
""",
        culprit_pattern=r"Segmentation fault",
        fr_ranks=(0,),
    ),
    Scenario(
        name="ddp_unused_aux_head",
        script="train_multitask.py",
        nodes=(Node(host="node05", nproc=2, console="console.log", logs="logs"),),
        fr_prefix="comm_lib_trace_rank_",
        fr_json=True,
        expected=_story(
            story="the auxiliary head is switched off (aux_weight=0) but stays in the DDP model "
            "without find_unused_parameters; DDP raises on the second iteration on every rank",
            symptom="S25",
            symptom_alt=["S18"],
            root_cause="R14",
            fix="F3",
            fix_alt=["F6"],
            stage="ST4",
            culprit_ranks=[0, 1],
            hang=False,
        ),
        readme="""
Two-rank DDP multi-task model (gloo, CPU). With `--aux-weight 0` (the default) the auxiliary
head never contributes to the loss, and DDP was built without `find_unused_parameters=True`.
Both ranks raise `Expected to have finished reduction in the prior iteration before starting a
new one` on the second step. `@record` writes `error.json` for both ranks; Python logging with
its default `INFO:name:message` format.
""",
        culprit_pattern=r"Expected to have finished reduction in the prior iteration",
        fr_ranks=(0, 1),
    ),
    Scenario(
        name="ddp_head_shape_differs",
        script="finetune_head.py",
        nodes=(Node(host="ml-worker-3", nproc=3, console="stdout.txt", logs="run_logs"),),
        launcher_args=("--rdzv-id=ft-20261202",),
        fr_prefix="comm_lib_trace_rank_",
        fr_dir="fr",
        expected=_story(
            story="num_classes is derived from each rank's own label shard; rank 1 never sees "
            "label 9 and builds a 9-way head, so DDP's parameter-shape check fails",
            symptom="S21",
            symptom_alt=["S06", "S07"],
            root_cause="R26",
            root_cause_alt=["R27"],
            fix="F6",
            fix_alt=["F3"],
            stage="ST2",
            culprit_ranks=[1],
            hang=False,
        ),
        readme="""
Three-rank fine-tuning (gloo, CPU). Each rank reads only its own label shard and sets
`num_classes = y.max() + 1`; rank 1's shard lacks the rarest label, so its head is
`Linear(96, 9)` while ranks 0 and 2 build `Linear(96, 10)`. Wrapping the model in DDP checks
parameter shapes across ranks: rank 1 raises `params[2] in this process with sizes [9, 96]
appears not to match sizes of the same param in process 0`, the others fail on the closed
connection. `@record` error files; loguru-style logging at DEBUG.
""",
        culprit_pattern=r"appears not to match sizes of the same param",
        fr_ranks=(0, 1, 2),
    ),
    Scenario(
        name="master_port_in_use",
        script="train_sharded_regression.py",
        nodes=(Node(host="node01", nproc=2, console="console.log", logs="logs"),),
        occupy_port=True,
        expected=_story(
            story="a leftover process still listens on the master port, so torchrun's rendezvous "
            "store cannot bind (EADDRINUSE) and no worker ever starts",
            symptom="S10",
            symptom_alt=["S05"],
            root_cause="R06",
            root_cause_alt=["R07"],
            fix="F4",
            fix_alt=["F3"],
            stage="ST3",
            culprit_ranks=[],
            hang=False,
        ),
        readme="""
Single node, two processes requested. Before launching, the generator binds and listens on the
master port, as a stale process from an earlier run would. torchrun's static rendezvous creates its
TCPStore on that port and fails with `DistNetworkError: ... EADDRINUSE, message: address already
in use`; no worker starts, so there are no per-rank logs or dumps, only the launcher's output.
""",
        culprit_pattern=r"EADDRINUSE",
    ),
    Scenario(
        name="second_node_never_joins",
        script="train_sharded_regression.py",
        nodes=(Node(host="node01", nproc=2, console="node01.log", logs="logs"),),
        world_size=4,
        launcher_args=("--rdzv-conf=timeout=20",),
        hang_marker=r"OMP_NUM_THREADS",
        hang_settle_s=6.0,
        pyspy_agent="pyspy/torchrun-{host}",
        expected=_story(
            story="the job asks for 2 nodes x 2 processes but only node01 is started; its "
            "launcher waits in the static rendezvous for the second node until the 20 s "
            "rendezvous timeout",
            symptom="S10",
            symptom_alt=["S05", "S11"],
            root_cause="R06",
            fix="F4",
            fix_alt=["F3"],
            stage="ST3",
            culprit_ranks=[2, 3],
            hang=True,
        ),
        readme="""
`torchrun --nnodes=2 --nproc-per-node=2` is started on node01 only (the second node's launch line
was never run). The static rendezvous on node01 waits for the other agent to join its TCPStore;
after the 20 s rendezvous timeout (`--rdzv-conf=timeout=20`) the launcher fails with a store
timeout. No worker starts: the bundle holds the launcher output and a py-spy dump of the waiting
torchrun process. The missing ranks are 2 and 3.
""",
        culprit_pattern=r"clients joined|Timed out",
    ),
    Scenario(
        name="process_groups_entered_out_of_order",
        script="train_with_metrics_group.py",
        nodes=(Node(host="node04", nproc=3, console="console.log", logs="logs"),),
        fr_prefix="comm_lib_trace_rank_node04_",
        fr_json=True,
        hang_marker=r"first step done",
        hang_settle_s=2.0,
        pyspy_name="py-spy/rank_{rank}",
        expected=_story(
            story="on logging steps rank 0 all-reduces metrics on the second process group "
            "before the gradients, ranks 1-2 do gradients first; each side waits on a group the "
            "other has not entered and both time out",
            symptom="S17",
            root_cause="R08",
            root_cause_alt=["R10"],
            fix="F6",
            fix_alt=["F4"],
            stage="ST4",
            culprit_ranks=[0],
            hang=True,
        ),
        readme="""
Three ranks (gloo, CPU) with two process groups: the default one for gradients and a second gloo
group for metrics. On every 5th step the logging rank (0) reduces metrics on the metrics group
before averaging gradients; ranks 1 and 2 average gradients on the default group first. Rank 0
waits in the metrics group, ranks 1-2 in the default group: a deadlock until the 15 s timeout.
py-spy dumps show the two different `all_reduce` call sites; flight-recorder dumps show rank 0's
last collective on process group 1 while the others are on group 0. glog-style logs.
""",
        culprit_pattern=r"Timed out",
        fr_ranks=(0, 1, 2),
    ),
    Scenario(
        name="import_error_on_one_node",
        script="train_fused_norm.py",
        nodes=(
            Node(
                host="node01",
                nproc=2,
                console="node01/console.log",
                logs="node01/logs",
                site="node01",
            ),
            Node(
                host="node02",
                nproc=2,
                console="node02/console.log",
                logs="node02/logs",
                site="node02",
            ),
        ),
        fr_prefix="comm_lib_trace_rank_",
        fr_dir="fr",
        hang_marker=r"ChildFailedError",
        hang_settle_s=3.0,
        pyspy_name="node01/pyspy/rank{rank}",
        expected=_story(
            story="node02 has an older fastkernels (0.3.2) without fused_rmsnorm; its ranks 2-3 "
            "die of ImportError before joining, and node01's ranks wait in "
            "init_process_group until the store times out",
            symptom="S02",
            symptom_alt=["S10", "S11"],
            root_cause="R01",
            root_cause_alt=["R02"],
            fix="F1",
            stage="ST1",
            culprit_ranks=[2, 3],
            hang=True,
        ),
        readme="""
Two nodes, two processes each (two torchrun agents, static rendezvous). node02's environment has
fastkernels 0.3.2, which lacks `fused_rmsnorm`; node01 has 0.4.1. Ranks 2 and 3 fail at import
time with `ImportError: cannot import name 'fused_rmsnorm'` and node02's launcher gives up.
Ranks 0 and 1 on node01 wait in `init_process_group` for the missing ranks until the 25 s
timeout; py-spy dumps of them were taken during the wait. One folder per node.
""",
        culprit_pattern=r"cannot import name 'fused_rmsnorm'",
    ),
    Scenario(
        name="nan_from_one_rank_shard",
        script="train_sensor_regression.py",
        nodes=(Node(host="node09", nproc=4, console="train-0.log", logs="logs"),),
        launcher_args=("--rdzv-id=sensors",),
        fr_prefix="comm_lib_trace_rank_",
        fr_dir="fr",
        expected=_story(
            story="a stuck sensor makes one feature constant in rank 1's batch 23; per-batch "
            "standardization divides by a zero std, rank 1's loss turns NaN and DDP's gradient "
            "average spreads it, so every rank stops on a NaN mean loss",
            symptom="S19",
            root_cause="R27",
            root_cause_alt=["R21"],
            fix="F6",
            fix_alt=["F3"],
            stage="ST4",
            culprit_ranks=[1],
            hang=False,
        ),
        readme="""
Four-rank DDP regression (gloo, CPU) that standardizes every batch with its own mean and std.
In rank 1's shard one sensor column is constant for 32 rows, so batch 23 has a zero std: rank 1's
local loss is NaN at step 23 while the others are finite. The all-reduced gradients carry the NaN
to every rank, and all four raise `FloatingPointError: loss became nan` on the same step: the
error is everywhere, only the per-rank `local_loss` lines show where it came from. Logging with a
`[rankN]` tag; every rank dumps its flight recorder on the way out.
""",
        culprit_pattern=r"step 23 local_loss nan",
        fr_ranks=(0, 1, 2, 3),
        fr_shows_culprit=False,
    ),
    Scenario(
        name="rank0_checkpoint_upload_blocks_step",
        script="train_ckpt_upload.py",
        nodes=(Node(host="node12", nproc=2, console="slurm-90211.out", logs="logs"),),
        launcher_args=("--rdzv-id=90211",),
        fr_prefix="comm_lib_trace_rank_node12_",
        fr_dir="fr",
        fr_json=True,
        hang_marker=r"uploading",
        hang_settle_s=2.0,
        pyspy_name="pyspy/rank{rank}",
        expected=_story(
            story="rank 0 uploads a 24 MiB checkpoint through a rate-limited uploader inside the "
            "training loop; rank 1 waits in the next step's gradient all_reduce and times out "
            "after 10 s",
            symptom="S17",
            symptom_alt=["S28"],
            root_cause="R11",
            root_cause_alt=["R24"],
            fix="F4",
            fix_alt=["F2", "F6"],
            stage="ST5",
            culprit_ranks=[0],
            hang=True,
        ),
        readme="""
Two-rank DDP training (gloo, CPU). Every 10 steps rank 0 serializes the model and optimizer
(about 24 MiB) and uploads it to object storage through a client throttled to 1.5 MiB/s, inside
the training loop. Rank 1 goes on to step 11 and blocks in DDP's gradient all_reduce; the process
group timeout is 10 s, shorter than the upload, so rank 1 fails with gloo's "Timed out waiting"
and the launcher stops rank 0. py-spy dumps show rank 0 in `upload` and rank 1 in backward.
JSON-lines logs (a log-shipper format).
""",
        culprit_pattern=r"uploading",
        fr_ranks=(0, 1),
    ),
    Scenario(
        name="keyerror_in_prefetch_thread_rank_waits",
        script="finetune_records_prefetch.py",
        args=("--steps", "30", "--timeout", "12"),
        nodes=(Node(host="node21", nproc=3, console="console.log", logs="logs"),),
        fr_prefix="comm_lib_trace_rank_node21_",
        hang_marker=r"Exception in thread prefetch",
        hang_settle_s=3.0,
        pyspy_name="pyspy/rank{rank}",
        expected=_story(
            story="rank 1's batch-assembly thread raises KeyError on a record without an "
            "attention mask; rank 1's loop then waits forever for a batch while ranks 0 and 2 "
            "wait in the gradient all_reduce until the 12 s timeout",
            symptom="S18",
            symptom_alt=["S08"],
            root_cause="R26",
            root_cause_alt=["R27"],
            fix="F6",
            fix_alt=["F3"],
            stage="ST4",
            culprit_ranks=[1],
            hang=True,
        ),
        readme="""
Three-rank DDP fine-tuning (gloo, CPU). Each rank assembles batches of dict records in a daemon
thread that feeds a queue. Record 301 lost its `attention_mask` when it was tokenized; it falls
in rank 1's shard, so rank 1's thread dies with `KeyError: 'attention_mask'` (printed by
Python's thread excepthook) and rank 1's training loop blocks in `queue.get()` for a batch that
never comes. Ranks 0 and 2 wait in DDP's gradient all_reduce until gloo's 12 s timeout; the
launcher then stops rank 1 (its SIGTERM handler dumps the flight recorder). py-spy dumps taken
during the wait show rank 1 in `get` and ranks 0 and 2 in backward. The flight recorder shows
rank 1 never entered the all_reduce the others wait in: a consequence of its exception.
""",
        culprit_pattern=r"KeyError: 'attention_mask'",
        fr_ranks=(0, 1, 2),
    ),
    Scenario(
        name="eval_label_mismatch_rank_waits_at_barrier",
        script="eval_loss_barrier.py",
        args=("--epochs", "2", "--timeout", "12"),
        nodes=(Node(host="node22", nproc=3, console="console.log", logs="logs"),),
        fr_prefix="comm_lib_trace_rank_node22_",
        fr_json=True,
        hang_marker=r"epoch 0 train loss",
        hang_settle_s=4.0,
        pyspy_name="pyspy/rank{rank}",
        expected=_story(
            story="rank 2's validation shard has a batch with one label short; cross_entropy "
            "raises ValueError, its `finally:` takes rank 2 to the barrier while ranks 0 and 1 "
            "wait in the validation all_reduce until the 12 s timeout",
            symptom="S18",
            symptom_alt=["S08"],
            root_cause="R26",
            root_cause_alt=["R27"],
            fix="F6",
            fix_alt=["F3"],
            stage="ST4",
            culprit_ranks=[2],
            hang=True,
        ),
        readme="""
Three-rank DDP classifier (gloo, CPU) with a validation pass every epoch, wrapped in
`try: ... finally: dist.barrier()` so every rank meets before the next epoch. The last
validation batch of rank 2 has 8 inputs but 7 labels; `F.cross_entropy` raises `ValueError:
Expected input batch_size (8) to match target batch_size (7)`. The `finally:` takes rank 2 to the
barrier while ranks 0 and 1 wait in the all_reduce of the validation loss: a collective mismatch
that is the consequence of rank 2's exception. Both sides time out after 12 s; rank 2's log chains
the timeout onto the ValueError. py-spy dumps during the wait; flight-recorder pickles and JSON.
""",
        culprit_pattern=r"Expected input batch_size \(8\) to match target batch_size \(7\)",
        fr_ranks=(0, 1, 2),
    ),
    Scenario(
        name="host_alloc_fails_rank_waits_for_checkpoint",
        script="train_cooccurrence_metric.py",
        args=("--steps", "40", "--metric-every", "10", "--timeout", "12"),
        nodes=(Node(host="node23", nproc=2, console="train.log", logs="logs"),),
        fr_prefix="comm_lib_trace_rank_node23_",
        hang_marker=r"syncing ranks for an emergency checkpoint",
        hang_settle_s=3.0,
        pyspy_name="pyspy/rank{rank}",
        expected=_story(
            story="rank 0 asks for a dense 64 GiB vocabulary x vocabulary tensor for a metric and "
            "the CPU allocator refuses; its emergency-checkpoint handler waits at a barrier while "
            "rank 1 waits in the next step's gradient all_reduce until the 12 s timeout",
            symptom="S15",
            root_cause="R17",
            root_cause_alt=["R26"],
            fix="F5",
            fix_alt=["F6"],
            stage="ST4",
            culprit_ranks=[0],
            hang=True,
        ),
        readme="""
Two-rank DDP embedding pretraining (gloo, CPU). Every 10 steps rank 0 computes a token
co-occurrence metric into a dense vocabulary x vocabulary float32 tensor: 131072^2 x 4 bytes =
64 GiB, which the host cannot give; torch raises `DefaultCPUAllocator: can't allocate memory`.
The script's failure handler syncs all ranks at a barrier to write an emergency checkpoint, but
rank 1 is already in the next step's gradient all_reduce: both wait until gloo's 12 s timeout.
glog-style logs; py-spy dumps during the wait show rank 0 in `emergency_checkpoint` and rank 1
in backward.
""",
        culprit_pattern=r"DefaultCPUAllocator: can't allocate memory",
        fr_ranks=(0, 1),
    ),
    Scenario(
        name="metric_dtype_differs_on_one_rank",
        script="eval_per_class_recall.py",
        args=("--epochs", "2", "--timeout", "15"),
        nodes=(Node(host="node24", nproc=4, console="console.log", logs="logs"),),
        fr_prefix="comm_lib_trace_rank_node24_",
        expected=_story(
            story="rank 3's validation shard lacks the rarest class, so its per-class hit counts "
            "come from a NumPy fallback as float64 while the other ranks all_reduce float32: gloo "
            "receives twice the bytes it expects and aborts a peer",
            symptom="S12",
            symptom_alt=["S21"],
            root_cause="R08",
            root_cause_alt=["R26"],
            fix="F6",
            fix_alt=["F3"],
            stage="ST4",
            culprit_ranks=[3],
            hang=False,
        ),
        readme="""
Four-rank DDP classifier (gloo, CPU) that sums per-class validation hits with one all_reduce.
Rank 3's shard holds no example of the rarest class; its code path builds the counts with
`np.zeros` and `torch.from_numpy`, which gives float64, while ranks 0-2 build float32 tensors.
The all_reduce pairs 48-byte and 24-byte messages: gloo's receiver aborts with "Received data size
doesn't match expected size. Is there a distributed collective mismatch in your code?" (SIGABRT),
and the other ranks see their connections reset. The surviving ranks' flight-recorder dumps show
the same collective with dtype Double on rank 3 and Float on the others: rank 3 is the odd one
out, not the rank that aborted. Loguru-style logs.
""",
        culprit_pattern=r"epoch 0 train loss",
        fr_ranks=(0, 1, 3),
    ),
]

SCENARIOS: dict[str, Scenario] = {sc.name: sc for sc in _LIST}
