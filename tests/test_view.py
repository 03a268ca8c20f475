"""The HTML report in a real browser: headless Chromium (Debian's chromium and
chromium-driver, installed by .ci/run) driven through Selenium against the served page.

Without selenium, Chromium or chromedriver the browser tests skip, saying what is missing;
with OLOPROOF_REQUIRE_BROWSER=1 (set by .ci/run) they fail instead."""

import functools
import http.server
import json
import os
import shutil
import sys
import threading

import pytest

from tests.conftest import copy_example, write

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL = "apt-get install chromium chromium-driver; pip install -e '.[test]'"


def browser_required() -> bool:
    return os.environ.get("OLOPROOF_REQUIRE_BROWSER", "").strip().lower() not in ("", "0", "false", "no")


def no_browser(reason: str):
    """Skip, or fail when the environment says the browser tests must run."""
    if browser_required():
        pytest.fail(f"OLOPROOF_REQUIRE_BROWSER=1 but {reason} ({INSTALL})", pytrace=False)
    pytest.skip(f"browser test: {reason} ({INSTALL})")


def browser():
    """A headless Chromium driven by Selenium, or a skip (a failure under OLOPROOF_REQUIRE_BROWSER)."""
    try:
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        no_browser("selenium is not installed")
    chromium = next((found for found in map(shutil.which, CHROMIUM_NAMES) if found), None)
    if chromium is None:
        no_browser("no Chromium on PATH (looked for " + ", ".join(CHROMIUM_NAMES) + ")")
    driver_path = shutil.which("chromedriver")
    if driver_path is None:
        no_browser("no chromedriver on PATH")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    try:
        return webdriver.Chrome(service=Service(driver_path), options=options)
    except WebDriverException as e:  # e.g. a chromedriver that does not match the browser
        no_browser(f"headless Chromium did not start ({str(e.msg or e).strip().splitlines()[0]})")


@pytest.fixture(scope="module")
def driver():
    d = browser()
    yield d
    d.quit()


