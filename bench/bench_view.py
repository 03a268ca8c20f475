"""The HTML report of a 10,000-case run (issue #7): how long the bundle takes to write, its
size, and the first paint in headless Chromium (the page's own measure: from script start to
the criteria, gate and first page of cases on screen), then opening a case panel.

    python bench/bench_view.py [--cases 10000]
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_run import ENV, make_suite, oloproof_cmd


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=10_000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="oloproof-bench-view-"))
    try:
        suite = make_suite(tmp / "suite", args.cases)
        subprocess.run(oloproof_cmd("run", "--durability", "normal"), cwd=suite, env=ENV, capture_output=True)
        t0 = time.perf_counter()
        subprocess.run(oloproof_cmd("view", "latest", "--out", str(tmp / "report")), cwd=suite, env=ENV,
                       capture_output=True, check=True)
        build = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in (tmp / "report").rglob("*") if p.is_file())
        print(f"{args.cases} cases: bundle written in {build:.2f} s, {size / 1e6:.1f} MB "
              f"({len(list((tmp / 'report' / 'data').glob('cases-*.js')))} case chunks)")

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

        handler = functools.partial(Quiet, directory=str(tmp / "report"))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/index.html"

        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec
        from selenium.webdriver.support.ui import WebDriverWait

        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        try:
            paints = []
            for _ in range(3):
                t0 = time.perf_counter()
                driver.get(url + "?r=" + str(time.time()))  # a new document every time
                WebDriverWait(driver, 60).until(ec.presence_of_element_located((By.CSS_SELECTOR, "#cases table")))
                wall = time.perf_counter() - t0
                paints.append((int(driver.execute_script("return document.body.dataset.firstPaint")), wall))
            first = sorted(paints)[1]
            print(f"first paint: {first[0]} ms after the page's script started; {first[1] * 1000:.0f} ms from "
                  f"navigation to the case list (median of 3)")
            t0 = time.perf_counter()
            driver.get(url + f"#case=case_{args.cases - 1:06d}")
            WebDriverWait(driver, 60).until(ec.presence_of_element_located((By.CSS_SELECTOR, "#panel table")))
            print(f"opening the last case's panel: {(time.perf_counter() - t0) * 1000:.0f} ms")
        finally:
            driver.quit()
            server.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
