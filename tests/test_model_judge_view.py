"""The HTML report of a judged run in headless Chromium (issue 27): the model judges' section,
and the case panel's rubric, prompt, raw response and human label side by side — escaped."""

from __future__ import annotations

import shutil

from conftest import copy_example, edit, write

from tests.test_view import served, wait  # noqa: F401 - served is a fixture

MARKUP = '<img src=x onerror="window.PWNED=1"><b>bold</b>'


def test_panel_shows_rubric_prompt_response_and_label_escaped(cli, tmp_path, served):
    from selenium.webdriver.common.by import By

    from tests.test_view import browser

    p = copy_example("judged_agent", tmp_path / "j")
    edit(p / "oloproof.yaml", "The reply is courteous", "<script>window.PWNED=2</script> The reply is courteous")
    write(p / "judges.py", f'''
def polite(prompt, *, case):
    return {{"verdict": "pass", "explanation": {MARKUP!r}}}
''')
    shutil.copy(p / "labels/polite-all.jsonl", p / "labels/polite.jsonl")
    assert cli("run", cwd=p).exit_code in (0, 1)
    r = cli("view", "latest", "--out", str(tmp_path / "report"), cwd=p)
    assert r.exit_code == 0, r.output
    driver = browser()
    try:
        url = served(tmp_path / "report")
        driver.get(url)
        judges = wait(driver, "#judges table")
        text = judges.text
        assert "polite" in text and "110 labels compared" in text and "agreement" in text
        driver.get(url + "#case=msg_008")  # an impatient customer: labelled fail, judged pass here
        wait(driver, "#panel .judgement-grid")
        panel = driver.find_element(By.ID, "panel")
        headers = [th.text for th in panel.find_elements(By.CSS_SELECTOR, ".judgement-grid th")]
        assert headers == ["rubric", "prompt", "judge's raw response", "human label"]
        cells = [td.text for td in panel.find_elements(By.CSS_SELECTOR, ".judgement-grid tbody td")]
        assert cells[0].startswith("<script>window.PWNED=2</script> The reply is courteous")
        assert "## Rubric" in cells[1] and "Read the manual" in cells[1]
        assert "<img src=x onerror=" in cells[2] and "<b>bold</b>" in cells[2]
        assert cells[3] == "fail"
        assert MARKUP in panel.find_element(By.CSS_SELECTOR, ".judgement-verdict").text
        assert driver.execute_script("return window.PWNED === undefined")
        assert panel.find_elements(By.CSS_SELECTOR, ".judgement b, .judgement img, .judgement script") == []
    finally:
        driver.quit()
