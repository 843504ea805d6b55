"""triage: diagnose crashed or hung distributed training jobs."""

from triage import method_cache

__version__ = "0.1.0"

# before any record class is defined: their generated methods compile from the disk cache
method_cache.install()
