"""`oloproof view CANDIDATE --compare BASE`: the HTML comparison of two stored runs — the page
lists exactly the flipped cases of `oloproof diff --json`, each opening the base and candidate
case panels side by side; recorded text stays text; bad input exits 2 with nothing written.

The browser tests drive headless Chromium as tests/test_view.py does (skipped without it,
failing under OLOPROOF_REQUIRE_BROWSER=1)."""

from __future__ import annotations

import functools
import http.server
import json
import socket
import sys
import threading
import urllib.parse

import pytest
from click.testing import CliRunner

from tests.conftest import copy_example
from tests.test_diff import change_agent, set_version
from tests.test_view import browser, wait

MOVES = ("regressions", "fixes", "to_missing", "from_missing")


def invoke(cwd, *args):
    from oloproof.cli.main import cli as group

    with pytest.MonkeyPatch.context() as m:
        m.chdir(cwd)
        return CliRunner().invoke(group, list(args), catch_exceptions=False)


def isolated(build):
    """Run ``build`` (which imports a project's own ``app``) and forget the project's modules
    after it, as tests/conftest.py's autouse fixture does for each test."""
    modules, path = set(sys.modules), list(sys.path)
    try:
        return build()
    finally:
        for name in set(sys.modules) - modules:
            if not name.startswith("oloproof"):
                file = str(getattr(sys.modules.get(name), "__file__", "") or "")
                if file and not file.startswith((sys.prefix, sys.base_prefix, sys.exec_prefix)):
                    del sys.modules[name]
        sys.path[:] = path


def two_runs(folder, hostile=False):
    """The support-agent example run as v1, then changed (tests/test_diff.py's change) and run as
    v2; with ``hostile``, a case id, an output, tool arguments, metadata and a criterion name
    that carry markup."""
    p = folder / "support"
    copy_example("support_agent", p)
    set_version(p, "v1")
    if hostile:
        make_hostile(p)

    def build():
        assert invoke(p, "run").exit_code in (0, 1)
        set_version(p, "v2")
        change_agent(p)
        assert invoke(p, "run").exit_code in (0, 1)

    isolated(build)
    return p


def load_diff(project, candidate="version:v2"):
    r = invoke(project, "diff", "version:v1", candidate, "--json", "d.json")
    assert r.exit_code == 0, r.output
    return json.loads((project / "d.json").read_text())


def js_call(path, name):
    """The arguments of a data file's one call ``OLOPROOF.name(...)``."""
    text = path.read_text()
    prefix, suffix = f"OLOPROOF.{name}(", ");\n"
    assert text.startswith(prefix) and text.endswith(suffix), text[:80]
    return json.loads("[" + text[len(prefix):-len(suffix)] + "]")


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """Two runs of the changed support agent, their `diff --json` and the comparison bundle."""
    folder = tmp_path_factory.mktemp("compare")
    project = two_runs(folder)
    r = invoke(project, "view", "version:v2", "--compare", "version:v1", "--out", str(folder / "report"))
    assert r.exit_code == 0, r.output
    assert "wrote the comparison of base" in r.output
    return project, load_diff(project), folder / "report"


@pytest.fixture(scope="module")
def driver():
    d = browser()
    yield d
    d.quit()


@pytest.fixture(scope="module")
def served():
    servers = []

    def serve(folder):
        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *a):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/index.html"

    yield serve
    for s in servers:
        s.shutdown()


def flipped_on_page(driver):
    from selenium.webdriver.common.by import By

    return [(g.get_attribute("data-criterion"), g.get_attribute("data-move"),
             [a.text for a in g.find_elements(By.CSS_SELECTOR, "a.case")])
            for g in driver.find_elements(By.CSS_SELECTOR, "#flipped .group")]


def flipped_in_json(d):
    return {(row["criterion"], move): row[move] for row in d["criteria"] for move in MOVES if row[move]}


