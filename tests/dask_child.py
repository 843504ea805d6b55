"""Runs `triage batch` on a real Dask LocalCluster in a process of its own, for the tests.

Dask leaves a thread running in the process that used a cluster, and triage then (rightly)
never forks a parse pool in that process: the cluster runs here, not in pytest's process.

    python tests/dask_child.py '{"jobs": [...], "workers": 2, "allowed_failures": 0,
                                 "unit": "dies_on_the_oom_job"}'   -> one JSON row per line
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    import dask
    from distributed import LocalCluster

    from triage.batch import diagnose_job, run_batch
    from triage.pipeline import Options

    args = json.loads(sys.argv[1])
    unit = diagnose_job
    if args.get("unit"):
        import test_batch_resilience

        unit = getattr(test_batch_resilience, args["unit"])
    config = {}
    if args.get("allowed_failures") is not None:
        config["distributed.scheduler.allowed-failures"] = args["allowed_failures"]
    with (
        dask.config.set(config),
        LocalCluster(
            n_workers=args["workers"],
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            worker_dashboard_address=None,
        ) as cluster,
    ):
        out = io.StringIO()
        run_batch(
            args["jobs"],
            out,
            Options(use_embeddings=False),
            dask=cluster.scheduler_address,
            unit=unit,
        )
    sys.stdout.write(out.getvalue())


if __name__ == "__main__":
    main()
