"""`triage doctor`: local checks, the knowledge files, and real torchrun jobs whose ranks differ.

The torchrun stories start 3 real ranks (gloo on CPU) where one rank's environment differs: an
NCCL variable, a framework version (a fake `deepspeed` distribution on that rank's PYTHONPATH),
an interface that does not exist, a GPU two ranks would share, a rank that never answers.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from torchjobs import JOBS, free_port, job_env, torchrun_argv

from triage.doctor import checks, knowledge
from triage.doctor.checks import interface_problem, run_checks, value_problem
from triage.doctor.knowledge import EnvSpec, KnowledgeError, matches

K = knowledge.load()


def _facts(**over: Any) -> dict[str, Any]:
    """Facts as facts.collect() makes them, for a plain CPU node, with `over` replaced."""
    base: dict[str, Any] = {
        "hostname": "node01",
        "machine": "m1",
        "rank": 0,
        "local_rank": 0,
        "world_size": 1,
        "local_world_size": 1,
        "versions": {"python": "3.11.7", "torch": "2.13.0+cpu"},
        "packages": {"torch": "2.13.0+cpu"},
        "env": {},
        "interfaces": ["eth0", "lo"],
        "infiniband": False,
        "shm_size": 16 * 2**30,
        "shm_free": 16 * 2**30,
        "memlock": "unlimited",
        "mem_total": 64 * 2**30,
        "mem_available": 60 * 2**30,
        "broken_requirements": [],
        "probe_problems": [],
    }
    base.update(over)
    return base


def _checks(facts: dict[str, Any]) -> dict[str, list[checks.PreflightFinding]]:
    found: dict[str, list[checks.PreflightFinding]] = {}
    for f in run_checks(facts, K):
        found.setdefault(f.check, []).append(f)
    return found


# --------------------------------------------------------------------------- knowledge


def test_shipped_knowledge_loads_and_every_row_cites_a_source() -> None:
    assert K.releases and K.known_bad and K.driver_minimum
    for row in K.releases:
        assert any(s.startswith("https://") for s in row.sources), row.torch
    for row in K.known_bad:
        assert row.source and row.root_cause.startswith("R") and row.fix.startswith("F")
    assert "NCCL_SOCKET_IFNAME" in K.known_vars and "TORCH_NCCL_BLOCKING_WAIT" in K.known_vars


def test_the_validator_reports_every_problem_with_file_and_item(tmp_path: Path) -> None:
    compat = yaml.safe_load((knowledge.knowledge_dir() / "compat.yaml").read_text())
    env = yaml.safe_load((knowledge.knowledge_dir() / "env_vars.yaml").read_text())
    compat["torch_releases"][0]["sources"] = []
    compat["torch_releases"].append(dict(compat["torch_releases"][1]))  # a duplicate row
    compat["known_bad"][0]["root_cause"] = "R99"
    compat["known_bad"][1]["when"] = {"nccl": "about 2.27", "colour": "red"}
    compat["known_bad"][2]["severity"] = "fatal"
    env["checked"]["NCCL_DEBUG"] = {"kind": "enum"}
    env["deprecated"]["NCCL_OLD_THING"] = {"use": "NCCL_NOT_A_VARIABLE", "source": "x"}
    (tmp_path / "compat.yaml").write_text(yaml.safe_dump(compat))
    (tmp_path / "env_vars.yaml").write_text(yaml.safe_dump(env))
    with pytest.raises(KnowledgeError) as err:
        knowledge.load(tmp_path)
    problems = "\n".join(err.value.problems)
    assert "compat.yaml: torch_releases[0] (torch 2.14): sources must list at least one URL" in (
        problems
    )
    assert "torch 2.13 is listed twice" in problems
    assert "known_bad[0] (nccl-2.29.2-hang): root_cause 'R99' is not a taxonomy id" in problems
    assert (
        "known_bad[1] (nccl-before-2.26.2-abort-hang): when.nccl: `about 2.27` is not a version"
        in problems
    )
    assert (
        "known_bad[1] (nccl-before-2.26.2-abort-hang): when: unknown condition 'colour'" in problems
    )
    assert "known_bad[2]" in problems and "severity must be one of" in problems
    assert "env_vars.yaml: checked.NCCL_DEBUG: kind must be one of" in problems
    assert "deprecated.NCCL_OLD_THING: replacement 'NCCL_NOT_A_VARIABLE'" in problems
    assert len(err.value.problems) >= 8  # all of them in one run, not the first only


def test_a_missing_or_broken_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "compat.yaml").write_text("torch_releases: [unclosed\n")
    with pytest.raises(KnowledgeError) as err:
        knowledge.load(tmp_path)
    text = str(err.value)
    assert "compat.yaml: not valid YAML" in text and "env_vars.yaml: cannot read" in text


def test_version_conditions() -> None:
    assert matches(">=2.25,<2.26.2", "2.25.1")
    assert not matches(">=2.25,<2.26.2", "2.26.2")
    assert matches("==2.20.*", "2.20.5") and not matches("==2.20.*", "2.21.5")
    assert matches("==2.7.0", "2.7.0+cu126")
    assert matches("<2.17.1", "2.14.3") and not matches("<2.17.1", "2.18.1")


# --------------------------------------------------------------------------- local checks


def test_nccl_not_the_one_torch_ships_is_named_with_the_exact_pin() -> None:
    facts = _facts(
        versions={"torch": "2.14.1+cu130", "cuda": "13.0", "nccl": "2.29.7"},
        packages={"torch": "2.14.1+cu130", "nvidia-nccl-cu13": "2.29.7"},
    )
    (f,) = _checks(facts)["nccl-not-bundled"]
    assert f.severity == "warning" and (f.root_cause, f.fix_pattern) == ("R01", "F1")
    assert "pip install nvidia-nccl-cu13==2.30.7" in f.action


def test_a_driver_too_old_for_torchs_cuda_is_an_error() -> None:
    facts = _facts(versions={"torch": "2.14.1+cu130", "cuda": "13.0", "driver": "570.133.20"})
    (f,) = _checks(facts)["driver-too-old"]
    assert f.severity == "error" and ">= 580" in f.title


def test_known_bad_nccl_and_cpu_build_on_a_gpu_node() -> None:
    bad = _facts(versions={"torch": "2.11.0+cu126", "cuda": "12.6", "nccl": "2.29.2"})
    assert _checks(bad)["known-bad:nccl-2.29.2-hang"][0].severity == "error"
    gpus = [{"index": "0", "uuid": "GPU-1", "name": "NVIDIA H100", "memory_total_mib": 80000,
             "memory_free_mib": 79000}]  # fmt: skip
    cpu = _facts(gpus=gpus)
    assert _checks(cpu)["torch-cpu-build"][0].severity == "error"


def test_ranks_per_node_against_visible_gpus() -> None:
    gpus = [
        {"index": str(i), "uuid": f"GPU-{i}", "name": "A100", "memory_total_mib": 81920,
         "memory_free_mib": 81000 if i else 1000}
        for i in range(2)
    ]  # fmt: skip
    facts = _facts(gpus=gpus, local_world_size=4, env={"CUDA_VISIBLE_DEVICES": "0,1,1"})
    found = _checks(facts)
    # `0,1,1` is two GPUs, one of them listed twice
    assert (
        "4 ranks per node but only 2 visible GPU(s) (listed 3 times)"
        in found["gpus-per-node"][0].title
    )
    assert any("more than once" in f.title for f in found["cuda-visible-devices"])
    assert found["gpu-memory-free"][0].title.startswith("GPU 0 has only 1000 MiB")


def test_small_shm_and_memlock_with_infiniband() -> None:
    found = _checks(_facts(shm_size=64 * 2**20, memlock=64 * 2**10, infiniband=True))
    assert found["shm-size"][0].severity == "error"
    assert found["shm-size"][0].root_cause == "R05"
    assert found["memlock"][0].severity == "error"


def test_nccl_variables_misspelled_deprecated_out_of_range_and_contradictory() -> None:
    env = {
        "NCCL_SOCKET_IFNAMES": "eth0",
        "NCCL_ASYNC_ERROR_HANDLING": "1",
        "NCCL_DEBUG": "VERBOSE",
        "NCCL_P2P_DISABLE": "1",
        "NCCL_P2P_LEVEL": "NVL",
        "NCCL_MADE_UP_KNOB": "1",
    }
    found = _checks(_facts(env=env))
    assert "did you mean NCCL_SOCKET_IFNAME?" in found["env-misspelled"][0].title
    assert "use TORCH_NCCL_ASYNC_ERROR_HANDLING" in found["env-deprecated"][0].title
    assert found["env-value"][0].title.startswith("NCCL_DEBUG=VERBOSE: not one of")
    assert found["env-contradiction:p2p-disable-and-level"]
    assert found["env-unknown"][0].severity == "info"


def test_interface_lists_follow_nccls_syntax() -> None:
    nccl, gloo = EnvSpec("NCCL_SOCKET_IFNAME", "interfaces"), EnvSpec("G", "interfaces", exact=True)
    present = ["eth0", "ib0", "lo"]
    assert interface_problem(nccl, "eth", present) is None  # a prefix
    assert interface_problem(nccl, "=eth0", present) is None
    assert interface_problem(nccl, "=eth", present) == "matches no interface"
    assert interface_problem(nccl, "bond,ib", present) is None
    assert interface_problem(nccl, "^docker", present) is None
    assert interface_problem(gloo, "eth0,eth1", present) == "no interface named eth1"
    assert value_problem(K.checked["NCCL_PROTO"], "^LL128") is None
    assert value_problem(K.checked["NCCL_ALGO"], "allreduce:tree,ring;broadcast:ring") is None


# --------------------------------------------------------------------------- real processes


def _doctor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "triage", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_local_doctor_finds_a_missing_interface_a_port_in_use_and_an_unknown_host() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = job_env(
            {
                "NCCL_SOCKET_IFNAME": "=nosuchnic0",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "GLOO_SOCKET_IFNAME": "lo",
            }
        )
        done = _doctor("--format", "json", env=env)
    assert done.returncode == 3, done.stderr
    report = json.loads(done.stdout)
    assert report["schema"] == "triage.doctor/1"
    by_check = {f["check"]: f for f in report["findings"]}
    ifname = by_check["socket-ifname"]
    assert "NCCL_SOCKET_IFNAME==nosuchnic0 matches no interface" in ifname["title"]
    assert ifname["root_cause"]["id"] == "R07" and ifname["fix_pattern"]["id"] == "F4"
    port_finding = by_check["master-port"]
    assert f"MASTER_PORT {port} is already in use by pid {os.getpid()}" in port_finding["title"]
    assert port_finding["severity"] == "error"

    unknown = _doctor(env=job_env({"MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": "1"}))
    assert unknown.returncode == 3
    assert "MASTER_ADDR=no-such-host.invalid does not resolve" in unknown.stdout
    assert "Traceback" not in unknown.stderr


def _fake_dist(site: Path, name: str, version: str) -> None:
    """A package that claims another version, as an older install on one node would."""
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text(f'__version__ = "{version}"\n')
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_doctor_under_torchrun_names_the_rank_whose_environment_differs(tmp_path: Path) -> None:
    site = tmp_path / "node02-site"
    _fake_dist(site, "deepspeed", "0.14.0")
    wrapper = tmp_path / "rank_env.sh"
    # one launcher, three ranks; the wrapper gives rank 2 its own node's environment, and
    # points rank 1 at the GPU rank 0 uses
    wrapper.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            export CUDA_VISIBLE_DEVICES=0,1,2
            if [ "$RANK" = 2 ]; then
              export NCCL_PROTO=LL PYTHONPATH={site}:$PYTHONPATH
            fi
            if [ "$RANK" = 1 ]; then export CUDA_VISIBLE_DEVICES=1,0,2; fi
            exec {sys.executable} -m triage doctor --distributed --format json --timeout 20
            """
        )
    )
    wrapper.chmod(0o755)
    done = subprocess.run(
        torchrun_argv(3, free_port(), str(wrapper), no_python=True),
        capture_output=True,
        text=True,
        timeout=120,
        env=job_env(),
    )
    assert done.returncode != 0  # every rank exits 3: torchrun reports the failure
    assert "exitcode  : 3" in done.stderr
    report = json.loads(done.stdout)  # only rank 0 prints
    assert report["ranks_answered"] == [0, 1, 2]
    by_check: dict[str, list[dict[str, Any]]] = {}
    for f in report["findings"]:
        by_check.setdefault(f["check"], []).append(f)
    (ds,) = [f for f in by_check["version-skew"] if f["title"].startswith("deepspeed")]
    assert ds["ranks"] == [2] and "0.14.0" in ds["title"] and ds["severity"] == "error"
    assert ds["root_cause"]["id"] == "R01" and ds["fix_pattern"]["id"] == "F1"
    (proto,) = [f for f in by_check["env-skew"] if "NCCL_PROTO" in f["title"]]
    assert proto["ranks"] == [2] and proto["severity"] == "error"
    assert "NCCL_PROTO=LL" in proto["title"]
    (gpu,) = by_check["duplicate-gpu"]
    assert gpu["ranks"] == [0, 1] and gpu["root_cause"]["id"] == "R10"


