"""Headless Chromium for the dashboard's browser tests and screenshots, driven by Selenium.

Selenium rather than Playwright: Debian ships ``chromium`` and ``chromium-driver`` of the same
version, so the WebDriver protocol always matches the browser, nothing is downloaded (Playwright's
Python package bundles a Node runtime and expects browsers of its own revision), and the only
Python dependency is ``selenium`` itself. ``.ci/run`` installs both packages with apt when they
are missing; without them the tests skip and say how to install them.

Run as a script to write the screenshots of every view of a study (docs/img)::

    PYTHONPATH=. .venv/bin/python -m tests.studies.dashboard.browser rewrite-demo \\
        --storage sqlite:///demo-study.db --out docs/img
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("RT_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("RT_CHROMEDRIVER", "/usr/bin/chromedriver")
#: The flags every test browser starts with (the machine's network is closed: nothing may be
#: fetched, so every background fetch of Chromium's is off, and name lookups fail but for the
#: dashboard's own loopback server).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
)


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ModuleNotFoundError:
        return "selenium is not installed: pip install 'rewrite-tuner[dashboard]'"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (shutil.which(path) or os.path.exists(path)):
            return (
                f"{path} not found: the browser tests need Debian's chromium and chromium-driver "
                "(apt-get install chromium chromium-driver; .ci/run installs them)"
            )
    return None


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A headless Chromium with a fresh profile, closed (and its profile removed) on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="rt-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager never looks anything up
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait(driver: Any, script: str, timeout: float = 60.0) -> Any:
    """Wait until the JavaScript expression ``script`` is truthy; return its value."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(
        lambda d: d.execute_script(f"return {script}")
    )


def open_view(driver: Any, view: str) -> None:
    """Click the tab of ``view`` and wait until it shows (its figures drawn)."""
    driver.find_element("css selector", f'nav button[data-tab="{view}"]').click()
    wait(driver, f"document.getElementById('view-{view}').classList.contains('on')")
    wait(
        driver,
        f"[...document.querySelectorAll('#view-{view} .fig')].every(f => f.querySelector('.main-svg'))",
    )


def text(driver: Any, css: str) -> str:
    """The visible text of the first element matching ``css``."""
    return str(driver.find_element("css selector", css).text)


def screenshot(driver: Any, path: Path, *, colors: int = 128) -> Path:
    """A screenshot of the whole page (the window grown to its height), palette-reduced so the
    file stays small."""
    from PIL import Image

    height = driver.execute_script("return document.documentElement.scrollHeight")
    width = driver.get_window_size()["width"]
    driver.set_window_size(width, min(max(int(height) + 140, 600), 3000))
    time.sleep(0.5)  # let plotly re-layout
    driver.save_screenshot(str(path))
    image = Image.open(path).convert("RGB").quantize(colors=colors)
    image.save(path, optimize=True)
    driver.set_window_size(width, 1000)
    return path


VIEWS = (
    "overview", "history", "pareto", "parallel", "priors", "structure", "running", "failures",
    "time", "trials", "validation",
)  # fmt: skip


def _main() -> None:
    from rewrite_tuner.dashboard import HOOKS
    from studies.dashboard.server import Dashboard, make

    ap = argparse.ArgumentParser(description="Screenshots of every view of a study.")
    ap.add_argument("name")
    ap.add_argument("--storage", required=True)
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    ap.add_argument("--trial", type=int, default=None, help="also the view of this trial")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dash = Dashboard(args.storage, args.name, HOOKS)
    server = make(dash, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    stem = args.name
    with chromium() as d:
        d.get(f"{base}/rt/study/{args.name}/")
        wait(d, "document.body.dataset.state === 'ok'")
        for view in VIEWS:
            if not d.find_elements("css selector", f'nav button[data-tab="{view}"]'):
                continue
            open_view(d, view)
            if view == "structure":
                wait(d, "!!document.querySelector('#structure-fit img, #structure-fit pre')", 600)
            print(screenshot(d, args.out / f"{stem}-dashboard-{view}.png"))
        if args.trial is not None:
            d.execute_script(f"location.hash = '#trial-{args.trial}'")
            wait(d, "document.getElementById('view-trial')?.classList.contains('on')")
            wait(d, "[...document.querySelectorAll('#view-trial .fig')].every(f => f.data)")
            print(screenshot(d, args.out / f"{stem}-dashboard-trial.png"))
        d.get(f"{base}/dashboard/studies/{dash.snapshot(args.name).record.id}")
        wait(d, "document.body.innerText.includes('Pareto Front')")
        time.sleep(2)
        print(screenshot(d, args.out / f"{stem}-optuna-dashboard.png"))
    server.shutdown()
    dash.close()


if __name__ == "__main__":  # pragma: no cover
    _main()
