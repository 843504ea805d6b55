"""The HTML report opened in a real headless Chromium: it renders, and hostile log text stays text.

Needs Debian's `chromium` package. Without it the test skips, except under CI (env var CI set),
where a missing browser is a failure: CI installs it on purpose.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from report_samples import hostile

from triage.report import render
from triage.report.common import verdict

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


@pytest.fixture(scope="module")
def chromium() -> str:
    # TRIAGE_CHROMIUM points at another browser binary (or a missing one, to see the skip).
    path = os.environ.get("TRIAGE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        message = (
            f"chromium not found at {path} (Debian: apt-get install -y chromium); "
            "the HTML report cannot be checked in a real browser"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def _run(chromium: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"profile-{len(list(tmp.iterdir()))}"
    profile.mkdir()
    return subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _png_size_and_colours(png: bytes) -> tuple[int, int, int]:
    """Width, height and how many distinct byte values the pixel data holds (blank page: few)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", png[16:24])
    idat = b""
    pos = 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += png[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return width, height, len(set(zlib.decompress(idat)))


def test_hostile_report_renders_in_chromium_without_running_injected_code(
    chromium: str, tmp_path: Path
) -> None:
    d = hostile()
    page = tmp_path / "report.html"
    page.write_text(render(d, "html"), encoding="utf-8")

    dom = _run(chromium, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    # The page title is the verdict; the hostile `onerror=document.title='pwned'` never ran.
    title = re.search(r"<title>(.*?)</title>", html, re.S)
    assert title is not None and title.group(1) == f"triage: {verdict(d)}"
    assert "pwned" not in title.group(1)
    assert f"<h1>{verdict(d)}</h1>" in html
    assert re.search(r'Culprit ranks</dt>\s*<dd><span class="rank">3</span>', html)
    # Log text is text in the live DOM: no element was built from it.
    assert "<img" not in html and "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "py-spy dump --pid 4242" in html

    shot = tmp_path / "report.png"
    result = _run(
        chromium, tmp_path, "--window-size=1280,1800", f"--screenshot={shot}", page.as_uri()
    )
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    width, height, colours = _png_size_and_colours(shot.read_bytes())
    assert (width, height) == (1280, 1800)
    assert colours > 40, "the screenshot looks blank"
