"""How much of the reference pastes the message atlas names, and how often its labels agree.

    python bench/atlas_coverage.py [--files dev.jsonl mined.jsonl ...] [--lib torch-csrc]

Reads only the reference cases (`use: reference` in models/corpus/manifest.yaml; never a
held-out file). Each paste's evidence is matched against the shipped atlas as one pasted
event (`classify.atlas.find`: per line, the most specific template), and the script prints:

- how many pastes hold a line that instantiates a template, and a labelled one (per library);
- per label rule (and `reviewed`): how many pastes its templates' labels were used in, and how
  often the template's symptom and root cause are the case's (its label or one of its
  `*_alt`): the label rules' precision on real pastes, the check a new rule must pass.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from triage import knowledge  # noqa: E402
from triage.classify import atlas as matching  # noqa: E402
from triage.knowledge import corpus  # noqa: E402
from triage.model import Event, EventKind  # noqa: E402


def cases(names: list[str]) -> list[dict]:
    out = []
    for path in corpus.reference_files():
        if names and path.name not in names:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(json.loads(line))
    return out


def right(case: dict, field: str, label: str) -> bool:
    return label == case[field] or label in (case.get(f"{field}_alt") or [])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", nargs="*", default=[], help="reference files (default: all)")
    ap.add_argument("--lib", help="also list the pastes a library's templates name")
    args = ap.parse_args()
    book = knowledge.load().atlas
    todo = cases(args.files)
    any_hit = labelled_hit = 0
    per_lib: Counter[str] = Counter()
    per_lib_labelled: Counter[str] = Counter()
    used: Counter[str] = Counter()
    agree: dict[str, Counter[str]] = defaultdict(Counter)
    shown: list[str] = []
    for case in todo:
        event = Event(source="<pasted>", kind=EventKind.TRACEBACK, text=case["evidence"], line=1)
        found = matching.find(book, [event])
        if not found:
            continue
        any_hit += 1
        libs = {m.template.lib for m in found}
        per_lib.update(libs)
        labelled = [m for m in found if matching.hits([m])]
        if labelled:
            labelled_hit += 1
            per_lib_labelled.update({m.template.lib for m in labelled})
        if args.lib and args.lib in libs:
            names = sorted({m.template.function or m.template.file for m in found})
            shown.append(f"  {case['id']} {case['symptom']}/{case['root_cause']}: {names}")
        seen: set[str] = set()
        for m in labelled:
            t = m.template
            if t.id in seen:
                continue
            seen.add(t.id)
            rule = t.labelled_by
            used[rule] += 1
            for field in ("symptom", "root_cause"):
                label = t.labels.get(field)
                if label:
                    agree[rule][f"{field}_n"] += 1
                    agree[rule][field] += right(case, field, label)
    n = len(todo)
    print(f"reference pastes: {n}")
    print(f"  a template matched: {any_hit} ({any_hit / n:.1%})")
    print(f"  a labelled template matched: {labelled_hit} ({labelled_hit / n:.1%})")
    for lib, count in per_lib.most_common():
        print(f"    {lib:20s} {count:4d} matched, {per_lib_labelled[lib]:4d} labelled")
    print("label rule precision on the pastes its templates matched (symptom, root cause):")
    for rule, count in used.most_common():
        a = agree[rule]
        sym = f"{a['symptom']}/{a['symptom_n']}" if a["symptom_n"] else "-"
        rc = f"{a['root_cause']}/{a['root_cause_n']}" if a["root_cause_n"] else "-"
        print(f"  {rule:24s} {count:4d} pastes  symptom {sym:>8s}  root cause {rc:>8s}")
    if shown:
        print(f"pastes naming {args.lib}:")
        print("\n".join(shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