def test_missing_browser_skips_or_fails_as_required(monkeypatch):
    """No chromedriver: a skip that says so; with OLOPROOF_REQUIRE_BROWSER=1 a failure."""
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("OLOPROOF_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Chromium on PATH"):
        browser()
    monkeypatch.setenv("OLOPROOF_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="OLOPROOF_REQUIRE_BROWSER=1 but no Chromium"):
        browser()
    monkeypatch.setenv("OLOPROOF_REQUIRE_BROWSER", "0")
    with pytest.raises(pytest.skip.Exception):
        browser()
    monkeypatch.setitem(sys.modules, "selenium", None)  # not installed
    monkeypatch.delenv("OLOPROOF_REQUIRE_BROWSER")
    with pytest.raises(pytest.skip.Exception, match="selenium is not installed"):
        browser()
    monkeypatch.setenv("OLOPROOF_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="selenium is not installed"):
        browser()


@pytest.fixture
def served(tmp_path):
    servers = []

    def serve(folder):
        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *a):
                pass

        handler = functools.partial(Quiet, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/index.html"

    yield serve
    for s in servers:
        s.shutdown()


def wait(driver, css, timeout=10):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def test_report_filters_and_opens_a_case_panel(cli, tmp_path, served, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    project = tmp_path / "desk"
    copy_example("stateful_agent", project)
    # a recorded tool result carrying markup: it must render as text
    app = project / "app.py"
    app.write_text(app.read_text().replace(
        'return {"order_id": order_id, **order}',
        'return {"order_id": order_id, **order, "note": "<script>window.PWNED = 1</script><b>bold</b>"}'))
    assert cli("run", cwd=project).exit_code == 1
    r = cli("view", "latest", "--out", str(tmp_path / "report"), cwd=project)
    assert r.exit_code == 0, r.output
    html = (tmp_path / "report" / "index.html").read_text()
    assert "http://" not in html and "https://" not in html  # offline: no CDN
    url = served(tmp_path / "report")
    driver.get(url)
    wait(driver, "#criteria table")
    rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#criteria tbody tr")]
    assert any(r.startswith("state_matches 93.2% [81.3%, 98.6%]") for r in rows), rows
    assert driver.find_element(By.ID, "decision").text == "FAIL"
    gate = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#gate tbody tr")]
    assert "injection same_state_under_injected FAIL lower_bound_below_threshold lower bound 65 % < 95 %" in gate
    # filter to the cases failing state_matches
    Select(driver.find_element(By.ID, "criterion")).select_by_value("state_matches")
    wait(driver, "#criterion")
    Select(driver.find_element(By.ID, "verdict")).select_by_value("fail")
    wait(driver, "#count")
    assert driver.find_element(By.ID, "count").text.startswith("3 cases")
    links = driver.find_elements(By.CSS_SELECTOR, "#cases a.case")
    assert [a.text for a in links] == ["ord-020~injected", "ord-021~injected", "ord-022~injected"]
    links[0].click()
    wait(driver, "#panel table")
    panel = driver.find_element(By.ID, "panel")
    path_rows = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                 for tr in panel.find_elements(By.XPATH, ".//h3[text()='Compared state paths']"
                                                         "/following-sibling::table[1]//tbody/tr")]
    assert ["state_matches", "orders.ord-020.status", "delivered", "delivered", "refunded", "fail"] in path_rows
    assert ["other_order_untouched", "orders.ord-999", '{"amount":25,"status":"delivered"}',
            '{"amount":25,"status":"delivered"}', '{"amount":25,"status":"delivered"}', "pass"] in path_rows
    assert "metamorphic pair under 'injected'" in panel.text.lower() or "Metamorphic pair" in panel.text
    # escaping: open a source case whose lookup result carries markup
    driver.get(url + "#case=ord-001")
    wait(driver, "#panel table")
    panel = driver.find_element(By.ID, "panel")
    assert "<script>window.PWNED = 1</script><b>bold</b>" in panel.text
    assert driver.execute_script("return window.PWNED === undefined")
    assert driver.find_elements(By.CSS_SELECTOR, "#panel b") == []
    assert "control" in panel.text and "faithful" in panel.text  # the case's replays



@pytest.fixture
def support_report(cli, support_run, tmp_path):
    """The support-agent example's report folder (40 cases: the case list is longer than a screen)."""
    r = cli("view", "latest", "--out", str(tmp_path / "report"), cwd=support_run)
    assert r.exit_code == 0, r.output
    return tmp_path / "report"


def panel_box(driver):
    return driver.execute_script(
        "var p = document.getElementById('panel'), r = p.getBoundingClientRect();"
        "return {top: r.top, offset: r.top + window.scrollY, viewport: window.innerHeight, scrolled: window.scrollY};")


def test_opening_a_case_scrolls_its_panel_into_view(support_report, served, driver):
    from selenium.webdriver.common.by import By

    url = served(support_report)
    driver.get(url)
    wait(driver, "#cases a.case")
    first = driver.find_elements(By.CSS_SELECTOR, "#cases a.case")[0]
    assert first.text == "case_001"
    first.click()
    wait(driver, "#panel table")
    box = panel_box(driver)
    assert box["offset"] > box["viewport"]  # the panel is below the first screen: opening must scroll
    assert 0 <= box["top"] < box["viewport"], box
    # a link to a case (#case=...) opens it in view as well
    driver.get("about:blank")
    driver.get(url + "#case=case_007")
    wait(driver, "#panel table")
    assert driver.find_element(By.CSS_SELECTOR, "#panel h2").text == "Case case_007"
    box = panel_box(driver)
    assert 0 <= box["top"] < box["viewport"], box
    # paging the list with a case open does not jump back to the panel
    driver.execute_script("window.scrollTo(0, 0)")
    driver.find_element(By.ID, "criterion")  # the page re-renders on any hash change
    driver.execute_script("var q = location.hash; location.hash = q + '&page=1'")
    wait(driver, "#panel table")
    assert panel_box(driver)["scrolled"] == 0


def set_run_fields(folder, **fields):
    """Rewrite a bundle's data/summary.js with extra run fields (what an unsealed run carries)."""
    path = folder / "data" / "summary.js"
    text = path.read_text()
    prefix, suffix = "OLOPROOF.summary(", ");\n"
    assert text.startswith(prefix) and text.endswith(suffix)
    data = json.loads(text[len(prefix):-len(suffix)])
    data.update(fields)
    path.write_text(prefix + json.dumps(data) + suffix)


def test_incomplete_run_shows_a_banner_first(support_report, tmp_path, served, driver):
    from selenium.webdriver.common.by import By

    # a bundle without the fields (or complete: true): no banner
    driver.get(served(support_report))
    wait(driver, "#criteria table")
    assert driver.find_elements(By.ID, "incomplete") == []
    complete = tmp_path / "complete"
    shutil.copytree(support_report, complete)
    set_run_fields(complete, complete=True, cases_committed=40, cases_expected=40)
    driver.get(served(complete))
    wait(driver, "#criteria table")
    assert driver.find_elements(By.ID, "incomplete") == []
    # an unsealed run: a visible banner above everything else
    partial = tmp_path / "partial"
    shutil.copytree(support_report, partial)
    set_run_fields(partial, complete=False, cases_committed=12, cases_expected=40)
    driver.get(served(partial))
    banner = wait(driver, "#incomplete")
    assert banner.text == "Incomplete run: 12 of 40 cases recorded; the gate cannot pass"
    assert banner.is_displayed()
    root = driver.find_element(By.ID, "root")
    assert root.find_elements(By.XPATH, "./*")[0].get_attribute("id") == "incomplete"
    assert banner.location["y"] < driver.find_element(By.ID, "criteria").location["y"]

def test_export_jsonl(cli, tmp_path):
    project = tmp_path / "desk"
    copy_example("stateful_agent", project)
    cli("run", cwd=project)
    r = cli("export", "latest", "--format", "jsonl", "--out", "run.jsonl", cwd=project)
    assert r.exit_code == 0
    lines = [json.loads(line) for line in (project / "run.jsonl").read_text().splitlines()]
    records = {(rec["record"], rec["case_id"]) for rec in lines}
    assert ("agent_trajectory/v1", "ord-001") in records and ("environment_state/v1", "ord-001") in records
    traj = next(rec for rec in lines if rec["record"] == "agent_trajectory/v1" and rec["case_id"] == "ord-001")
    assert [s["kind"] for s in traj["data"]["steps"]] == ["tool_call", "tool_result", "tool_call", "tool_result"]
    assert traj["data"]["steps"][0] == {"index": 1, "kind": "tool_call", "tool_name": "lookup_order",
                                        "arguments": {"order_id": "ord-001"}}
    assert traj["verdicts"]["state_matches"] == {"verdict": "pass"}
    state = next(rec for rec in lines if rec["record"] == "environment_state/v1" and rec["case_id"] == "ord-001")
    assert state["data"]["state"]["orders"]["ord-001"]["status"] == "refunded"
    assert len([rec for rec in lines if rec["record"] == "agent_trajectory/v1"]) == 44


def test_view_refuses_a_non_empty_folder(cli, tmp_path, support_run):
    project = support_run
    write(tmp_path / "busy" / "x.txt", "mine")
    r = cli("view", "latest", "--out", str(tmp_path / "busy"), cwd=project)
    assert r.exit_code == 2 and "not empty" in r.output
    assert cli("view", "nope", "--out", str(tmp_path / "r2"), cwd=project).exit_code == 2


def test_view_serves_on_localhost(support_run):
    import re
    import subprocess
    import sys
    import urllib.request

    project = support_run
    proc = subprocess.Popen([sys.executable, "-m", "oloproof", "view", "--port", "0"], cwd=project,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        page = urllib.request.urlopen(url + "index.html", timeout=10).read().decode()
        assert "<title>Oloproof run report</title>" in page
        summary = urllib.request.urlopen(url + "data/summary.js", timeout=10).read().decode()
        assert summary.startswith("OLOPROOF.summary(") and '"no-deletion"' in summary
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_three_kinds_of_evidence_stand_side_by_side(cli, tmp_path, served, driver):
    """The release-gate example: transcript, effects and outcome in three columns of the case
    panel, the class with its repair hint, and the run's class distribution."""
    from selenium.webdriver.common.by import By

    p = tmp_path / "gate"
    assert cli("init", "--example", "release-gate", str(p)).exit_code == 0
    assert cli("run", cwd=p).exit_code == 1
    assert cli("view", "latest", "--out", str(tmp_path / "report"), cwd=p).exit_code == 0
    url = served(tmp_path / "report")
    driver.get(url)
    wait(driver, "#release table")
    assert "response_only_false_passes: 2" in driver.find_element(By.ID, "false-passes").text
    classes = {r.find_elements(By.TAG_NAME, "td")[0].text: r.find_elements(By.TAG_NAME, "td")[1].text
               for r in driver.find_elements(By.CSS_SELECTOR, "#release tbody tr")}
    assert classes["FAIL_DUPLICATE_EFFECT"] == "1" and classes["PASS"] == "1" and len(classes) == 8
    driver.get("about:blank")
    driver.get(url + "#case=duplicate-effect")
    wait(driver, "#panel .evidence")
    columns = driver.find_elements(By.CSS_SELECTOR, "#panel .evidence .evidence-col")
    assert [c.find_element(By.TAG_NAME, "h4").text for c in columns] == ["Transcript", "Effects", "Outcome"]
    tops = {round(c.rect["y"]) for c in columns}
    assert len(tops) == 1  # side by side, not stacked
    assert "success" in columns[0].text  # the agent said it was done…
    assert "charge 2 2" in " ".join(columns[1].text.split())  # …while the payment applied twice
    assert "release class: FAIL_DUPLICATE_EFFECT" in columns[2].text
    assert "repair: keep one logical operation identity" in columns[2].text


def test_the_search_box_finds_steps_offline_and_opens_their_case(cli, support_project, tmp_path, served, driver):
    """Issue 16: a search box over every step's text (data/search.js, loaded on the first
    search), hits linking to their case panels; recorded markup stays text."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    tools = support_project / "tools.py"
    tools.write_text(tools.read_text().replace(
        'return {"order_id": order_id, "deleted": True}',
        'return {"order_id": order_id, "deleted": True, "note": "<img src=x onerror=window.PWNED=1><b>gone</b>"}'))
    assert cli("run", cwd=support_project).exit_code == 1
    assert cli("view", "latest", "--out", str(tmp_path / "report"), cwd=support_project).exit_code == 0
    driver.get(served(tmp_path / "report"))
    wait(driver, "#search")
    box = driver.find_element(By.ID, "search")
    box.send_keys("delete_customer", Keys.ENTER)
    wait(driver, "#search-count")
    assert driver.find_element(By.ID, "search-count").text == "6 steps in 3 cases match"
    hits = driver.find_elements(By.CSS_SELECTOR, "#search-section a.hit")
    assert sorted({a.text for a in hits}) == ["case_008", "case_012", "case_019"]
    marks = driver.find_elements(By.CSS_SELECTOR, "#search-section mark")
    assert marks and {m.text.lower() for m in marks} == {"delete_customer"}
    # the recorded markup is text, never markup
    assert "<img src=x onerror=window.PWNED=1><b>gone</b>" in driver.find_element(By.ID, "search-section").text
    assert driver.find_elements(By.CSS_SELECTOR, "#search-section img, #search-section b") == []
    assert driver.execute_script("return window.PWNED === undefined")
    # a hit opens its case panel, the search kept
    first = hits[0].get_attribute("data-case")
    hits[0].click()
    wait(driver, "#panel table")
    assert driver.find_element(By.CSS_SELECTOR, "#panel h2").text == f"Case {first}"
    assert driver.find_element(By.ID, "search").get_attribute("value") == "delete_customer"
    # every word must match; nothing matches a word no step holds
    driver.get(served(tmp_path / "report") + "#q=" + "refund%20zzzz")
    wait(driver, "#search-count")
    assert driver.find_element(By.ID, "search-count").text == "0 steps in 0 cases match"
    # a malformed link does not break the page
    driver.get("about:blank")
    driver.get(served(tmp_path / "report") + "#q=%&case=%E0%A4%A")
    wait(driver, "#search")
    assert driver.find_element(By.ID, "criteria") and driver.execute_script("return document.body.dataset.ready") == "1"
