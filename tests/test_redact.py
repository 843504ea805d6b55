"""Reports are posted in public: no secret from a log reaches any format, and the facts the
analysis found on the real text (rank, host, collective) survive the masking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage.cli import main

MASK = "<redacted>"

# One of each kind the issue names, as a job's own lines would carry them.
SECRETS = {
    "hf": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "github": "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
    "github-fine": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789AB",
    "gho": "gho_16C7e42F292c6912E7710c838347Ae178B4a",
    "ghs": "ghs_16C7e42F292c6912E7710c838347Ae178B4b",
    "aws-id": "AKIAIOSFODNN7EXAMPLE",
    "aws-session": "ASIAY34FZKBOKMUTVV7A",
    "aws-secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "openai": "sk-proj-Zx9abcdefghijklmnopqrstuv0123",
    "anthropic": "sk-ant-api03-Qw8abcdefghijklmnopqrstuvwxyz",
    "slack": "xoxb-123456789012-1234567890123-AbCdEfGhIjKl",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0cmFpbmVyIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9Pl",
    "wandb": "d3adb33fd3adb33fd3adb33fd3adb33fd3adb33f",
    "named": "Pl41nT3xtPassw0rd",
    "url-password": "hunter2-db-pass",
    "query-token": "QTok3nValue9876",
}
HOSTS = {
    "email": "alice.smith@example.com",
    "ip": "10.42.7.13",
    "host": "gpu-node-017",
    "user": "alice",
}

LOG = f"""\
[rank3]: Traceback (most recent call last):
[rank3]:   File "/home/{HOSTS["user"]}/project/train.py", line 88, in <module>
[rank3]:     push_to_hub(token="{SECRETS["hf"]}")
[rank3]: RuntimeError: upload failed: HF_TOKEN={SECRETS["hf"]} GH_TOKEN={SECRETS["github"]} \
gh2={SECRETS["github-fine"]} oauth {SECRETS["gho"]} app {SECRETS["ghs"]} \
AWS_ACCESS_KEY_ID={SECRETS["aws-id"]} session {SECRETS["aws-session"]} \
AWS_SECRET_ACCESS_KEY={SECRETS["aws-secret"]} openai {SECRETS["openai"]} \
claude {SECRETS["anthropic"]} slack {SECRETS["slack"]} jwt {SECRETS["jwt"]} \
wandb {SECRETS["wandb"]} DB_PASSWORD={SECRETS["named"]} \
postgres://trainer:{SECRETS["url-password"]}@db:5432/runs \
https://store.example.com/ckpt?token={SECRETS["query-token"]} master {HOSTS["ip"]} \
from /home/{HOSTS["user"]}/project/ckpt
{HOSTS["host"]}:27106:27302 [3] NCCL WARN Net : Connection closed by remote peer \
{HOSTS["ip"]}<45678> (job of {HOSTS["email"]})
[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: \
WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for \
600004 milliseconds before timing out.
"""


def _bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "rank_3.log").write_text(LOG, encoding="utf-8")
    return bundle


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--no-embed", "-q"])
    assert result.exit_code == 0, result.output
    return result.stdout


def _leaks(out: str, values: dict[str, str]) -> list[str]:
    # Text reports wrap long lines: look for each value's head and tail, not only the whole.
    flat = out.replace("\n", "")
    return [
        kind
        for kind, value in values.items()
        if value in flat or (len(value) > 12 and (value[:12] in out or value[-12:] in out))
    ]


@pytest.mark.parametrize("fmt", ["text", "json", "md", "html"])
def test_no_secret_from_a_log_reaches_any_report_format(tmp_path: Path, fmt: str) -> None:
    out = _run(str(_bundle(tmp_path)), "--format", fmt)
    assert _leaks(out, SECRETS) == []
    assert MASK in out or "&lt;redacted&gt;" in out


def test_masking_keeps_the_facts_the_analysis_found(tmp_path: Path) -> None:
    report = json.loads(_run(str(_bundle(tmp_path)), "--format", "json"))
    assert report["first_failure"]["rank"] == 3
    assert report["culprit_ranks"] == [3]
    assert report["inputs"][0]["rank"] == 3
    assert report["inputs"][0]["host"] == HOSTS["host"]  # hosts stay without --redact-hosts
    quoted = json.dumps(report)
    assert "OpType=ALLREDUCE" in quoted and "SeqNum=42" in quoted
    assert "HF_TOKEN=<redacted>" in quoted  # the setting's name stays: the line still reads


@pytest.mark.parametrize("fmt", ["text", "json", "md", "html"])
def test_redact_hosts_also_hides_emails_ips_hosts_and_home_users(tmp_path: Path, fmt: str) -> None:
    out = _run(str(_bundle(tmp_path)), "--format", fmt, "--redact-hosts")
    assert _leaks(out, SECRETS) == []
    assert _leaks(out, HOSTS) == []


def test_redact_hosts_gives_each_host_one_stand_in_and_keeps_the_ranks(tmp_path: Path) -> None:
    report = json.loads(_run(str(_bundle(tmp_path)), "--format", "json", "--redact-hosts"))
    assert report["inputs"][0]["host"] == "<host-1>"
    assert report["first_failure"]["rank"] == 3 and report["culprit_ranks"] == [3]
    quoted = json.dumps(report)
    assert "<host-1>:27106:27302" in quoted  # the NCCL prefix names the same stand-in
    assert "<ip-1>" in quoted and "<email-1>" in quoted and "/home/<user-1>/" in quoted


def test_explain_masks_what_it_quotes() -> None:
    text = f"RuntimeError: HTTP 401 for token {SECRETS['hf']} (WANDB_API_KEY={SECRETS['wandb']})"
    for args in (["--format", "json"], ["--format", "md"], ["--format", "text"]):
        out = _run("explain", *args, text)
        assert _leaks(out, SECRETS) == [], args
    rows = CliRunner().invoke(
        main, ["explain", "--jsonl", "--no-embed"], input=json.dumps({"id": 1, "text": text})
    )
    assert _leaks(rows.stdout, SECRETS) == []


def test_a_plain_text_api_for_other_tools() -> None:
    from triage.redact import redact_text

    assert redact_text(f"token {SECRETS['github']} ok") == f"token {MASK} ok"
    assert redact_text("ping 10.0.0.7 from node") == "ping 10.0.0.7 from node"
    assert redact_text("ping 10.0.0.7 from a@b.io", hosts=True) == "ping <ip-1> from <email-1>"


def _examples() -> list[tuple[str, str, bool, bool]]:
    try:
        from triage.redact import patterns
    except ImportError:  # a checkout without the module: the tests below say so
        return [("missing", "triage.redact", False, True)]
    secrets, hosts = patterns()
    out = []
    for group, items in ((False, secrets), (True, hosts)):
        for p in items:
            out += [(p.id, text, group, True) for text in p.match]
            out += [(p.id, text, group, False) for text in p.no_match]
    return out


@pytest.mark.parametrize(("pid", "text", "hosts", "should_change"), _examples())
def test_every_redaction_pattern_keeps_its_examples(
    pid: str, text: str, hosts: bool, should_change: bool
) -> None:
    from triage.redact import redact_text

    changed = redact_text(text, hosts=hosts) != text
    assert changed == should_change, (pid, text, redact_text(text, hosts=hosts))


def test_every_pattern_has_examples_both_ways() -> None:
    from triage.redact import patterns

    for p in [*patterns()[0], *patterns()[1]]:
        assert p.match and p.no_match, p.id


# Runs of the characters the patterns work on: a hostile log chooses its lines, and a pattern
# that backtracks on one (nested repeats over dotted labels did) takes minutes per line.
_RUNS = [
    "a.", "1.", "a:", "a@", "a@b.", "x.y.local ", "::", "ab", "a-", "a_", "=", "'", "_key ",
    "ab://a:", "/home/", "C:\\Users\\", "host=", "a:1:1 [", "bearer ", "?token=", "hf_", "sk-",
    "xoxb-", "eyJa.", "AKIA", "aws secret ", "--password ", "Authorization: ",
]  # fmt: skip


@pytest.mark.timeout(60)
def test_no_pattern_backtracks_on_long_runs_of_its_own_characters() -> None:
    from triage.redact import Redactor

    redactor = Redactor(hosts=True)
    for run in _RUNS:
        text = run * (20_000 // len(run))
        redactor.text(text + ".local " + text + "@")  # every pattern's literal present
