"""The HTML report in a real browser: headless Chromium (Debian's chromium and
chromium-driver, installed by .ci/run) driven through Selenium against the served page."""

import functools
import http.server
import json
import os
import shutil
import threading

import pytest

from tests.conftest import EXAMPLES, write

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        webdriver = None
    if webdriver is None or not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        if os.environ.get("OLOPROOF_REQUIRE_BROWSER"):
            pytest.fail("headless Chromium is required here (apt-get install chromium chromium-driver)")
        pytest.skip("no headless Chromium (apt-get install chromium chromium-driver) or selenium")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(DRIVER), options=options)


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


def test_report_filters_and_opens_a_case_panel(cli, tmp_path, served):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    project = tmp_path / "desk"
    shutil.copytree(EXAMPLES / "stateful_agent", project, ignore=shutil.ignore_patterns("__pycache__", ".oloproof"))
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
    driver = browser()
    try:
        driver.get(url)
        wait(driver, "#criteria table")
        rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#criteria tbody tr")]
        assert any(r.startswith("state_matches 93.2% [81.3%, 98.6%]") for r in rows), rows
        assert driver.find_element(By.ID, "decision").text == "FAIL"
        gate = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#gate tbody tr")]
        assert "injection same_state_under_injected FAIL lower_bound_below_threshold" in gate
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
                     for tr in panel.find_elements(By.XPATH, ".//h3[text()='Compared state paths']/following-sibling::table[1]//tbody/tr")]
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
    finally:
        driver.quit()


def test_export_jsonl(cli, tmp_path):
    project = tmp_path / "desk"
    shutil.copytree(EXAMPLES / "stateful_agent", project, ignore=shutil.ignore_patterns("__pycache__", ".oloproof"))
    cli("run", cwd=project)
    r = cli("export", "latest", "--format", "jsonl", "--out", "run.jsonl", cwd=project)
    assert r.exit_code == 0
    lines = [json.loads(l) for l in (project / "run.jsonl").read_text().splitlines()]
    records = {(l["record"], l["case_id"]) for l in lines}
    assert ("agent_trajectory/v1", "ord-001") in records and ("environment_state/v1", "ord-001") in records
    traj = next(l for l in lines if l["record"] == "agent_trajectory/v1" and l["case_id"] == "ord-001")
    assert [s["kind"] for s in traj["data"]["steps"]] == ["tool_call", "tool_result", "tool_call", "tool_result"]
    assert traj["data"]["steps"][0] == {"index": 1, "kind": "tool_call", "tool_name": "lookup_order",
                                        "arguments": {"order_id": "ord-001"}}
    assert traj["verdicts"]["state_matches"] == {"verdict": "pass"}
    state = next(l for l in lines if l["record"] == "environment_state/v1" and l["case_id"] == "ord-001")
    assert state["data"]["state"]["orders"]["ord-001"]["status"] == "refunded"
    assert len([l for l in lines if l["record"] == "agent_trajectory/v1"]) == 44


def test_view_refuses_a_non_empty_folder(cli, tmp_path):
    project = tmp_path / "desk"
    shutil.copytree(EXAMPLES / "support_agent", project, ignore=shutil.ignore_patterns("__pycache__", ".oloproof"))
    cli("run", cwd=project)
    write(tmp_path / "busy" / "x.txt", "mine")
    r = cli("view", "latest", "--out", str(tmp_path / "busy"), cwd=project)
    assert r.exit_code == 2 and "not empty" in r.output
    assert cli("view", "nope", "--out", str(tmp_path / "r2"), cwd=project).exit_code == 2


def test_view_serves_on_localhost(cli, tmp_path):
    import re
    import subprocess
    import sys
    import urllib.request

    project = tmp_path / "desk"
    shutil.copytree(EXAMPLES / "support_agent", project, ignore=shutil.ignore_patterns("__pycache__", ".oloproof"))
    cli("run", cwd=project)
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
