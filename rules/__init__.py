"""Package data, not code: the hand-written knowledge (`triage.rules` once installed).

Read through `triage.knowledge`; this file only makes the folder an importable resource
package, so importlib.resources finds it in an editable install as in a wheel.
"""
