"""Packaging beyond pyproject.toml: the knowledge folders ship inside the package.

`rules/` and `models/` stay at the top of the repository (where people edit them) and are
mapped into the package as the data packages `triage.rules` and `triage.models`, so an
editable install and a wheel installed anywhere read the same files through
importlib.resources. pyproject.toml cannot list packages found by `find` next to mapped ones.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["triage", "triage.*"]), "triage.rules", "triage.models"],
    package_dir={"triage.rules": "rules", "triage.models": "models"},
)
