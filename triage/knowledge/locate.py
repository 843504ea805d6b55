"""Where the knowledge is: the package data `triage.rules` and `triage.models`.

The top-level `rules/` and `models/` folders of the repository are mapped into the package at
build time (setup.py `package_dir`), so an editable install and a wheel installed anywhere
read the same files through importlib.resources. Nothing here guesses a path next to the
source tree: a folder that is not there is an error, never an empty knowledge base.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

RULES_ENV = "TRIAGE_RULES_DIR"  # replaces the shipped rules/ folder (a developer's copy)
MODELS_ENV = "TRIAGE_MODELS_DIR"  # replaces the shipped models/ folder


class MissingKnowledge(FileNotFoundError):
    """A shipped knowledge folder is not installed: the install is broken."""


def package_dir(package: str) -> Path:
    """The folder of a data package (`triage.rules`, `triage.models`) on disk."""
    try:
        root = resources.files(package)
    except ModuleNotFoundError as exc:
        raise MissingKnowledge(
            f"{package} is not installed: reinstall triage (its rules/ and models/ ship inside it)"
        ) from exc
    path = Path(str(root))
    if not path.is_dir():  # a zipped install: the knowledge must be files on disk
        raise MissingKnowledge(f"{package} is not a folder on disk ({root}); install unzipped")
    return path


def rules_dir() -> Path:
    """The hand-written knowledge: `$TRIAGE_RULES_DIR`, else the shipped `triage.rules`."""
    env = os.environ.get(RULES_ENV)
    return Path(env) if env else package_dir("triage.rules")


def models_dir() -> Path:
    """The fitted and gathered knowledge: `$TRIAGE_MODELS_DIR`, else the shipped `triage.models`."""
    env = os.environ.get(MODELS_ENV)
    return Path(env) if env else package_dir("triage.models")
