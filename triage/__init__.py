"""triage: diagnose crashed or hung distributed training jobs."""

__version__ = "0.1.0"
