"""The history site as a person sees it: built from the committed GPU history alone, served on
localhost, opened in a real headless browser (Debian's chromium, driven by selenium). The index
renders, a tracked benchmark's graph shows one point per committed commit, and no page logs a
JavaScript error, with no network beyond localhost. Opened as a file instead, the site says to serve
it over HTTP and how. A library refused by its hash sends the reader to asv's error page, as asv's
inline script did. And a site whose names are markup (a git tag and branch, every machine.json
field, a benchmark's parameters, unit, pretty_name and code) shows each as written, on every page
and tooltip, runs none, and carries its Content-Security-Policy, which refuses nothing of its own.

Without chromium, chromedriver or selenium the tests skip and say so; CI (.ci/run) installs them
and sets NF4KERNEL_REQUIRE_BROWSER=1, which turns that skip into a failure. NF4KERNEL_SCREENSHOTS=DIR
keeps the screenshots there (docs/ holds the committed ones).
"""

from __future__ import annotations

import contextlib
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

from harness.history import site
from harness.history import store as history

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
TRACKED = "gpu.KernelTime.track_kernel_time"
NEEDS_HTTP = "nf4kernel-needs-http"  # the id of the message harness/history/site_assets/needs-http.js shows


def _missing() -> list[str]:
    missing = [] if CHROMIUM else ["chromium"]
    missing += [] if CHROMEDRIVER else ["chromedriver"]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    return missing


def needs_a_browser() -> None:
    """Skip (or, where CI asks for the browser, fail) where chromium, chromedriver or selenium is
    missing, or where this tree is no git checkout."""
    missing = _missing()
    if missing:
        why = f"needs {', '.join(missing)} (apt-get install chromium chromium-driver; pip: requirements/test.txt)"
        if os.environ.get("NF4KERNEL_REQUIRE_BROWSER") == "1":
            pytest.fail(f"NF4KERNEL_REQUIRE_BROWSER=1 but this machine {why}")
        pytest.skip(why)
    if head() is None:
        pytest.skip("asv reads the commits from git: needs the git checkout")


def publish(tmp: Path, clone: Path, branches: list[str]) -> Path:
    """``python -m harness site publish`` of ``clone`` with the results in ``tmp/results``, as a
    person types it; returns the site's folder."""
    config = clone / "asv-site.conf.json"
    conf = {"version": 1, "project": "nf4kernel", "repo": str(clone), "branches": branches, "dvcs": "git"}
    conf.update(
        environment_type="existing", plugins=[".harness.history.asvrun", site.SITE_PLUGIN], benchmark_dir="benchmarks"
    )
    conf.update(results_dir=str(tmp / "results"), html_dir=str(tmp / "html"))
    config.write_text(json.dumps(conf))
    env = {**os.environ, "PYTHONPATH": python_path(clone), "HOME": str(tmp)}
    done = subprocess.run(
        [sys.executable, "-m", "harness", "site", "publish", "--config", str(config)],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return tmp / "html"


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory) -> Path:
    needs_a_browser()
    tmp = tmp_path_factory.mktemp("site")
    clone = clone_on_main(tmp / "clone")  # a `main` that holds the history's commits
    add_a_cpu_machines_result(tmp / "results")  # as a CPU machine's own main job leaves one
    return publish(tmp, clone, ["main"])