def verdict_of(driver, role, criterion):
    from selenium.webdriver.common.by import By

    panel = driver.find_element(By.ID, f"panel-{role}")
    for tr in panel.find_elements(By.CSS_SELECTOR, "tr[data-criterion]"):
        if tr.get_attribute("data-criterion") == criterion:
            return tr.find_elements(By.TAG_NAME, "td")[1].text
    raise AssertionError(f"no verdict row for {criterion!r} in the {role} panel")


def until(driver, check, timeout=10):
    """Wait until ``check()`` holds (the page re-renders on a hash change, asynchronously)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    def holds(_):
        try:
            return check()
        except (NoSuchElementException, StaleElementReferenceException):
            return False

    WebDriverWait(driver, timeout).until(holds)


def text_of(driver, css):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css).text


def pair_shown(driver, case_id):
    until(driver, lambda: text_of(driver, "#panel-base h2") == f"Case {case_id}"
          and text_of(driver, "#panel-candidate h2") == f"Case {case_id}")


def open_flipped(driver, criterion, move, case_id):
    from selenium.webdriver.common.by import By

    for g in driver.find_elements(By.CSS_SELECTOR, "#flipped .group"):
        if (g.get_attribute("data-criterion"), g.get_attribute("data-move")) == (criterion, move):
            link = next(a for a in g.find_elements(By.CSS_SELECTOR, "a.case") if a.text == case_id)
            link.click()
            pair_shown(driver, case_id)
            return
    raise AssertionError((criterion, move, case_id))


def side_by_side(driver, case_id):
    from selenium.webdriver.common.by import By

    base, cand = driver.find_element(By.ID, "panel-base"), driver.find_element(By.ID, "panel-candidate")
    assert base.find_element(By.TAG_NAME, "h2").text == f"Case {case_id}"
    assert cand.find_element(By.TAG_NAME, "h2").text == f"Case {case_id}"
    # the base panel on the left, the candidate's on the right, level with each other
    assert base.location["x"] + base.size["width"] <= cand.location["x"]
    assert abs(base.location["y"] - cand.location["y"]) < 5
    box = driver.execute_script(
        "var r = document.getElementById('pair').getBoundingClientRect(); return [r.top, window.innerHeight];")
    assert -2 <= box[0] < box[1] / 2, box  # scrolled into view (sub-pixel rounding aside)


def test_the_bundle_holds_both_runs_and_the_diff_document(compared):
    project, d, report = compared
    page, data = report / "index.html", report / "data"
    html = page.read_text()
    assert '<body data-mode="compare">' in html and "<title>Oloproof comparison report</title>" in html
    assert "http://" not in html and "https://" not in html  # offline: no CDN
    document, extra = js_call(data / "diff.js", "diff")
    assert document == d  # exactly `oloproof diff --json`'s document
    # every flipped case, grouped by move and criterion, every regression first
    grouped = {(g["criterion"], g["move"]): g["cases"] for g in extra["flipped"]}
    assert grouped == flipped_in_json(d)
    moves = [g["move"] for g in extra["flipped"]]
    assert moves == sorted(moves, key=("regressions", "to_missing", "fixes", "from_missing").index)
    assert moves[0] == "regressions"
    for role in ("base", "candidate"):
        summary, tag = js_call(data / role / "summary.js", "summary")
        assert tag == role and summary["run_id"] == d[role]["run_id"]
        assert summary["system"] == d[role]["system"] and summary["complete"] is True
        index, tag = js_call(data / role / "index.js", "index")
        assert tag == role and len(index["cases"]) == 40 and index["chunk_size"] == 100
        n, cases, tag = js_call(data / role / "cases-0.js", "chunk")
        assert (n, tag, len(cases)) == (0, role, 40)
    # the panels are each run's own: the verdicts differ where the diff says they flipped
    base = {c["case_id"]: c for c in js_call(data / "base" / "cases-0.js", "chunk")[1]}
    cand = {c["case_id"]: c for c in js_call(data / "candidate" / "cases-0.js", "chunk")[1]}
    for row in d["criteria"]:
        for case_id in row["regressions"]:
            assert base[case_id]["verdicts"][row["criterion"]][0] == "pass"
            assert cand[case_id]["verdicts"][row["criterion"]][0] == "fail"
    # the single-run bundle is unchanged: no mode, its data at the top of data/
    single = report.parent / "single"
    assert invoke(project, "view", d["base"]["run_id"], "--out", str(single)).exit_code == 0
    assert "<body><header>" in (single / "index.html").read_text()
    summary, = js_call(single / "data" / "summary.js", "summary")
    assert summary["run_id"] == d["base"]["run_id"]
    assert not (single / "data" / "diff.js").exists() and not (single / "data" / "base").exists()


@pytest.mark.slow
def test_comparison_page_lists_the_flipped_cases_and_opens_both_panels(compared, served, driver):
    from selenium.webdriver.common.by import By

    _, d, report = compared
    url = served(report)
    driver.get(url)
    wait(driver, "#flipped")
    runs = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr")]
    assert [r[:4] for r in runs] == [[role, d[role]["run_id"], "support-agent", v]
                                     for role, v in (("base", "v1"), ("candidate", "v2"))]
    assert all(r[4].startswith("complete") for r in runs)
    pairing = [tr.find_elements(By.TAG_NAME, "td")[1].text
               for tr in driver.find_elements(By.CSS_SELECTOR, "#pairing tbody tr")]
    assert pairing == ["40", "0", "0", "0"]
    # the criteria table: both rates, the flips and p for every criterion of the diff
    table = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, "#compare-criteria tbody tr"):
        cells = [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        table[cells[0]] = cells
    assert set(table) == {row["criterion"] for row in d["criteria"]}
    for row in d["criteria"]:
        cells = table[row["criterion"]]
        assert cells[1] == f"{row['base']['rate'] * 100:.1f}%" and cells[3] == f"{row['candidate']['rate'] * 100:.1f}%"
        assert cells[2].startswith("[") and cells[4].startswith("[")
        assert cells[5:9] == [str(len(row[m])) for m in MOVES]
        assert float(cells[9]) == pytest.approx(row["p_value"], rel=5e-3) and cells[10] == "mcnemar_exact"
    first = driver.find_elements(By.CSS_SELECTOR, "#compare-criteria tbody tr td:first-child")[0].text
    assert first == "answer_correct"  # the criterion with regressions first
    # the flipped cases: exactly those of `oloproof diff --json`, the regressions first
    groups = flipped_on_page(driver)
    assert {(c, m): ids for c, m, ids in groups} == flipped_in_json(d)
    assert len(groups) == len(flipped_in_json(d))
    moves = [m for _, m, _ in groups]
    assert moves[0] == "regressions" and "regressions" not in moves[moves.index("fixes"):]
    # a regression: the base panel passes it, the candidate's fails it, side by side, in view
    answer = next(r for r in d["criteria"] if r["criterion"] == "answer_correct")
    regressed = answer["regressions"][-1]
    open_flipped(driver, "answer_correct", "regressions", regressed)
    side_by_side(driver, regressed)
    assert verdict_of(driver, "base", "answer_correct") == "pass"
    assert verdict_of(driver, "candidate", "answer_correct") == "fail"
    assert "answer_correct: pass → fail" in driver.find_element(By.ID, "pair-moves").text
    assert "#case=" + regressed in driver.current_url
    # each side is that run's recorded case: the outputs differ as the agent changed
    base_text = driver.find_element(By.ID, "panel-base").text
    cand_text = driver.find_element(By.ID, "panel-candidate").text
    assert base_text != cand_text
    # a fix: the other way round
    fixes = next(r for r in d["criteria"] if r["fixes"])
    driver.execute_script("window.scrollTo(0, 0)")
    open_flipped(driver, fixes["criterion"], "fixes", fixes["fixes"][0])
    side_by_side(driver, fixes["fixes"][0])
    assert verdict_of(driver, "base", fixes["criterion"]) == "fail"
    assert verdict_of(driver, "candidate", fixes["criterion"]) == "pass"
    # a link straight to a case opens it side by side as well
    driver.get("about:blank")
    driver.get(url + "#case=" + regressed)
    pair_shown(driver, regressed)
    side_by_side(driver, regressed)
    # each run's ordinary report is a tab away
    driver.find_element(By.ID, "tab-base").click()
    until(driver, lambda: text_of(driver, "#title").startswith(f"base run {d['base']['run_id']}"))
    wait(driver, "#criteria table")
    assert driver.find_element(By.ID, "decision").text in ("PASS", "FAIL")
    links = driver.find_elements(By.CSS_SELECTOR, "#cases a.case")
    assert len(links) == 40
    next(a for a in links if a.text == regressed).click()
    wait(driver, "#panel table")
    assert "view=base" in driver.current_url
    rows = {tr.get_attribute("data-criterion"): tr.find_elements(By.TAG_NAME, "td")[1].text
            for tr in driver.find_elements(By.CSS_SELECTOR, "#panel tr[data-criterion]")}
    assert rows["answer_correct"] == "pass"
    driver.find_element(By.ID, "tab-candidate").click()
    until(driver, lambda: text_of(driver, "#title").startswith(f"candidate run {d['candidate']['run_id']}"))
    assert driver.find_elements(By.ID, "panel") == []
    driver.get(url + "#view=candidate&case=" + regressed)
    wait(driver, "#panel table")
    rows = {tr.get_attribute("data-criterion"): tr.find_elements(By.TAG_NAME, "td")[1].text
            for tr in driver.find_elements(By.CSS_SELECTOR, "#panel tr[data-criterion]")}
    assert rows["answer_correct"] == "fail"
    driver.find_element(By.ID, "tab-compare").click()
    wait(driver, "#flipped .group")
    assert driver.find_elements(By.ID, "pair") == []


HOSTILE_ID = "<img src=x onerror=alert(1)>"
HOSTILE_TEXT = "</script><script>window.PWNED = 1</script><img src=x onerror=\"window.PWNED = 2\"><b>bold</b>"
HOSTILE_CRITERION = "answer</script><img src=x onerror=alert(3)>"


def make_hostile(p):
    """A case whose id, order id (the tool arguments and results), metadata and output carry
    markup, and a criterion named with markup; the change of tests/test_diff.py flips it."""
    lines = (p / "cases.jsonl").read_text().splitlines()
    cases = [json.loads(line) for line in lines]
    target = next(c for c in cases if c["input"]["behaviour"] == "denied")  # its answer regresses in v2
    target["id"] = HOSTILE_ID
    target["input"]["order_id"] = "ord-1" + HOSTILE_TEXT
    target["metadata"]["surface"] = HOSTILE_TEXT
    (p / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    app = p / "app.py"
    app.write_text(app.read_text().replace('return {"answer": answer}',
                                           'return {"answer": answer + " " + ' + repr(HOSTILE_TEXT) + "}"))
    cfg = p / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("criterion: answer_correct", "criterion: " + json.dumps(HOSTILE_CRITERION)))


def no_markup_ran(driver):
    from selenium.webdriver.common.by import By

    # an alert would be open (and fail this call); no recorded text became an element
    assert driver.execute_script("return window.PWNED === undefined")
    assert driver.find_elements(By.CSS_SELECTOR, "#root img, #root b, #root script") == []


@pytest.mark.slow
def test_recorded_text_stays_text_on_the_comparison_page(tmp_path, served, driver):
    from selenium.webdriver.common.by import By

    project = two_runs(tmp_path, hostile=True)
    d = load_diff(project)
    row = next(r for r in d["criteria"] if r["criterion"] == HOSTILE_CRITERION)
    assert HOSTILE_ID in row["regressions"]  # the hostile case flipped
    r = invoke(project, "view", "latest", "--compare", "version:v1", "--out", str(tmp_path / "report"))
    assert r.exit_code == 0, r.output
    url = served(tmp_path / "report")
    driver.get(url)
    wait(driver, "#flipped .group")
    groups = flipped_on_page(driver)
    assert {(c, m): ids for c, m, ids in groups} == flipped_in_json(d)
    assert (HOSTILE_CRITERION, "regressions") in {(c, m) for c, m, _ in groups}
    table = driver.find_element(By.ID, "compare-criteria").text
    assert HOSTILE_CRITERION in table
    assert HOSTILE_TEXT in driver.find_element(By.ID, "compare-slices").text  # a metadata slice label
    no_markup_ran(driver)
    open_flipped(driver, HOSTILE_CRITERION, "regressions", HOSTILE_ID)
    side_by_side(driver, HOSTILE_ID)
    for role, answer in (("base", "denied"), ("candidate", "refunded")):
        text = driver.find_element(By.ID, f"panel-{role}").text
        # the output and the tool arguments and results, as the JSON text they are
        assert json.dumps({"answer": f"{answer} {HOSTILE_TEXT}"}, separators=(",", ":")) in text
        assert json.dumps({"order_id": "ord-1" + HOSTILE_TEXT}, separators=(",", ":")) in text
    assert verdict_of(driver, "base", HOSTILE_CRITERION) == "pass"
    assert verdict_of(driver, "candidate", HOSTILE_CRITERION) == "fail"
    assert urllib.parse.unquote(driver.current_url.split("#case=", 1)[1]) == HOSTILE_ID
    no_markup_ran(driver)
    # each run's own report, with the hostile case open
    driver.get("about:blank")
    driver.get(url + "#view=candidate&case=" + urllib.parse.quote(HOSTILE_ID, safe=""))
    wait(driver, "#panel table")
    assert driver.find_element(By.CSS_SELECTOR, "#panel h2").text == "Case " + HOSTILE_ID
    assert HOSTILE_ID in [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#cases a.case")]
    no_markup_ran(driver)


@pytest.mark.slow
def test_an_incomplete_candidate_and_cases_on_one_side(tmp_path, served, driver):
    """A candidate killed mid-run (unsealed) whose first case asks another question: the
    banner says so, the cases it never recorded open beside "no case" and the changed case
    opens on both sides, never as a flip."""
    import subprocess

    from selenium.webdriver.common.by import By

    p = tmp_path / "support"
    copy_example("support_agent", p)
    set_version(p, "v1")

    def oloproof(*args):
        return subprocess.run([sys.executable, "-m", "oloproof", *args], cwd=p, capture_output=True, text=True,
                              timeout=120)

    assert oloproof("run").returncode == 1
    set_version(p, "v2")
    app = p / "app.py"
    app.write_text(app.read_text().replace("def run(case):\n", "def run(case):\n    if case.id == 'case_031':\n"
                                           "        import os, signal\n"
                                           "        os.kill(os.getpid(), signal.SIGKILL)  # killed mid-run: no seal\n"))
    lines = (p / "cases.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["input"]["order_id"] = "ord-098"  # same id, another question
    (p / "cases.jsonl").write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    assert oloproof("run").returncode == -9
    d = load_diff(p, "latest")  # an unfinished run is no version:v2
    assert d["candidate"]["complete"] is False and d["cases"]["fingerprint_changed"] == ["case_001"]
    missing = d["cases"]["only_base"]
    assert missing and "case_031" in missing
    r = invoke(p, "view", "latest", "--compare", "version:v1", "--out", str(tmp_path / "report"))
    assert r.exit_code == 0, r.output
    url = served(tmp_path / "report")
    driver.get(url)
    banner = wait(driver, "#incomplete-candidate")
    assert banner.text == (f"Incomplete candidate run {d['candidate']['run_id']}: {40 - len(missing)} of 40 cases "
                           "recorded; its unrecorded cases count as missing")
    assert driver.find_elements(By.ID, "incomplete-base") == []
    groups = flipped_on_page(driver)
    assert {(c, m): ids for c, m, ids in groups} == flipped_in_json(d)
    assert all("case_001" not in ids for _, _, ids in groups)
    # a case the candidate never recorded: its base panel beside "no case"
    links = {a.text: a for a in driver.find_elements(By.CSS_SELECTOR, "#pairing a.case")}
    assert set(links) == {"case_001", *missing}
    links["case_031"].click()
    until(driver, lambda: text_of(driver, "#panel-base h2") == "Case case_031")
    assert text_of(driver, "#panel-candidate") == "no case case_031 in the candidate run"
    assert "only in the base run" in text_of(driver, "#pair-moves")
    # the changed case: both recorded questions side by side
    driver.execute_script("window.scrollTo(0, 0)")
    driver.find_element(By.CSS_SELECTOR, "#pairing a.case[data-case='case_001']").click()
    pair_shown(driver, "case_001")
    assert '"order_id":"ord-002"' in text_of(driver, "#panel-base")
    assert '"order_id":"ord-098"' in text_of(driver, "#panel-candidate")
    assert "fingerprint changed" in text_of(driver, "#pair-moves")
    # the candidate's own report opens with its own banner
    driver.find_element(By.ID, "tab-candidate").click()
    banner = wait(driver, "#incomplete")
    assert banner.text == f"Incomplete run: {40 - len(missing)} of 40 cases recorded; the gate cannot pass"


def test_bad_input_exits_2_and_writes_nothing(compared, tmp_path, monkeypatch):
    import tempfile

    project, d, _ = compared
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where a served report's folder would go

    def refused(*args, words):
        r = invoke(project, "view", *args)
        assert r.exit_code == 2, (args, r.output)
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], (args, r.output)
        assert list(scratch.iterdir()) == []  # no temporary report left behind

    out = tmp_path / "out"
    for base, candidate, words in (("pin:nope", "latest", "no run is pinned as 'nope'"),
                                   ("version:v9", "latest", "no finished run of version 'v9'"),
                                   ("20990101T000000-abcdef", "latest", "no run"),
                                   ("version:v1", "nope", "no run"),
                                   ("version:v2", "latest", "are the same run"),
                                   (d["base"]["run_id"], "version:v1", "are the same run")):
        refused(candidate, "--compare", base, "--out", str(out), words=words)
        assert not out.exists()
        refused(candidate, "--compare", base, "--port", "0", words=words)  # served: refused before serving
    # the output folder, checked as `view` checks it
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x.txt").write_text("mine")
    refused("latest", "--compare", "version:v1", "--out", str(busy), words="not empty")
    assert [f.name for f in busy.iterdir()] == ["x.txt"]
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    refused("latest", "--compare", "version:v1", "--out", str(a_file), words="is a file")
    assert a_file.read_text() == "mine"
    refused("latest", "--compare", "version:v1", "--out", str(tmp_path / "missing" / "report"), words="does not exist")
    assert not (tmp_path / "missing").exists()
    # the port, checked before anything is read
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused("latest", "--compare", "version:v1", "--port", str(port), words="already in use")
    refused("latest", "--compare", "version:v1", "--port", "70000", words="not a port number")


def test_the_comparison_is_served_on_localhost(compared):
    import re
    import subprocess
    import urllib.request

    project, d, _ = compared
    proc = subprocess.Popen([sys.executable, "-m", "oloproof", "view", "version:v2", "--compare", "version:v1",
                             "--port", "0"], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        page = urllib.request.urlopen(url + "index.html", timeout=10).read().decode()
        assert "<title>Oloproof comparison report</title>" in page
        diff = urllib.request.urlopen(url + "data/diff.js", timeout=10).read().decode()
        assert diff.startswith("OLOPROOF.diff(") and d["candidate"]["run_id"] in diff
        base = urllib.request.urlopen(url + "data/base/summary.js", timeout=10).read().decode()
        assert d["base"]["run_id"] in base and base.rstrip().endswith('"base");')
    finally:
        proc.terminate()
        proc.wait(timeout=10)
