"""Recommend: ranked fix patterns, each with concrete actions filled with the job's own facts.

A fix pattern's score combines two things:

* evidence: `classification.fix_scores`, what the rules and neighbour cases say fixed failures
  like this one (already fused and calibrated by the classifier);
* the taxonomy prior: each likely root cause lists the fix patterns that usually resolve it,
  best first (`taxonomy.root_causes[R].fixes`); a fix earns the root cause's score, halved for
  each place further down the list.

Actions come from the rules that matched (filled with captured groups: the exact env var, the
rank, the requested bytes) and then from the per-root-cause playbook below, filled with the
analysis facts (culprit ranks, the collective, the timeout, versions from env reports).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from triage import taxonomy
from triage.classify import rules as rule_engine
from triage.classify.rules import render
from triage.model import Analysis, Classification, Evidence, FixRecommendation, ScoredLabel

# Share of the score from the classifier's fix_scores when it gave some. Those scores already
# fold in the root-cause prior (the calibrator reads it), so the prior here mostly breaks
# near-ties and brings in fixes no evidence named; on dev.jsonl a larger prior share flipped
# right evidence-backed answers (AutoTP -> F3, fp16 scale -> F3) to the prior's first fix
# (fix@1 on dev: 0.75 at a 0.5 share, 0.78 at 0.9).
EVIDENCE_WEIGHT = 0.9
PRIOR_DECAY = (1.0, 0.5, 0.25)  # weight of a root cause's 1st, 2nd, 3rd listed fix
MAX_ACTIONS = 5
MIN_SCORE = 0.02
TOP_CAUSES = 3  # playbook actions come from the best few root causes only
MIN_CAUSE_SCORE = 0.15
CAUSE_RATIO = 0.35  # ... and only those scoring at least this share of the best one

# A playbook entry: (facts it needs, template). The first entry whose facts are all known wins,
# so an action names the job's rank or version when they are known and stays general otherwise.
Option = tuple[tuple[str, ...], str]

PLAYBOOK: Mapping[str, Mapping[str, Sequence[Option]]] = {
    "R01": {
        "F1": [
            (
                ("torch", "nccl"),
                "Pin one tested set on every node (same image): `torch=={torch}` with its bundled "
                "NCCL {nccl}, and the framework release that supports it; reinstall compiled "
                "extensions against that torch.",
            ),
            (
                ("torch",),
                "Pin one tested set on every node: `torch=={torch}` and the framework/extension "
                "releases built for it (check their requirements); rebuild compiled ops after.",
            ),
            (
                (),
                "Align versions: install the framework release that matches your torch/CUDA "
                "(see its requirements or changelog), the same on every node; rebuild compiled "
                "ops (`pip install --no-build-isolation --force-reinstall <pkg>`).",
            ),
        ],
        "F6": [((), "Or adapt the code to the installed API (renamed import, new signature).")],
    },
    "R02": {
        "F1": [
            (
                (),
                "Install the missing package or library in the environment every rank runs "
                "(`python -m pip install <pkg>` with the same interpreter the launcher starts).",
            )
        ]
    },
    "R03": {
        "F1": [
            (
                ("cuda",),
                "Build with a toolkit matching torch's CUDA {cuda}: `export CUDA_HOME=/usr/local/"
                "cuda-{cuda}`, a supported gcc (`CC=gcc-11 CXX=g++-11`) and "
                '`TORCH_CUDA_ARCH_LIST="<your GPUs>"`; or install prebuilt wheels.',
            ),
            (
                (),
                "Build with a CUDA toolkit matching `torch.version.cuda` (`CUDA_HOME`), a gcc "
                'nvcc supports, and `TORCH_CUDA_ARCH_LIST="8.0;9.0"` for your GPUs; or use a '
                "`-devel` container / prebuilt wheels.",
            ),
        ],
        "F5": [
            (
                (),
                "Remove stale build locks (`~/.cache/torch_extensions/*/lock`) and build once "
                "before launching all ranks.",
            )
        ],
    },
    "R04": {
        "F1": [
            (
                (),
                "Use a build that supports this platform/GPU (Linux CUDA wheels; a torch built "
                "for this compute capability).",
            )
        ],
        "F5": [((), "Or run on hardware that supports the feature (e.g. FP8 needs sm_89+).")],
    },
    "R05": {
        "F5": [
            (
                (),
                "Lift the container limits: `docker run --shm-size=16g --ipc=host --ulimit "
                "memlock=-1 --ulimit nofile=65535` (Kubernetes: a Memory `emptyDir` at /dev/shm); "
                "check with `df -h /dev/shm` and `ulimit -l`.",
            )
        ],
        "F4": [
            (
                (),
                "If the limits cannot change, keep NCCL off the constrained path: "
                "`NCCL_SHM_DISABLE=1` (shared memory) or `NCCL_P2P_DISABLE=1` (PCIe P2P).",
            )
        ],
    },
    "R06": {
        "F4": [
            (
                (),
                "Check the launch topology: the same `MASTER_ADDR`/`MASTER_PORT` (or "
                "`--rdzv_endpoint`) on all nodes, a free port, `--nnodes`/`--nproc_per_node` "
                "matching the allocation, passwordless ssh for pdsh/MPI launchers.",
            )
        ],
        "F3": [
            (
                ("world_size",),
                "Make the launcher's world size ({world_size}) match the GPUs you were given and "
                "map each local rank to its own GPU.",
            ),
            ((), "Make the launcher flags match the allocation (nodes x GPUs per node)."),
        ],
    },
    "R07": {
        "F4": [
            (
                ("host",),
                "Pin NCCL to the interface the nodes share: `NCCL_SOCKET_IFNAME=<iface>` (and "
                "`GLOO_SOCKET_IFNAME`), `NCCL_IB_HCA=<mlx5_0,...>`; test {host} with "
                "`NCCL_IB_DISABLE=1` and nccl-tests `all_reduce_perf` to isolate IB/RoCE.",
            ),
            (
                (),
                "Pin NCCL to the interface the nodes share: `NCCL_SOCKET_IFNAME=<iface>` (and "
                "`GLOO_SOCKET_IFNAME`), `NCCL_IB_HCA=<mlx5_0,...>`, `NCCL_IB_GID_INDEX=3` on "
                "RoCE; test with `NCCL_IB_DISABLE=1` and nccl-tests `all_reduce_perf`.",
            ),
        ]
    },
    "R08": {
        "F6": [
            (
                ("ranks", "collective"),
                "Make every rank issue the same collectives in the same order: rank {ranks} "
                "took another path at `{collective}`; move collectives out of `if rank == ...:` "
                "branches (saving, logging, evaluation).",
            ),
            (
                (),
                "Make every rank issue the same collectives in the same order: move collectives "
                "out of rank-dependent branches (saving, logging with `sync_dist`, evaluation); "
                "`TORCH_DISTRIBUTED_DEBUG=DETAIL` names the mismatched call.",
            ),
        ],
        "F3": [
            (
                (),
                "Keep per-rank code paths symmetric where they contain collectives: gather "
                "state dicts on all ranks and write on rank 0 only, `self.log(..., "
                "sync_dist=True)` from every rank, `generate(..., synced_gpus=True)` under "
                "ZeRO-3/FSDP.",
            )
        ],
    },
    "R09": {
        "F3": [
            (
                ("ranks",),
                "Give every rank the same amount of work: `DistributedSampler(dataset, "
                "drop_last=True)` + `DataLoader(..., drop_last=True)`, call "
                "`sampler.set_epoch(epoch)`; rank {ranks} ran out of step with the others.",
            ),
            (
                (),
                "Give every rank the same amount of work: `DistributedSampler(dataset, "
                "drop_last=True)` + `DataLoader(..., drop_last=True)` and `sampler.set_epoch("
                "epoch)`, so all ranks run the same number of steps.",
            ),
        ],
        "F6": [
            (
                (),
                "Or use `torch.distributed.algorithms.join.Join` / DDP's `join()` context so "
                "ranks that finish early keep answering the others' collectives.",
            )
        ],
    },
    "R10": {
        "F3": [
            (
                (),
                "Bind each rank to its own GPU before any CUDA work: "
                "`torch.cuda.set_device(int(os.environ['LOCAL_RANK']))` and "
                "`init_process_group(..., device_id=torch.device('cuda', local_rank))`; build "
                "subgroups with `new_group` on every rank in the same order.",
            )
        ]
    },
    "R11": {
        "F4": [
            (
                ("collective", "timeout_ms", "timeout_suggest_min"),
                "Raise the process-group timeout above the {timeout_ms} ms that `{collective}` "
                "waited: `init_process_group(..., "
                "timeout=timedelta(minutes={timeout_suggest_min}))` "
                "(HF `--ddp_timeout`, Accelerate `InitProcessGroupKwargs`); "
                "`TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC` if the watchdog heartbeat fires.",
            ),
            (
                (),
                "Raise the process-group timeout above the slow step: `init_process_group(..., "
                "timeout=timedelta(minutes=60))` (HF `--ddp_timeout 3600`, Accelerate "
                "`InitProcessGroupKwargs(timeout=...)`).",
            ),
        ],
        "F3": [
            (
                (),
                "Take the slow work off the collective path: preprocess/tokenize datasets "
                "offline and load the cache, download checkpoints before `init_process_group`, "
                "save asynchronously.",
            )
        ],
    },
    "R12": {
        "F2": [
            (
                ("world_size",),
                "Pick parallel degrees that divide the job: TP x PP (x CP) must divide the world "
                "size {world_size}, TP the attention heads and hidden size, the global batch "
                "micro batch x DP.",
            ),
            (
                (),
                "Pick parallel degrees that divide the job: TP x PP (x CP) must divide the world "
                "size, TP the attention heads and hidden size, the global batch micro batch x DP.",
            ),
        ]
    },
    "R13": {
        "F2": [
            (
                (),
                "Adjust the distributed feature's configuration (ZeRO stage, offload, "
                "sequence parallelism with TP+MoE, bucket sizes, checkpointing mode) to the "
                "combination the framework supports.",
            )
        ],
        "F3": [
            (
                (),
                "Set the feature's flags consistently: non-reentrant activation checkpointing "
                "with DDP (`use_reentrant=False`), `FullStateDictConfig(offload_to_cpu=True, "
                "rank0_only=True)` for FSDP saves.",
            )
        ],
    },
    "R14": {
        "F3": [
            (
                (),
                "Call the API the way the framework expects: launch through torchrun/deepspeed, "
                "`find_unused_parameters=True` when parts of the model are skipped, inputs cast "
                "to the engine's dtype and device, `torch.load(..., map_location='cpu')`.",
            )
        ]
    },
    "R15": {
        "F1": [((), "Use a framework release that supports this model architecture.")],
        "F6": [((), "Or provide the missing support (an injection policy, a model spec).")],
    },
    "R16": {
        "F5": [
            (
                ("rank",),
                "Lower the per-GPU memory on rank {rank} and the others: smaller micro batch or "
                "sequence length (keep the global batch via gradient accumulation), and "
                "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` against fragmentation.",
            ),
            (
                (),
                "Lower the per-GPU memory: smaller micro batch or sequence length (keep the "
                "global batch via gradient accumulation), and "
                "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` against fragmentation.",
            ),
        ],
        "F2": [
            (
                (),
                "Shard more state: ZeRO-3 / FSDP `FULL_SHARD`, optimizer CPU offload, "
                "activation checkpointing, or a larger tensor-parallel degree.",
            )
        ],
    },
    "R17": {
        "F5": [
            (
                ("host",),
                "Reduce host RAM per node on {host}: fewer DataLoader workers, "
                "`low_cpu_mem_usage=True` / `mmap=True` loads, one rank loading and "
                "broadcasting; or request more memory per node.",
            ),
            (
                (),
                "Reduce host RAM per node: fewer DataLoader workers, `low_cpu_mem_usage=True` / "
                "`torch.load(..., mmap=True)`, one rank loading and broadcasting; or request "
                "more memory per node.",
            ),
        ],
        "F2": [((), "Offload less to CPU (or offload to NVMe) in the ZeRO config.")],
    },
    "R18": {
        "F6": [
            (
                (),
                "Find what keeps growing: log `torch.cuda.memory_allocated()` / host RSS per "
                "step, drop references to losses/outputs (`loss.item()`), and check for a fix "
                "upstream.",
            )
        ],
        "F1": [((), "Upgrade to the framework release that fixes the leak.")],
    },
    "R19": {
        "F6": [
            (
                (),
                "Check how the failing tensor is partitioned (TP/EP/ZeRO shapes); upgrade or "
                "patch the framework's sharding code for this layout.",
            )
        ],
        "F1": [((), "Try the framework release where this partitioning bug is fixed.")],
    },
    "R20": {
        "F3": [
            (
                (),
                "Load with the model definition, flags and parallel layout the checkpoint was "
                "saved with, or convert it first (universal checkpoint, DCP resharding, the "
                "framework's converter).",
            )
        ],
        "F6": [((), "Map renamed keys / strip `module.` prefixes in a conversion script.")],
    },
    "R21": {
        "F2": [
            (
                (),
                "Use bf16 instead of fp16 (Ampere+), or tune loss scaling (`initial_scale_power`, "
                "`hysteresis`, `min_loss_scale`).",
            )
        ],
        "F3": [((), "Lower the learning rate, add warmup and gradient clipping.")],
    },
    "R22": {
        "F6": [
            (
                (),
                "Add the missing synchronization (a barrier after rank 0 writes files others "
                "read, stream syncs around custom comms) or take the upstream fix.",
            )
        ],
        "F1": [((), "Upgrade the library where the race is fixed.")],
    },
    "R23": {
        "F1": [
            (
                (),
                "Use a torch/CUDA/library release where the kernel is fixed, or disable the "
                "fused kernel (e.g. turn off the fused op or flash attention) to confirm.",
            )
        ],
        "F6": [((), "Rerun with `CUDA_LAUNCH_BLOCKING=1` to name the faulting kernel.")],
    },
    "R24": {
        "F2": [
            (
                (),
                "Tune the distributed configuration for throughput: bucket sizes, overlap of "
                "communication, fewer sharding hops (SHARD_GRAD_OP / ZeRO-2 when memory allows).",
            )
        ],
        "F4": [
            ((), "Make sure NCCL uses the fast fabric (`NCCL_DEBUG=INFO`: `Using network IB`).")
        ],
    },
    "R25": {
        "F6": [
            (
                (),
                "This is a framework bug: look for the upstream fix (issue tracker, newer "
                "release) or patch locally.",
            )
        ],
        "F1": [
            (
                (),
                "Move to the framework release where it is fixed (or back to the last release "
                "that worked).",
            )
        ],
    },
    "R26": {
        "F6": [
            (
                ("user_frame",),
                "Fix the training code at {user_frame}: the error is raised by the script, not "
                "the framework.",
            ),
            ((), "Fix the training script: the error comes from user code, not the framework."),
        ],
        "F3": [((), "Check the API usage against the framework's docs for this version.")],
    },
    "R27": {
        "F3": [
            (
                (),
                "Fix the data pipeline: `drop_last=True`, filter empty or corrupt samples, "
                "rerun with `num_workers=0` to see the failing sample.",
            )
        ],
        "F6": [((), "Validate samples before training (lengths, label ranges, NaN).")],
    },
    "R28": {
        "F5": [
            (
                ("host",),
                "Drain {host} (`scontrol update nodename={host} state=drain`), run GPU/fabric "
                "diagnostics (`dcgmi diag -r 3`, `dmesg | grep -i xid`) and resume from the last "
                "checkpoint on healthy nodes.",
            ),
            (
                ("ranks",),
                "Drain the node of rank {ranks}, run GPU/fabric diagnostics (`dcgmi diag -r 3`, "
                "`dmesg | grep -i xid`) and resume from the last checkpoint on healthy nodes.",
            ),
            (
                (),
                "Drain the faulty node, run GPU/fabric diagnostics (`dcgmi diag -r 3`, "
                "`dmesg | grep -i xid`) and resume from the last checkpoint on healthy nodes.",
            ),
        ]
    },
}

# When no likely root cause has a playbook entry for a fix pattern, say what the pattern means.
FIX_FALLBACK: Mapping[str, str] = {
    "F1": "Align versions: one tested torch/CUDA/NCCL/framework set on every node; rebuild ops.",
    "F2": "Change the distributed configuration (ZeRO stage, offload, TP/PP/DP, checkpointing).",
    "F3": "Fix the API call or flag named in the evidence (launcher, DDP/FSDP options, config).",
    "F4": "Fix the communication setup (NCCL_* variables, interface, ports, timeouts, backend).",
    "F5": "Give the job the resources it needs or drain the faulty part (memory, shm, node).",
    "F6": "Change the code that fails (training script or an upstream framework fix).",
}


def recommend(classification: Classification, analysis: Analysis) -> tuple[FixRecommendation, ...]:
    """Fix patterns for this classification, best first, scores in [0, 1]."""
    tax = taxonomy.load()
    evidence = {
        f: _clip(s) for f, s in (classification.fix_scores or {}).items() if f in tax.fix_patterns
    }
    causes = [rc for rc in classification.root_causes if rc.id in tax.root_causes]
    prior, prior_cause = _prior(causes, tax)
    candidates = set(evidence) | set(prior)
    if not candidates:
        return ()
    w = EVIDENCE_WEIGHT if evidence else 0.0
    scores = {f: w * evidence.get(f, 0.0) + (1.0 - w) * prior.get(f, 0.0) for f in candidates}
    order = sorted(candidates, key=lambda f: (-scores[f], -prior.get(f, 0.0), f))
    facts = job_facts(analysis)
    out: list[FixRecommendation] = []
    for f in order:
        if scores[f] < MIN_SCORE and out:
            continue
        cat = tax.fix_patterns[f]
        out.append(
            FixRecommendation(
                id=f,
                slug=cat.slug,
                name=cat.name,
                score=round(_clip(scores[f]), 4),
                actions=_actions(f, classification, causes, facts),
                why=_why(f, evidence.get(f, 0.0), prior_cause.get(f), classification, tax),
            )
        )
    return tuple(out)


def _clip(x: float) -> float:
    return min(max(float(x), 0.0), 1.0)


def _prior(
    causes: Sequence[ScoredLabel], tax: taxonomy.Taxonomy
) -> tuple[dict[str, float], dict[str, tuple[ScoredLabel, int]]]:
    """fix -> prior score from the ranked root causes, and the cause that gave the most."""
    prior: dict[str, float] = {}
    source: dict[str, tuple[ScoredLabel, int]] = {}
    for rc in causes:
        for i, f in enumerate(tax.root_causes[rc.id].fixes):
            value = _clip(rc.score) * PRIOR_DECAY[min(i, len(PRIOR_DECAY) - 1)]
            if value > prior.get(f, 0.0):
                prior[f] = value
                source[f] = (rc, i)
    return prior, source


def job_facts(analysis: Analysis) -> dict[str, Any]:
    """The facts actions may name, from the analysis (ranks, collective, timeout, versions)."""
    facts: dict[str, Any] = {k: v for k, v in (analysis.facts or {}).items() if v not in (None, "")}
    ranks = list(analysis.culprit_ranks)
    hang = analysis.hang
    if hang is not None and hang.detected and hang.lagging_ranks:
        ranks = list(hang.lagging_ranks)
    if not ranks and analysis.first_failure is not None and analysis.first_failure.rank is not None:
        ranks = [analysis.first_failure.rank]
    if ranks:
        facts["ranks"] = ", ".join(str(r) for r in ranks)
        facts.setdefault("rank", ranks[0])
    if hang is not None and hang.collective:
        op = hang.collective.get("op") or hang.collective.get("profiling_name")
        if op:
            facts.setdefault("collective", op)
        if hang.collective.get("timeout_ms"):
            facts.setdefault("timeout_ms", hang.collective["timeout_ms"])
    if "host" not in facts:
        host = facts.get("culprit_host") or (
            analysis.first_failure.host if analysis.first_failure is not None else None
        )
        if host:
            facts["host"] = host
    try:
        minutes = int(facts["timeout_ms"]) // 60000
        # Twice the timeout that fired, at least an hour: setup work is rarely just over it.
        facts["timeout_suggest_min"] = max(60, 2 * minutes)
    except (KeyError, TypeError, ValueError):
        pass
    return facts


def _actions(
    fix: str,
    classification: Classification,
    causes: Sequence[ScoredLabel],
    facts: Mapping[str, Any],
) -> tuple[str, ...]:
    """Rule actions (most specific) first, then the playbook's, without near-repeats."""
    # classify orders them: the rules that back this fix most strongly first
    from_rules = list(dict.fromkeys((classification.actions or {}).get(fix, ())))
    # Playbook advice only from causes that are still plausible next to the best one.
    floor = max(MIN_CAUSE_SCORE, CAUSE_RATIO * (causes[0].score if causes else 0.0))
    from_playbook = [
        render(option, facts)
        for rc in causes[:TOP_CAUSES]
        if rc.score >= floor
        for option in _pick(PLAYBOOK.get(rc.id, {}).get(fix, ()), facts)
    ]
    # Two rule actions, then the playbook (it carries the job's ranks and values), then the rest.
    ordered = from_rules[:2] + from_playbook + from_rules[2:]
    actions: list[str] = []
    for text in ordered:
        if not any(_similar(text, kept) for kept in actions):
            actions.append(text)
    if not actions:
        actions.append(FIX_FALLBACK[fix])
    return tuple(actions[:MAX_ACTIONS])


