"""A wheel installed outside the repository is the same tool as the editable install: the
knowledge (rules/, models/) ships inside it, and it answers exactly the same."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUNDLES = ["import_error_on_one_node", "oom_killed_rank_image_cache", "raise_mid_step"]
PASTES = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB "
    "total capacity; 77.20 GiB already allocated; 1.02 GiB free)",
    "node08:27106:27302 [0] include/shm.h:48 NCCL WARN Error while creating shared memory "
    "segment nccl-shm-recv-b79-0-3-0 (size 4460544)",
    "it doesn't work, training stopped",
]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
    env.pop("PYTHONPATH", None)
    env["HF_HUB_OFFLINE"] = "1"
    return {**env, **extra}


def _triage(args: list[str], cwd: Path, env: dict[str, str], stdin: str = "") -> str:
    done = subprocess.run(
        [sys.executable, "-m", "triage", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _answers(cwd: Path, env: dict[str, str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in BUNDLES:
        bundle = REPO / "corpus_samples" / name / "bundle"
        out[name] = json.loads(_triage([str(bundle), "--format", "json", "-q"], cwd, env))
    lines = "".join(json.dumps({"id": n, "text": t}) + "\n" for n, t in enumerate(PASTES))
    for line in _triage(["explain", "--jsonl"], cwd, env, lines).splitlines():
        row = json.loads(line)
        out[f"paste {row['id']}"] = row["diagnosis"]
    return out


@pytest.mark.slow
def test_a_wheel_installed_outside_the_repo_answers_as_the_editable_install(tmp_path: Path) -> None:
    # built from a copy of the sources: a `build/` left in the checkout could add stale files
    source = tmp_path / "source"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".*", "build", "dist", "*.egg-info", "__pycache__", "corpus_samples", "tests", "bench"
        ),
    )
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(dist), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("triage-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in (
        "triage/rules/playbook.yaml",
        "triage/rules/templates.yaml",
        "triage/models/index.npz",
        "triage/models/calibration.json",
        "triage/models/static-embedding.npz",  # the default similarity model
        "triage/models/static-tokenizer.json",
        "triage/models/corpus/manifest.yaml",
        "triage/models/corpus/dev.jsonl",
        "triage/taxonomy.yaml",
    ):
        assert shipped in names, shipped
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
        + [str(wheel)],
        check=True,
        capture_output=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    wheel_env = _env(PYTHONPATH=str(site))
    where = subprocess.run(
        [sys.executable, "-c", "import triage.rules, triage.models; print(triage.rules.__file__)"],
        cwd=elsewhere,
        env=wheel_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(site)), where  # the wheel's files, not the repository's
    listed = _triage(["rules", "list"], elsewhere, wheel_env).splitlines()
    from triage import knowledge

    assert len(listed) == len(knowledge.load().rules)
    wheel = _answers(elsewhere, wheel_env)
    editable = _answers(elsewhere, _env())
    assert wheel == editable
    assert wheel["paste 0"]["symptoms"][0]["id"] == "S14"  # type: ignore[index]