@contextlib.contextmanager
def serve(directory: Path):
    handler = functools.partial(QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def site_url(site_dir):
    with serve(site_dir) as url:
        yield url


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
    assert "asv preview" in shown and "nox -s preview" in shown, shown
    assert "internet connection" not in shown, shown
    screenshot(browser, "site-opened-as-a-file.png", tmp_path)


def test_a_library_refused_by_its_hash_sends_the_reader_to_the_error_page(browser, site_dir, tmp_path):
    """What asv's inline js_load_failure() did, load-failure.js does under the policy: a library
    that fails to load (here changed after publishing, so that its integrity hash refuses it)
    sends the reader to error.html, which carries the policy too."""
    from selenium.webdriver.support.ui import WebDriverWait

    copy = tmp_path / "html"
    shutil.copytree(site_dir, copy)
    flot = copy / site.VENDOR / "flot" / "jquery.flot.js"
    flot.write_bytes(flot.read_bytes() + b"\n// changed")
    with serve(copy) as url:
        browser.get(f"{url}/index.html")
        WebDriverWait(browser, 30).until(lambda d: d.current_url == f"{url}/error.html")
        assert "Can not determine continental origin of swallow" in browser.page_source
        policy = 'meta[http-equiv="Content-Security-Policy"]'
        assert browser.find_element("css selector", policy).get_attribute("content") == site.CONTENT_SECURITY_POLICY
    logged = [entry["message"] for entry in browser.get_log("browser")]
    assert any("jquery.flot.js" in line and "integrity" in line for line in logged), logged
    assert not any("Content Security Policy" in line for line in logged), logged


# --- Names that are markup ------------------------------------------------------------------------
#
# Every name the site shows comes from someone else: a git tag or branch (anyone who can push one),
# machine.json (the runner's description of itself), a benchmark's parameters, unit, pretty_name and
# code. Each name below is markup that sets its own flag on window if it ever runs as script; the
# site shows each as written and runs none. Git refuses spaces in a ref, so the tag's attributes are
# separated by "/" (its src quoted, or the "/" would be part of it); asv splits a branch's name as
# a shell would (quotes go), so the branch's is an <svg/onload=...>.

FLAG = "nf4kernel_hostile_"


def markup(source: str) -> str:
    return f"<img src=x onerror=self.{FLAG}{source}=1>"


HOSTILE_TAG = f"v1<img/src='x'/onerror=self.{FLAG}tag=1>"
HOSTILE_BRANCH = f"b<svg/onload=self.{FLAG}branch=1>"
HOSTILE_MACHINE = "gpu" + markup("machine")
HOSTILE_BENCHMARK = "gpu.Hostile.track_hostile"
PARAM_NAME = markup("param_name")
PARAM_VALUE = markup("param_value")
RESULT_PARAM = markup("result_param")  # a result's parameter beside machine and toolchain
UNIT = markup("unit")
PRETTY_NAME = markup("pretty_name")
CODE = "def track_hostile(self, which):\n    return " + markup("code")


def hostile_machine_json() -> dict:
    """The committed machine's fields, each value with markup after it, and a field named by markup."""
    info = json.loads((history.STORE / MACHINES[0] / "machine.json").read_text())
    info = {key: f"{value}{markup(key)}" for key, value in info.items() if key not in ("machine", "version")}
    info.update({"machine": HOSTILE_MACHINE, "version": 1, markup("field_name"): "a value"})
    return info


def add_hostile_results(results: Path) -> None:
    """The hostile machine measured every committed commit, as the committed machine did, and the
    hostile benchmark besides; the suite (benchmarks.json) gains that benchmark."""
    suite = json.loads((history.STORE / "benchmarks.json").read_text())
    suite[HOSTILE_BENCHMARK] = {
        "code": CODE,
        "name": HOSTILE_BENCHMARK,
        "param_names": [PARAM_NAME],
        "params": [[repr(PARAM_VALUE), "'plain'"]],
        "pretty_name": PRETTY_NAME,
        "type": "track",
        "unit": UNIT,
        "version": "1",
    }
    results.mkdir(parents=True)
    (results / "benchmarks.json").write_text(json.dumps(suite))  # history.seed leaves one that is there
    info = hostile_machine_json()
    machine_dir = results / HOSTILE_MACHINE
    machine_dir.mkdir()
    (machine_dir / "machine.json").write_text(json.dumps(info))
    for source in (history.STORE / MACHINES[0]).glob("*-existing-*.json"):
        result = json.loads(source.read_text())
        result["params"] = {"machine": HOSTILE_MACHINE, "toolchain": info["toolchain"], "python": "3.12"}
        result["params"][RESULT_PARAM] = "value" + markup("result_param_value")
        started, duration = result["results"]["gpu.KernelTime.track_kernel_time"][3:5]
        result["results"][HOSTILE_BENCHMARK] = [[1.0, 2.0], suite[HOSTILE_BENCHMARK]["params"], "1", started, duration]
        (machine_dir / source.name).write_text(json.dumps(result))


@pytest.fixture(scope="module")
def hostile_site_dir(tmp_path_factory) -> Path:
    """The committed history, a hostile tag on one of its commits, a hostile branch beside main,
    and a hostile machine's results, published as the harness publishes."""
    needs_a_browser()
    tmp = tmp_path_factory.mktemp("hostile-site")
    clone = clone_on_main(tmp / "clone")
    tagged = history.commits(history.STORE / MACHINES[0])[0]
    subprocess.run(["git", "tag", HOSTILE_TAG, tagged], cwd=clone, check=True)
    subprocess.run(["git", "branch", HOSTILE_BRANCH, "main"], cwd=clone, check=True)
    add_hostile_results(tmp / "results")
    return publish(tmp, clone, ["main", HOSTILE_BRANCH])


@pytest.fixture(scope="module")
def hostile_site_url(hostile_site_dir):
    with serve(hostile_site_dir) as url:
        yield url


def console(driver) -> list[dict]:
    """What the page logged since the last call (reading the log empties it)."""
    return driver.get_log("browser")


def assert_nothing_ran(driver, logged: list[dict]) -> None:
    """No flag set, no element made of a name (an <img> would be there even where the policy refused
    its handler), the policy on the page, and nothing logged: no script error, no failed load, no
    refusal by the policy of anything of the site's own."""
    ran = driver.execute_script(f"return Object.keys(window).filter(k => k.startsWith('{FLAG}'))")
    assert ran == [], f"markup in these names ran as script: {ran}"
    made = driver.execute_script(
        "return Array.from(document.querySelectorAll('img:not([src=\"swallow.png\"]), svg, [onerror], [onload]'))"
        ".map(e => e.outerHTML)"
    )
    assert made == [], f"markup in a name became elements: {made}"
    policy = driver.execute_script(
        "var m = document.querySelector('meta[http-equiv=\"Content-Security-Policy\"]'); return m && m.content"
    )
    assert policy == site.CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in policy and "object-src 'none'" in policy and "base-uri 'none'" in policy
    assert [entry["message"] for entry in logged if entry["level"] in ("SEVERE", "WARNING")] == []


def point_at(driver, element) -> dict:
    """Point the mouse at ``element`` until its tooltip shows: the tooltip's text and markup."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver import ActionChains
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("$('.tooltip').remove()")  # what the last one left, as asv does between pages
    ActionChains(driver).move_to_element(element).perform()
    shown = "var t = document.querySelector('.tooltip.in .tooltip-inner'); return t && [t.textContent, t.innerHTML]"
    try:
        text, html = WebDriverWait(driver, 10).until(lambda d: d.execute_script(shown))
    except TimeoutException:
        raise AssertionError(f"pointed at {element.get_attribute('outerHTML')[:200]}: no tooltip") from None
    ActionChains(driver).move_to_element(driver.find_element("id", "nav")).perform()
    return {"text": text, "html": html}


def point_at_a_point(driver) -> dict:
    """Point the mouse at the graph's first point until its tooltip shows (as point_at)."""
    from selenium.webdriver import ActionChains
    from selenium.webdriver.support.ui import WebDriverWait

    left, top = driver.execute_script(
        "var plot = $('#main-graph').data('plot'), s = plot.getData()[0];"
        "var d = s.data.filter(p => p[1] !== null)[0], o = plot.pointOffset({x: d[0], y: d[1]});"
        "var g = $('#main-graph'); return [o.left - g.width() / 2, o.top - g.height() / 2];"
    )
    graph = driver.find_element("id", "main-graph")
    ActionChains(driver).move_to_element_with_offset(graph, round(left), round(top)).perform()
    shown = "var t = document.querySelector('.tooltip.in .tooltip-inner'); return t && [t.textContent, t.innerHTML]"
    text, html = WebDriverWait(driver, 10).until(lambda d: d.execute_script(shown))
    ActionChains(driver).move_to_element(driver.find_element("id", "nav")).perform()
    return {"text": text, "html": html}


def texts(driver, selector: str) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent.trim())", selector
    )


