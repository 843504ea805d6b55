"""The label contract: the shipped taxonomy is the shared one, ids and full names intact."""

from __future__ import annotations

from pathlib import Path

import pytest
import regex

from triage import taxonomy

PACKAGED = Path(taxonomy.__file__).with_name("taxonomy.yaml")
SHARED = Path(__file__).resolve().parents[2] / "shared" / "taxonomy.yaml"


def test_counts_match_the_paper() -> None:
    tax = taxonomy.load()
    assert (len(tax.symptoms), len(tax.root_causes), len(tax.fix_patterns)) == (34, 28, 6)
    assert len(tax.stages) == 6


def test_names_with_commas_are_whole() -> None:
    """Users read these names in every report; a YAML comma must not cut them short."""
    tax = taxonomy.load()
    for line in PACKAGED.read_text(encoding="utf-8").splitlines():
        m = regex.search(
            r"\{id: (?P<id>[SRF]\d+|ST\d), .*name: (?P<name>.*?)(?:,\s*$|\}\s*$|,\s*desc:)", line
        )
        if m:
            assert tax.get(m["id"]).name == m["name"].strip(), m["id"]
    assert tax.get("R05").name == "Container or OS limits (shm, memlock, IPC, P2P)"


def test_root_causes_point_at_real_fix_patterns() -> None:
    tax = taxonomy.load()
    for cause in tax.root_causes.values():
        assert cause.fixes and set(cause.fixes) <= set(tax.fix_patterns), cause.id
    for symptom in tax.symptoms.values():
        assert symptom.stage in tax.stages, symptom.id


@pytest.mark.skipif(not SHARED.exists(), reason="no shared/ checkout beside this one")
def test_packaged_copy_is_the_shared_contract() -> None:
    assert PACKAGED.read_bytes() == SHARED.read_bytes()


def test_disambiguation_notes_cover_the_pairs_people_confuse() -> None:
    """Labellers and rule authors read these; each pair the issue names has both sides."""
    pairs = {(note.id, other) for note in taxonomy.notes() for other in note.versus}
    for a, b in (("S29", "S30"), ("S09", "S18"), ("S12", "S17"), ("R01", "R02"), ("R08", "R11")):
        assert (a, b) in pairs and (b, a) in pairs, (a, b)
    assert all(note.use and note.avoid for note in taxonomy.notes())