def test_doctor_names_the_rank_that_never_answers(tmp_path: Path) -> None:
    wrapper = tmp_path / "rank2_dies.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$RANK" = 2 ]; then exit 0; fi\n'  # a rank that died before it could answer
        f"exec {sys.executable} -m triage doctor --distributed --timeout 3\n"
    )
    wrapper.chmod(0o755)
    done = subprocess.run(
        torchrun_argv(3, free_port(), str(wrapper), no_python=True),
        capture_output=True,
        text=True,
        timeout=120,
        env=job_env(),
    )
    assert done.returncode != 0
    assert "ERROR rank-missing [rank 2]: rank 2 did not answer within 3 s (2 of 3 did)" in (
        done.stdout
    )


def test_check_from_a_training_script_stops_the_job_on_a_bad_rank(tmp_path: Path) -> None:
    wrapper = tmp_path / "train.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$RANK" = 1 ]; then export NCCL_SOCKET_IFNAME==nosuchnic0; fi\n'
        f"exec {sys.executable} {JOBS / 'doctor_job.py'}\n"
    )
    wrapper.chmod(0o755)
    done = subprocess.run(
        torchrun_argv(3, free_port(), str(wrapper), no_python=True),
        capture_output=True,
        text=True,
        timeout=120,
        env=job_env(),
    )
    assert done.returncode != 0
    report = json.loads(done.stdout)
    (ifname,) = [f for f in report["findings"] if f["check"] == "socket-ifname"]
    assert ifname["ranks"] == [1] and ifname["severity"] == "error"


