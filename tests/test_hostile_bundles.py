"""Hostile and odd bundles, as a user meets them in the report: nothing read from outside the
bundle, no evidence lost without a word, no text that rewrites what a reader sees."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

from click.testing import CliRunner

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
    body = b"loss 0.5 step 3 " * (256 * 1024)  # 4 MiB, no newline anywhere
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
