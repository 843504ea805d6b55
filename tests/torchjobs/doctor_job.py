"""A training script that checks its job before training: `triage.doctor.check()` right after
init_process_group, and stops with the doctor's exit code when a rank's setup is wrong."""

from __future__ import annotations

import datetime
import sys

import torch.distributed as dist

import triage.doctor


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    report = triage.doctor.check(timeout=20, fmt="json", file=sys.stdout)
    if report.exit_code:
        sys.exit(report.exit_code)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
