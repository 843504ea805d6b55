"""How a launcher states a job's shape, and how a rendezvous says it waited for nodes
(`kind: topology`).

    kind: topology
    argv:                     # each with a named group `n`, and holding `--n` (the scan's gate)
      nnodes: '--nnodes[= ](?:(?P<lo>\\d+):)?(?P<n>\\d+)\\b'
      nproc_per_node: '--nproc[-_]per[-_]node[= ](?P<n>\\d+)\\b'
      node_rank: '--node[-_]rank[= ](?P<n>\\d+)\\b'
    rendezvous_wait:
      pattern: 'waiting for clients|RendezvousTimeoutError|...'
      joined: '(?P<k>\\d+)/(?P<m>\\d+) clients joined'   # agents joined of those expected
      examples: {match: [...], no_match: [...]}

Read by `triage.analysis.launcher`: the ranks of nodes that never joined a rendezvous that
timed out are the culprits, though they left no log. Shipped only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from triage.knowledge.problems import check_examples, compile_regex

KIND = "topology"
ARGV = ("nnodes", "nproc_per_node", "node_rank")
_KEYS = {"kind", "argv", "rendezvous_wait"}


@dataclass(frozen=True, eq=False)  # hashed by identity: one per load
class Topology:
    argv: Mapping[str, regex.Pattern[str]]
    waiting: regex.Pattern[str] | None = None
    joined: regex.Pattern[str] | None = None


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> Topology:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS - {'kind'})}")
    argv: dict[str, regex.Pattern[str]] = {}
    raw = body.get("argv") or {}
    if not isinstance(raw, dict) or set(raw) != set(ARGV):
        report("argv", f"needs exactly {list(ARGV)}")
        raw = {}
    for key, text in raw.items():
        pattern = compile_regex(text, f"argv {key}", report)
        if pattern is None:
            continue
        if "n" not in pattern.groupindex or "--n" not in str(text):
            report(f"argv {key}", "needs a group (?P<n>...) and the literal `--n`")
            continue
        argv[key] = pattern
    wait = body.get("rendezvous_wait")
    if not isinstance(wait, dict):
        report("rendezvous_wait", "needs pattern, joined and examples")
        return Topology(argv)
    waiting = compile_regex(wait.get("pattern"), "rendezvous_wait pattern", report, regex.I)
    joined = compile_regex(wait.get("joined"), "rendezvous_wait joined", report)
    if joined is not None and not {"k", "m"} <= set(joined.groupindex):
        report("rendezvous_wait joined", "needs groups (?P<k>...) and (?P<m>...)")
        joined = None
    if waiting is not None:  # a bad pattern is reported already
        check_examples(waiting, wait.get("examples"), "rendezvous_wait", report)
    return Topology(argv, waiting, joined)


def merge(values: Sequence[Topology]) -> Topology:
    return values[0] if values else Topology({})