def machine_buttons(driver, panel: str) -> dict:
    return {button.text: button for button in driver.find_elements("css selector", f"{panel} .btn")}


def test_names_are_text_on_the_graph_page(browser, hostile_site_url):
    """The graph of the hostile benchmark on the hostile machine: the tag over it, the panels and
    buttons (machine, branch, the result's and the benchmark's parameters), the legend, the tree,
    and the tooltips of the machines, of the tree (the code) and of a point (the unit)."""
    from urllib.parse import quote

    from selenium.webdriver.support.ui import WebDriverWait

    console(browser)  # what earlier tests left
    browser.get(f"{hostile_site_url}/index.html#{HOSTILE_BENCHMARK}?machine={quote(HOSTILE_MACHINE, safe='')}")
    wait_for(browser, "var p = window.jQuery && $('#main-graph').data('plot'); return p && p.getData().length")
    over_the_graph = texts(browser, "#main-graph > div")
    headings = texts(browser, "#graphdisplay-navigation .panel-heading")
    buttons = texts(browser, "#graphdisplay-navigation .btn")
    legend = texts(browser, "#main-graph .legendLabel")
    machines = machine_buttons(browser, "#graphdisplay-state-params")
    hostile_machine = point_at(browser, machines[HOSTILE_MACHINE])
    committed_machine = point_at(browser, machines[MACHINES[0]])
    for group in HOSTILE_BENCHMARK.split(".")[:-1]:  # open the tree down to the benchmark
        browser.execute_script(
            "Array.from(document.querySelectorAll('#graphdisplay-navigation label.nav-header'))"
            ".find(l => l.textContent.trim() === arguments[0] && l.offsetParent !== null).click()",
            group,
        )
    tree_link = browser.find_element("css selector", f'#graphdisplay-navigation a[href="#{HOSTILE_BENCHMARK}"]')
    opened = "return arguments[0].offsetParent !== null && !$(arguments[0]).parents().is(':animated')"
    WebDriverWait(browser, 10).until(lambda d: d.execute_script(opened, tree_link))
    tree_name, code = tree_link.get_attribute("textContent"), point_at(browser, tree_link)
    point = point_at_a_point(browser)

    assert_nothing_ran(browser, console(browser))
    assert HOSTILE_TAG in over_the_graph, over_the_graph
    assert PARAM_NAME in headings and RESULT_PARAM in headings, headings
    for name in (HOSTILE_MACHINE, HOSTILE_BRANCH, "main", PARAM_NAME, PARAM_VALUE, "plain"):
        assert name in buttons, (name, buttons)
    assert f"{PARAM_NAME}-{PARAM_VALUE}" in legend, legend  # asv escapes the legend itself
    assert tree_name == PRETTY_NAME and code["text"] == CODE
    assert f" {UNIT} @ " in point["text"], point  # "<value> <unit> @ <commit>"
    for key, value in hostile_machine_json().items():
        assert f"{key}: {value}" in hostile_machine["text"], (key, hostile_machine)
    # A harmless machine.json looks as it did: a line per field.
    committed = json.loads((history.STORE / MACHINES[0] / "machine.json").read_text())
    assert committed_machine["html"].split("<br>") == [f"{key}: {value}" for key, value in committed.items()]


