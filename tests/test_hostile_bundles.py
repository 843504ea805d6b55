"""Hostile and odd bundles, as a user meets them in the report: nothing read from outside the
bundle, no evidence lost without a word, no text that rewrites what a reader sees."""

from __future__ import annotations

import io
import json
import pickle
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage import pipeline
from triage.cli import main

OOM = (
    "[rank0]: Traceback (most recent call last):\n"
    '[rank0]:   File "/workspace/train.py", line 40, in <module>\n'
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
)


def _report(*args: str) -> dict:
    result = CliRunner().invoke(main, [*args, "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _render(fmt: str, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--no-embed", "-q", "--format", fmt])
    assert result.exit_code == 0, result.output
    return result.stdout


def _warnings(report: dict) -> dict[str, list[str]]:
    return {i["path"]: i["warnings"] for i in report["inputs"]}


# ------------------------------------------------------------------ 9: smaller things


def test_bidi_overrides_and_zero_width_characters_cannot_disguise_a_quoted_line(
    tmp_path: Path,
) -> None:
    # U+202E flips what follows right-to-left; U+200B/U+2060 hide text boundaries.
    (tmp_path / "rank_0.log").write_text(
        OOM + "[rank0]: RuntimeError: run \u202erm -rf ~\u202c to fix\u200b\u2060 (see docs)\n",
        encoding="utf-8",
    )
    for fmt in ("text", "md"):
        out = _render(fmt, str(tmp_path))
        for ch in ("\u202e", "\u202c", "\u2060"):
            assert ch not in out, (fmt, hex(ord(ch)))
        assert "\\u202e" in out, fmt  # shown, escaped: the reader sees something was there


def test_a_log_with_nul_bytes_near_its_start_is_still_read(tmp_path: Path) -> None:
    # A writer that crashed (or a preallocated file) leaves a block of NULs before the text.
    (tmp_path / "rank_0.log").write_bytes(
        b"starting step 1\n" + b"\x00" * 4096 + b"\n" + OOM.encode() * 3
    )
    report = _report(str(tmp_path))
    assert report["symptoms"][0]["id"] == "S14"
    (warnings,) = _warnings(report).values()
    assert any("NUL" in w for w in warnings), warnings
    assert not any("binary" in w for w in warnings)


def test_a_real_binary_file_is_still_not_read(tmp_path: Path) -> None:
    blob = bytes(range(256)) * 64  # NULs scattered among every other byte value
    (tmp_path / "model.bin").write_bytes(blob)
    (tmp_path / "rank_0.log").write_text(OOM, encoding="utf-8")
    warnings = _warnings(_report(str(tmp_path)))
    assert any("binary" in w for w in warnings[f"{tmp_path}/model.bin"])


def test_a_huge_line_without_a_newline_is_read_not_called_blank(tmp_path: Path) -> None:
    body = b"loss 0.5 step 3 " * 80_000  # 1.3 MB, no newline anywhere
    (tmp_path / "rank_0.log").write_bytes(body + b"torch.OutOfMemoryError: CUDA out of memory.")
    report = _report(str(tmp_path))
    (warnings,) = _warnings(report).values()
    assert not any("blank" in w for w in warnings), warnings
    assert any("cut" in w for w in warnings), warnings  # the long line says it was shortened
    assert report["symptoms"] and report["symptoms"][0]["id"] == "S14"


def _tar_with_special_members(path: Path, mode: str) -> None:
    with tarfile.open(path, mode) as tf:
        data = OOM.encode()
        info = tarfile.TarInfo("job/rank_0.log")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        for name, kind, target in (
            ("job/rank_1.log", tarfile.SYMTYPE, "/home/alice/.aws/credentials"),
            ("job/rank_2.log", tarfile.LNKTYPE, "job/rank_0.log"),
            ("job/tty", tarfile.CHRTYPE, ""),
            ("job/pipe", tarfile.FIFOTYPE, ""),
        ):
            special = tarfile.TarInfo(name)
            special.type = kind
            special.linkname = target
            tf.addfile(special)


