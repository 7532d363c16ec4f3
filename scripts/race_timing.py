"""Time the default race in a real browser: the app in its own process, a separate headless Chromium.

    PORT=7861 python app.py &          # wait until it serves, then, with nothing else running:
    python scripts/race_timing.py --url http://127.0.0.1:7861/ --presses 5

Prints, per press of Run at 1280 x 720: the first frame, the summary (and its ratio to the two runs' own
compute, as the timed summary gives them), the timed summary and its latency verdict. The browser test
(`pytest -n 0 tests/test_browser.py -k watch -s`) prints the same, but its server shares the pytest
process that polls the page, which slows the race; this one does not. Needs Debian's chromium and
chromium-driver and selenium (requirements-dev.txt).
"""

from __future__ import annotations

import argparse
import re
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

POLL = 0.1  # seconds between looks at the page: often enough to time, rarely enough not to load the machine


def text(driver: webdriver.Chrome, element_id: str) -> str:
    found = driver.find_elements(By.ID, element_id)
    return found[0].text if found else ""


def final(summary: str) -> bool:
    return "step compression" in summary and not summary.lstrip("*").startswith("Timing")


def press(driver: webdriver.Chrome, button) -> str:
    """Press Run once; the line of timings."""
    button.click()
    pressed = time.perf_counter()
    while "step compression" in text(driver, "race-summary"):  # the last race's summary, until this one clears it
        time.sleep(0.02)
    first = None
    while time.perf_counter() - pressed < 120 and "step compression" not in text(driver, "race-summary"):
        if first is None and re.search(r"\d+/256 tokens", text(driver, "ar-counter")):
            first = time.perf_counter() - pressed
        time.sleep(POLL)
    shown = time.perf_counter() - pressed
    while time.perf_counter() - pressed < 120 and not final(text(driver, "race-summary")):
        time.sleep(POLL)
    timed = time.perf_counter() - pressed
    summary = text(driver, "race-summary")
    own = float(re.findall(r"([\d.]+) s ·", summary)[0])
    own += float(re.search(r"AR: \d+ passes, ([\d.]+) s", summary).group(1))
    first_text = f"{first:.2f} s" if first is not None else "not seen"
    verdict = re.search(r"[^\n]*(speedup over AR|slower than AR|about the same)[^\n]*", summary)
    return (
        f"first frame {first_text}, summary {shown:.2f} s = {shown / own:.2f}x the two runs' own compute "
        f"({own:.2f} s), timed summary {timed:.2f} s; verdict: {verdict.group(0).strip() if verdict else summary!r}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:7861/")
    parser.add_argument("--presses", type=int, default=5)
    args = parser.parse_args()
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-dev-shm-usage", "--no-first-run", "--window-size=1280,720"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(args.url)
        # at 1280 x 720 the page opens in the projector layout, whose Run sits in the presets' row
        run = WebDriverWait(driver, 60).until(expected_conditions.element_to_be_clickable((By.ID, "projector-run")))
        for index in range(args.presses):
            time.sleep(2)  # the last race's re-timing has ended; let the page settle
            print(f"press {index + 1}: {press(driver, run)}", flush=True)
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
