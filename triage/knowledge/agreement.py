"""The settings every rank of one job must agree on (`kind: agreement`).

    kind: agreement
    versions: [torch, cuda, nccl, ...]     # an environment report's version facts
    env:
      prefixes: [NCCL_, TORCH_NCCL_]       # variables compared across ranks by prefix ...
      names: [MASTER_ADDR, WORLD_SIZE]     # ... or by name
      per_rank: [NCCL_DEBUG_FILE]          # differ per rank by design: never compared
      examples: {compared: [...], not_compared: [...]}

The consistency analysis reads it; the examples are checked against the lists at load.
Shipped only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KIND = "agreement"
_KEYS = {"kind", "versions", "env"}
_ENV_KEYS = {"prefixes", "names", "per_rank", "examples"}


@dataclass(frozen=True)
class AgreedSettings:
    versions: tuple[str, ...] = ()
    env_prefixes: tuple[str, ...] = ()
    env_names: frozenset[str] = frozenset()
    per_rank_env: frozenset[str] = frozenset()

    def compares_env(self, name: str) -> bool:
        """Whether every rank must hold the same value of this environment variable."""
        if name in self.per_rank_env:
            return False
        return name in self.env_names or name.startswith(self.env_prefixes)


def _names(value: Any, where: str, report: Callable[[str, str], None]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        report(where, "needs a list of names")
        return ()
    return tuple(value)


def build(
    body: Mapping[str, Any], report: Callable[[str, str], None], team: bool
) -> AgreedSettings:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS - {'kind'})}")
    env = body.get("env")
    if not isinstance(env, dict):
        report("env", "needs `prefixes`, `names`, `per_rank` and `examples`")
        env = {}
    if set(env) - _ENV_KEYS:
        report("env", f"unknown key(s) {sorted(set(env) - _ENV_KEYS)}")
    settings = AgreedSettings(
        versions=_names(body.get("versions"), "versions", report),
        env_prefixes=_names(env.get("prefixes"), "env.prefixes", report),
        env_names=frozenset(_names(env.get("names"), "env.names", report)),
        per_rank_env=frozenset(_names(env.get("per_rank"), "env.per_rank", report)),
    )
    examples = env.get("examples")
    if not isinstance(examples, dict) or not examples.get("compared"):
        report("env.examples", "needs `compared` (and `not_compared`) variable names")
        return settings
    for name in _names(examples.get("compared"), "env.examples.compared", report):
        if not settings.compares_env(name):
            report("env.examples", f"{name} should be compared across ranks and is not")
    for name in _names(examples.get("not_compared", []), "env.examples.not_compared", report):
        if settings.compares_env(name):
            report("env.examples", f"{name} should not be compared across ranks and is")
    return settings


def merge(values: Sequence[AgreedSettings]) -> AgreedSettings:
    return values[0] if values else AgreedSettings()