def test_tar_link_device_and_fifo_members_are_listed_not_dropped(tmp_path: Path) -> None:
    for mode, suffix in (("w", "tar"), ("w:gz", "tar.gz")):
        archive = tmp_path / f"bundle.{suffix}"
        _tar_with_special_members(archive, mode)
        warnings = _warnings(_report(str(archive)))
        listed = {path.split("!", 1)[1]: w for path, w in warnings.items() if "!" in path}
        assert "symbolic link" in " ".join(listed["job/rank_1.log"])
        assert "/home/alice/.aws/credentials" in " ".join(listed["job/rank_1.log"])
        assert "hard link" in " ".join(listed["job/rank_2.log"])
        assert "device" in " ".join(listed["job/tty"])
        assert "FIFO" in " ".join(listed["job/pipe"])
        archive.unlink()


def test_zip_symlink_members_are_listed_not_dropped(tmp_path: Path) -> None:
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("rank_0.log", OOM)
        link = zipfile.ZipInfo("rank_1.log")
        link.external_attr = (0o120777 << 16) | 0
        zf.writestr(link, "/etc/shadow")
    warnings = _warnings(_report(str(archive)))
    listed = warnings[f"{archive}!rank_1.log"]
    assert any("symbolic link" in w and "/etc/shadow" in w for w in listed), listed


def test_an_input_warnings_own_words_are_never_evidence_of_the_failure(tmp_path: Path) -> None:
    # py-spy's error output is quoted in the warning that says the dump could not be read: a
    # hostile one reads like an OOM-killed, timed-out rank, while the job failed on a ValueError
    (tmp_path / "rank_0.log").write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/workspace/train.py", line 88, in <module>\n'
        "[rank0]: ValueError: batch size must be positive, got 0\n",
        encoding="utf-8",
    )
    hostile = tmp_path / "pyspy_rank1.txt"
    hostile.write_text(
        "Error: Failed to copy memory: the target was killed by signal 9 (SIGKILL) after CUDA "
        "out of memory; NCCL watchdog timed out\n  py_spy::python_spy: read failed\n",
        encoding="utf-8",
    )
    report = _report(str(tmp_path))
    assert "killed by signal 9" in " ".join(_warnings(report)[str(hostile)])  # still said
    assert {e["source"] for e in report["evidence"]} == {str(tmp_path / "rank_0.log")}
    labels = {s["id"] for s in report["symptoms"]} | {r["id"] for r in report["root_causes"]}
    assert not labels & {"S14", "S15", "R16", "R17"}, report["summary"]  # GPU or host memory


# ------------------------------------------------------------------ 1: links out of the bundle


def _bundle_with_links_out(tmp_path: Path) -> Path:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "other_job.log").write_text(
        "RuntimeError: NCCL error in other-team-secret-project\n", encoding="utf-8"
    )
    home = tmp_path / "home" / "alice"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("[default]\naws_access_key_id = x\n")
    (home / ".bash_history").write_text("ls\n")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "rank_0.log").write_text(OOM, encoding="utf-8")
    (bundle / "rank_1.log").symlink_to(outside / "other_job.log")
    (bundle / "home").symlink_to(home)
    (bundle / "same.log").symlink_to(bundle / "rank_0.log")  # inside: fine to follow
    (bundle / "gone.log").symlink_to(tmp_path / "no-such-file")
    return bundle


def test_links_out_of_the_bundle_are_listed_not_followed(tmp_path: Path) -> None:
    bundle = _bundle_with_links_out(tmp_path)
    text = _render("json", str(bundle))
    assert "other-team-secret-project" not in text
    assert ".bash_history" not in text and "credentials" not in text
    report = json.loads(text)
    warnings = _warnings(report)
    link = " ".join(warnings[f"{bundle}/rank_1.log"])
    assert "symbolic link" in link and "not followed" in link
    assert str(tmp_path / "elsewhere" / "other_job.log") in link  # the target's path, only
    assert "not followed" in " ".join(warnings[f"{bundle}/home"])
    assert "broken symbolic link" in " ".join(warnings[f"{bundle}/gone.log"])
    assert report["symptoms"][0]["id"] == "S14"  # the bundle itself is still diagnosed


