"""The HTML report opened in a real headless Chromium: it renders, hostile log text stays text,
and the pictures (swimlanes, flight-recorder table, py-spy groups) and copy buttons work.

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
from report_samples import hang_on_rank3, hostile

from triage.report import render
from triage.report.view import verdict

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
    assert re.search(r'Culprit</td><td></td><td></td><td><span class="rank">rank 3 on ', html)
    # Log text is text in the live DOM: no element was built from it. The one script is the
    # copy buttons' (pinned by hash in the CSP); the hostile `<script>` is text.
    assert "<img" not in html and html.count("<script>") == 1
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


def test_the_pictures_and_the_copy_buttons_work_in_chromium(chromium: str, tmp_path: Path) -> None:
    """Swimlanes (inline SVG), the flight-recorder table and the py-spy groups mark rank 3;
    the copy buttons' script runs under the page's strict CSP (no other script could)."""
    page = tmp_path / "report.html"
    page.write_text(render(hang_on_rank3(), "html"), encoding="utf-8")
    dom = _run(chromium, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    # the script ran: the CSP hash matches it, the page is marked and the buttons show
    assert re.search(r'<html lang="en" class="js">', html)
    buttons = re.findall(r'<button type="button" class="copy" data-copy="([^"]*)"', html)
    assert "Find what rank 3 was doing: `py-spy dump --pid 4242` on host `node-b`" in buttons
    # swimlanes: rank 3's lane is the culprit's, with the initiating mark and its exit
    svg = html[html.index('<svg class="lanes"') : html.index("</svg>", html.index('class="lanes"'))]
    assert re.search(r'class="lane-label culprit"[^>]*>rank 3</text>', svg)
    assert svg.count('class="initiating"') == 1 and svg.count('class="exit"') == 3
    assert 'class="stopped"' in svg  # rank 3 stopped by the launcher
    # flight recorder: rank 3's row is the odd one, behind at #56
    assert re.search(r'<tr class="odd"><td>3</td><td class="num">#56</td>', html)
    # py-spy: the group of rank 3 is highlighted as the odd one out
    assert re.search(r'<div class="stack odd">\s*<div><strong>rank 3</strong>', html)

    shot = tmp_path / "pictures.png"
    result = _run(
        chromium, tmp_path, "--window-size=1280,2600", f"--screenshot={shot}", page.as_uri()
    )
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    width, height, colours = _png_size_and_colours(shot.read_bytes())
    assert (width, height) == (1280, 2600) and colours > 40