def test_names_are_text_on_the_grid_the_list_and_the_regressions(browser, hostile_site_url):
    """The grid (a benchmark's pretty_name, its code's tooltip), the list (a machine's tooltip) and
    the regressions (the branches)."""
    console(browser)
    browser.get(f"{hostile_site_url}/index.html")
    wait_for(browser, "return window.jQuery && $('.benchmark-container').length")
    grid_names = texts(browser, ".benchmark-text")
    plot = browser.execute_script("return document.getElementById('summarygrid-' + arguments[0])", HOSTILE_BENCHMARK)
    browser.execute_script("arguments[0].scrollIntoView()", plot)
    code = point_at(browser, plot)
    logged = console(browser)

    browser.get(f"{hostile_site_url}/index.html#/summarylist")
    wait_for(browser, "return $('#summarylist-navigation .btn').length")
    machine = point_at(browser, machine_buttons(browser, "#summarylist-navigation")[HOSTILE_MACHINE])

    browser.get(f"{hostile_site_url}/index.html#/regressions")
    wait_for(browser, "return $('#regressions-body .dropdown-menu a').length")
    branches = texts(browser, "#regressions-body .dropdown-menu a")

    assert_nothing_ran(browser, logged + console(browser))
    assert PRETTY_NAME in grid_names and code["text"] == CODE, (grid_names, code)
    for key, value in hostile_machine_json().items():
        assert f"{key}: {value}" in machine["text"], (key, machine)
    assert branches == ["main", HOSTILE_BRANCH], branches
