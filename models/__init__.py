"""Package data, not code: the fitted and gathered knowledge (`triage.models` once installed).

Read through `triage.knowledge` and `triage.classify`; this file only makes the folder an
importable resource package, so importlib.resources finds it in an editable install as in a
wheel.
"""