def test_distributed_without_a_launcher_is_a_usage_error() -> None:
    env = {k: v for k, v in job_env().items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    done = _doctor("--distributed", env=env)
    assert done.returncode == 2
    assert "--distributed needs the job's launcher" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_cpu_torch_on_a_node_that_expects_gpus_is_an_error() -> None:
    # 8 ranks per node, NCCL tuned and a CUDA toolkit installed, but torch is a CPU build
    facts = _facts(
        local_world_size=8,
        env={"NCCL_SOCKET_IFNAME": "eth0"},
        versions={"python": "3.11.7", "torch": "2.13.0+cpu", "nvcc": "12.6"},
    )
    found = _checks(facts)["torch-cpu-build"][0]
    assert found.severity == "error" and "8 ranks" in found.title
    # the same CPU build running a gloo job with nothing that asks for GPUs is fine
    assert "torch-cpu-build" not in _checks(_facts(local_world_size=8))


def test_a_gpu_listed_twice_is_one_duplicate_device_not_two_gpus() -> None:
    facts = _facts(local_world_size=2, env={"CUDA_VISIBLE_DEVICES": "0,0"})
    found = _checks(facts)
    assert "GPU 0 more than once" in found["cuda-visible-devices"][0].title
    per_node = found["gpus-per-node"][0]
    assert "only 1 visible GPU(s)" in per_node.title and "2 GPU" not in per_node.title