def test_follow_links_reads_what_the_links_point_to(tmp_path: Path) -> None:
    bundle = _bundle_with_links_out(tmp_path)
    text = _render("json", str(bundle), "--follow-links")
    assert "other-team-secret-project" in text


def test_a_path_the_user_names_is_read_even_when_it_is_a_link(tmp_path: Path) -> None:
    bundle = _bundle_with_links_out(tmp_path)
    report = _report(str(bundle / "rank_1.log"))  # named on purpose: the user's choice
    assert not _warnings(report)[f"{bundle}/rank_1.log"]


# ------------------------------------------------------------------ 3: compressed logs, to the end

# One progress line repeated: compresses far past 200:1 (gzip ~1000:1, the others more), as
# real logs of one repeated line do. The OOM that ended the job is at the very end, past 16 MiB.
_LINES = b"[rank0]: step 5 loss 1.0 lr 0.0001\n" * 30_000  # 1 MiB
_REPEATED = _LINES * 17


def _compress(data: bytes, codec: str) -> bytes:
    import bz2
    import gzip
    import lzma

    if codec == "gz":
        return gzip.compress(data, compresslevel=9)
    if codec == "gz-multi":  # `gzip >> log.gz`: the trailer speaks for the last stream only
        return gzip.compress(data[:-200], compresslevel=9) + gzip.compress(data[-200:])
    if codec == "bz2":  # pbzip2-style: one stream per block (bzip2 is slow to compress)
        assert data.startswith(_REPEATED)
        tail = data[len(_REPEATED) :]
        return bz2.compress(_LINES) * 17 + bz2.compress(tail)
    if codec == "xz":
        return lzma.compress(data, preset=0)
    zstandard = pytest.importorskip("zstandard")
    return zstandard.ZstdCompressor(level=1).compress(data)


@pytest.mark.parametrize("codec", ["gz", "gz-multi", "bz2", "xz", "zst"])
def test_a_highly_compressed_log_is_read_to_its_end(tmp_path: Path, codec: str) -> None:
    log = _REPEATED + OOM.encode()
    assert len(log) > 16 << 20
    (tmp_path / f"rank_0.log.{codec}").write_bytes(_compress(log, codec))
    report = _report(str(tmp_path))
    assert report["symptoms"][0]["id"] == "S14", report["summary"]  # the OOM at the end
    assert _warnings(report) == {f"{tmp_path}/rank_0.log.{codec}": []}


def _diagnose(tmp_path: Path, **limits: float) -> dict:
    from triage import budget

    options = pipeline.Options(use_embeddings=False, limits=budget.JobLimits(**limits))
    return pipeline.diagnose([str(tmp_path)], options).to_dict()


def test_a_bomb_stops_at_the_jobs_decompression_budget_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "rank_0.log.xz").write_bytes(_compress(_REPEATED * 2 + OOM.encode(), "xz"))
    (tmp_path / "rank_1.log.xz").write_bytes(_compress(_REPEATED, "xz"))
    report = _diagnose(tmp_path, decompressed_bytes=24 << 20)
    warned = " ".join(w for ws in _warnings(report).values() for w in ws)
    assert "budget of 24 MiB of decompressed data" in warned
    assert "stopped after" in warned


def test_a_slow_bomb_stops_at_the_jobs_decompression_time_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "rank_0.log.bz2").write_bytes(_compress(_REPEATED + OOM.encode(), "bz2"))
    report = _diagnose(tmp_path, decompress_seconds=0.001)
    (warnings,) = _warnings(report).values()
    assert any("s of decompression" in w and "used up" in w for w in warnings), warnings


# ------------------------------------------------------------------ 7: memory per job


