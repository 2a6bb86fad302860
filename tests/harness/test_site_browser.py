"""The history site as a person sees it: built from the committed GPU history alone, served on
localhost, opened in a real headless browser (Debian's chromium, driven by selenium). The index
renders, a tracked benchmark's graph shows one point per committed commit, and no page logs a
JavaScript error, with no network beyond localhost. Opened as a file instead, the site says to serve
it over HTTP and how.

Without chromium, chromedriver or selenium the tests skip and say so; CI (.ci/run) installs them
and sets NF4KERNEL_REQUIRE_BROWSER=1, which turns that skip into a failure. NF4KERNEL_SCREENSHOTS=DIR
keeps the screenshots there (docs/ holds the committed ones).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from checkouts import clone_on_main, head, python_path
from site_checkout import CPU_MACHINE, MACHINES, add_a_cpu_machines_result, benchmarks_with_results

from harness import history, site

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
TRACKED = "gpu.KernelTime.track_kernel_time"
NEEDS_HTTP = "nf4kernel-needs-http"  # the id of the message harness/site_assets/needs-http.js shows


def _missing() -> list[str]:
    missing = [] if CHROMIUM else ["chromium"]
    missing += [] if CHROMEDRIVER else ["chromedriver"]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    return missing


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory) -> Path:
    missing = _missing()
    if missing:
        why = f"needs {', '.join(missing)} (apt-get install chromium chromium-driver; pip: requirements/test.txt)"
        if os.environ.get("NF4KERNEL_REQUIRE_BROWSER") == "1":
            pytest.fail(f"NF4KERNEL_REQUIRE_BROWSER=1 but this machine {why}")
        pytest.skip(why)
    if head() is None:
        pytest.skip("asv reads the commits from git: needs the git checkout")
    tmp = tmp_path_factory.mktemp("site")
    clone = clone_on_main(tmp / "clone")  # a `main` that holds the history's commits
    config = clone / "asv-site.conf.json"
    conf = {"version": 1, "project": "nf4kernel", "repo": str(clone), "branches": ["main"], "dvcs": "git"}
    conf.update(environment_type="existing", plugins=[".harness.asv_env", site.SITE_PLUGIN], benchmark_dir="benchmarks")
    conf.update(results_dir=str(tmp / "results"), html_dir=str(tmp / "html"))
    config.write_text(json.dumps(conf))
    add_a_cpu_machines_result(tmp / "results")  # as a CPU machine's own main job leaves one
    env = {**os.environ, "PYTHONPATH": python_path(clone), "HOME": str(tmp)}
    done = subprocess.run(
        [sys.executable, "-m", "harness.site", "publish", "--config", str(config)],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return tmp / "html"


@pytest.fixture(scope="module")
def site_url(site_dir):
    handler = functools.partial(QuietHandler, directory=str(site_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser(site_url):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
    ):
        options.add_argument(flag)
    # Only localhost: a page that reached for a CDN would fail to load it, and log that.
    options.add_argument("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    yield driver
    driver.quit()


def errors(driver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def wait_for(driver, script: str, timeout: float = 30):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: d.execute_script(script))


def screenshot(driver, name: str, tmp_path) -> None:
    path = tmp_path / name
    driver.save_screenshot(str(path))
    keep = os.environ.get("NF4KERNEL_SCREENSHOTS")
    if keep:
        shutil.copyfile(path, Path(keep) / name)


def test_the_index_renders_every_benchmark_without_errors(browser, site_url, tmp_path):
    browser.get(f"{site_url}/index.html")
    count = wait_for(browser, "return window.jQuery && $('.benchmark-container').length")
    assert count == len(benchmarks_with_results())  # every benchmark of the committed history has a tile
    assert "swallow" not in browser.current_url  # asv's error page when a library failed to load
    assert not browser.execute_script(f"return document.getElementById('{NEEDS_HTTP}')")  # served: no message
    assert not errors(browser)
    screenshot(browser, "site-index.png", tmp_path)


@pytest.mark.parametrize("machine", MACHINES)
def test_a_tracked_benchmark_plots_one_point_per_committed_commit(browser, site_url, machine, tmp_path):
    commits = len(history.commits(history.STORE / machine))
    browser.get(f"{site_url}/index.html#{TRACKED}?machine={machine}")
    series = wait_for(
        browser,
        "var p = window.jQuery && $('#main-graph').data('plot');"
        "return p && p.getData().length ? p.getData().map(s => s.data.filter(d => d[1] !== null).length) : null;",
    )
    assert len(series) >= 6, series  # a line per shape (asv shows the first dtype until another is picked)
    assert series == [commits] * len(series), f"points per line {series}, committed commits {commits}"
    # Legends name what varies between the lines, the shape and the dtype, and opens on bfloat16.
    labels = browser.execute_script("return $('#main-graph').data('plot').getData().map(s => s.label)")
    assert all(re.fullmatch(r"dtype-bfloat16; shape-\d+x\d+", label) for label in labels), labels
    assert not errors(browser)
    screenshot(browser, f"site-graph-{machine}.png", tmp_path)


def test_a_cpu_machines_result_stays_off_the_site(site_url):
    """Its interpreter times are no figure of the kernel, and its description (no GPU, no driver)
    would fill the selectors with "none" and every legend with the machine's versions."""
    import urllib.request

    with urllib.request.urlopen(f"{site_url}/index.json", timeout=30) as answer:
        index = json.loads(answer.read())
    assert CPU_MACHINE not in index["machines"] and CPU_MACHINE not in index["params"]["machine"]
    assert all("none" not in values for values in index["params"].values()), index["params"]
    assert set(index["params"]) == {"machine", "toolchain", "python", "branch"}


def test_the_regressions_tab_of_the_committed_history_lists_no_noise(site_url):
    """asv's step detection over the committed history: a figure that is noise (asv's timed
    synchronized call was one, 0.70x to 1.26x between runs of one commit) shows there as a
    regression on every fresh site. The committed history holds none."""
    import urllib.request

    with urllib.request.urlopen(f"{site_url}/regressions.json", timeout=30) as answer:
        assert json.loads(answer.read())["regressions"] == []


def page_with_the_message(driver) -> str | None:
    """The page's visible text once it shows the needs-http message (on whichever page the browser
    is by then: asv sends a page whose libraries failed to load on to error.html)."""
    from selenium.common.exceptions import WebDriverException

    try:
        return driver.execute_script(
            f"var box = document.getElementById('{NEEDS_HTTP}');"
            "return box && box.offsetParent !== null ? document.body.innerText : null;"
        )
    except WebDriverException:  # between two pages
        return None


def test_opened_as_a_file_the_site_says_to_serve_it(browser, site_dir, tmp_path):
    """On file:// the browser refuses the pages' data and integrity-checked scripts, and asv's own
    error page blames the internet connection. The page says what to run instead, and only that."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get((site_dir / "index.html").as_uri())
    shown = WebDriverWait(browser, 30).until(page_with_the_message)
    assert "served over HTTP" in shown and "http://127.0.0.1:8080" in shown, shown
    assert "asv preview" in shown and "python3 -m nox -s preview" in shown, shown
    assert "internet connection" not in shown, shown
    screenshot(browser, "site-opened-as-a-file.png", tmp_path)