def _shipped_rules() -> dict[str, rule_engine.Rule]:
    try:
        return {r.id: r for r in rule_engine.load()}
    except Exception:  # noqa: BLE001 - a broken rule file must not stop the recommendations
        return {}


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z_][a-z0-9_]{3,}", text.lower())}


def _similar(a: str, b: str) -> bool:
    """Two actions saying the same thing in other words (most of the shorter one's words)."""
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return a == b
    return len(wa & wb) / min(len(wa), len(wb)) >= 0.6


def _pick(options: Sequence[Option], facts: Mapping[str, Any]) -> list[str]:
    for needs, template in options:
        if all(facts.get(k) not in (None, "", []) for k in needs):
            return [template]
    return []


def _why(
    fix: str,
    evidence: float,
    cause: tuple[ScoredLabel, int] | None,
    classification: Classification,
    tax: taxonomy.Taxonomy,
) -> str:
    parts: list[str] = []
    if evidence > 0:
        quote = _evidence_for(fix, classification)
        if quote is not None:
            text = " ".join(quote.text.split())
            text = text if len(text) <= 90 else text[:87] + "..."
            title = _shipped_rules()[quote.why].title
            first = title.split(" ", 1)[0]
            if not (len(first) > 1 and first.isupper()):  # "NCCL cannot ..." keeps its capitals
                title = title[:1].lower() + title[1:]
            parts.append(f"{title} (“{text}”)")
    if cause is not None:
        rc, i = cause
        place = "the usual fix" if i == 0 else "a common fix"
        parts.append(f"{place} for root cause {rc.id} {rc.name} ({rc.score:.0%})")
    if not parts:
        parts.append(f"similar failures were resolved by: {tax.fix_patterns[fix].name}")
    return "; ".join(parts)


def _evidence_for(fix: str, classification: Classification) -> Evidence | None:
    """The quoted line of the rule that backs this fix most (None when no rule backs it)."""
    index = _shipped_rules()
    best: tuple[float, Evidence] | None = None
    for ev in classification.evidence:
        rule = index.get(ev.why)
        weight = rule.fix.get(fix, 0.0) if rule is not None else 0.0
        if weight > 0 and (best is None or weight > best[0]):
            best = (weight, ev)
    return best[1] if best is not None else None