def _fr_pickle(entries: bytes) -> bytes:
    """A pickle `{"version": "2.10", "pg_config": {}, "entries": [...]}` whose list holds the
    given opcodes' objects."""
    head = b"X\x07\x00\x00\x00versionX\x04\x00\x00\x002.10X\t\x00\x00\x00pg_config}"
    return b"\x80\x02}(" + head + b"X\x07\x00\x00\x00entries](" + entries + b"eu."


def test_a_dump_too_big_to_decode_is_refused_with_a_warning_not_loaded(tmp_path: Path) -> None:
    fr = tmp_path / "fr"
    fr.mkdir()
    # 12 MB of empty JSON entries: ~4 million dicts, about 300 MB once decoded
    (fr / "nccl_trace_rank_0.json").write_text(
        '{"version": "2.10", "pg_config": {}, "entries": [' + "{}," * 4_000_000 + "{}]}"
    )
    # 8 MB of list openings in a pickle: 8 million lists, over 500 MB once decoded
    (fr / "nccl_trace_rank_1").write_bytes(_fr_pickle(b"]" * 8_000_000))
    (tmp_path / "rank_0.log").write_text(OOM, encoding="utf-8")
    report = _diagnose(tmp_path, fr_decode_bytes=128 << 20)
    warnings = _warnings(report)
    for name in ("nccl_trace_rank_0.json", "nccl_trace_rank_1"):
        said = " ".join(warnings[f"{fr}/{name}"])
        assert "of memory, over this job's budget of 128 MiB" in said, said
    assert report["symptoms"][0]["id"] == "S14"  # the rest of the job is still diagnosed


def test_flight_recorder_entries_past_the_jobs_budget_are_cut_with_a_warning(
    tmp_path: Path,
) -> None:
    from fr_samples import fr_entry

    for rank in range(2):
        dump = {"version": "2.10", "entries": [fr_entry(i + 1) for i in range(100)]}
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))
    report = _diagnose(tmp_path, fr_entries=150)
    said = [w for ws in _warnings(report).values() for w in ws]
    assert any("budget of 150 flight-recorder entries" in w and "last 50" in w for w in said)


# ------------------------------------------------------------------ 8: temp space


def test_compressed_tars_share_one_temp_budget_given_back_member_by_member(
    tmp_path: Path,
) -> None:
    log = (b"[rank%d]: step 5 loss 1.0\n" * 600_000) + OOM.encode()  # ~15 MB each
    for n in range(3):
        with tarfile.open(tmp_path / f"part{n}.tar.gz", "w:gz", compresslevel=1) as tf:
            info = tarfile.TarInfo(f"rank_{n}.log")
            info.size = len(log)
            tf.addfile(info, io.BytesIO(log))
            junk = tarfile.TarInfo("core.bin")  # binary: judged by its first bytes, not copied
            junk.size = 40 << 20
            tf.addfile(junk, io.BytesIO(bytes(range(256)) * (junk.size // 256)))
    # 45 MB of logs and 120 MB of cores through 20 MiB of temp space
    report = _diagnose(tmp_path, spool_bytes=20 << 20)
    warnings = _warnings(report)
    for n in range(3):
        assert warnings[f"{tmp_path}/part{n}.tar.gz!rank_{n}.log"] == []
        assert "binary" in " ".join(warnings[f"{tmp_path}/part{n}.tar.gz!core.bin"])
    assert report["symptoms"][0]["id"] == "S14"


def test_a_member_bigger_than_the_temp_budget_is_listed_with_why(tmp_path: Path) -> None:
    log = b"[rank0]: step 5 loss 1.0\n" * 600_000
    with tarfile.open(tmp_path / "big.tar.gz", "w:gz", compresslevel=1) as tf:
        info = tarfile.TarInfo("rank_0.log")
        info.size = len(log)
        tf.addfile(info, io.BytesIO(log))
    report = _diagnose(tmp_path, spool_bytes=4 << 20)
    (warnings,) = _warnings(report).values()
    assert any("temp space this job may use" in w for w in warnings), warnings
