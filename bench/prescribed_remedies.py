"""How often a library's message prescribes its own remedy, and whether the thread agrees.

    python bench/prescribed_remedies.py

Two counts:

- the message atlas (`models/atlas/`): templates whose literal text names a remedy (the
  phrases below: "please use ...", "try setting ...", "set NCCL_...=", "pass ...=True"), per
  library. A rough census of how common such messages are; the tool does not read it.
- the reference pastes (the `use: reference` corpus files, read as `triage explain` reads a
  paste): how many carry a remedy a rule's `remedy` recognises (`standing.prescribed`), and how
  often the case's fix label (`fix` or a `fix_alt`) is the remedy's fix. Each rule's own
  tally is printed so a remedy the threads disagree with can be found.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from triage.analysis import correlate  # noqa: E402
from triage.classify import prepare  # noqa: E402
from triage.classify.standing import prescribed  # noqa: E402
from triage.knowledge import corpus, shipped  # noqa: E402
from triage.train import references  # noqa: E402

# What a message says when it names its remedy (a census of the atlas, not knowledge the tool
# reads: the tool recognises remedies by the rules' `remedy` field).
REMEDY_PHRASES = re.compile(
    r"(?i)\b(?:"
    r"try (?:setting|to set|using|passing|increasing|reducing|lowering|disabling|enabling|"
    r"upgrading|installing|adding)"
    r"|please (?:use|set|pass|install|upgrade|update|increase|reduce|call|specify|rebuild|"
    r"reinstall|enable|disable|add|remove)"
    r"|you (?:can|may|should|need to|must|might want to) (?:set|use|pass|install|upgrade|"
    r"increase|reduce|enable|disable|call|add|try)"
    r"|consider (?:setting|using|increasing|reducing|passing|upgrading)"
    r"|(?:set|export) (?:the )?(?:environment variable )?`?[A-Z][A-Z0-9_]{3,}`?(?:=| to)"
    r"|\w+=(?:True|False)\b to"
    r")"
)


def atlas_census() -> tuple[int, int, Counter[str]]:
    atlas = shipped().atlas
    per_lib: Counter[str] = Counter()
    total = 0
    for i in range(len(atlas)):
        t = atlas.template(i)
        total += 1
        if REMEDY_PHRASES.search(" ".join(t.parts)):
            per_lib[t.lib] += 1
    return total, sum(per_lib.values()), per_lib


def main() -> int:
    total, named, per_lib = atlas_census()
    print(f"atlas: {named} of {total} templates name a remedy ({named / total:.1%})")
    for lib, n in per_lib.most_common():
        print(f"  {lib:16s} {n}")
    rows = [row for path in corpus.reference_files() for row in corpus.read_cases(path)]
    carried = agreed = 0
    per_rule: Counter[tuple[str, bool]] = Counter()
    for row in rows:
        parsed = references.paste_evidence(row["evidence"])
        prep = prepare(parsed, correlate(parsed))
        told = [h for h in prep.hits if not (h.from_cascade or h.atlas or h.generic)]
        remedy = prescribed(told)
        if not remedy:
            continue
        fix = next(iter(remedy))
        ok = fix in {row["fix"], *row.get("fix_alt", [])}
        carried += 1
        agreed += ok
        for h in told:
            if h.prescribes == fix:
                per_rule[(h.rule_id, ok)] += 1
    print(
        f"\nreference pastes: {carried} of {len(rows)} carry a remedy a rule recognises; "
        f"the thread's fix is that remedy's on {agreed} ({agreed / max(carried, 1):.0%})"
    )
    for rule_id in sorted({r for r, _ in per_rule}):
        yes, no = per_rule[(rule_id, True)], per_rule[(rule_id, False)]
        print(f"  {rule_id:40s} agree {yes}, not {no}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
