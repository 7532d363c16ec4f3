"""End to end in headless Chromium (Debian's chromium + chromium-driver): press Run, watch it move."""

import re
import shutil
import statistics
import time
from pathlib import Path

import pytest
from PIL import ImageColor

from specviz.viz.palette import colors

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SCREENSHOTS = Path(__file__).resolve().parents[1] / ".cache" / "screenshots"

pytestmark = [
    pytest.mark.skipif(
        not (CHROMIUM.exists() and DRIVER.exists()) or shutil.which("chromium") is None,
        reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
    ),
    pytest.mark.xdist_group("app"),  # one launched app per test run
]


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--window-size=1500,1300",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    yield driver
    driver.quit()


# pixels of the method's picture, as the browser shows it, in any of the given colours
OUTLINE_PIXELS = """
const image = document.querySelector('#method-image img');
if (!image || !image.complete || !image.naturalWidth) return -1;
const canvas = document.createElement('canvas');
canvas.width = image.naturalWidth;
canvas.height = image.naturalHeight;
const context = canvas.getContext('2d');
context.drawImage(image, 0, 0);
const data = context.getImageData(0, 0, canvas.width, canvas.height).data;
const wanted = new Set(arguments[0].map(([r, g, b]) => (r << 16) | (g << 8) | b));
let count = 0;
for (let i = 0; i < data.length; i += 4) if (wanted.has((data[i] << 16) | (data[i + 1] << 8) | data[i + 2])) count++;
return count;
"""


def _timed(summary: str) -> bool:
    """Whether the race summary is final: its result, no longer provisional while the runs are timed again."""
    return "step compression" in summary and not summary.startswith("Timing")


def _text(driver, element_id: str) -> str:
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.ID, element_id)
    return found[0].text if found else ""


def test_press_run_and_watch_the_race(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server)
    wait = WebDriverWait(browser, 60)
    button = wait.until(expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, "#run-button")))
    button.click()
    pressed = time.perf_counter()
    seen, first_frame = set(), None
    while time.perf_counter() - pressed < 120 and "step compression" not in _text(browser, "race-summary"):
        counter = _text(browser, "ar-counter")
        match = re.search(r"(\d+)/256 tokens", counter)
        if match:
            first_frame = first_frame or time.perf_counter() - pressed
            seen.add(int(match.group(1)))
        time.sleep(0.02)
    finished = time.perf_counter() - pressed
    while time.perf_counter() - pressed < 120 and not _timed(_text(browser, "race-summary")):
        time.sleep(0.05)
    timed = time.perf_counter() - pressed
    summary = _text(browser, "race-summary")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / "race.png"))
    # the two runs' own compute: their medians of undisturbed timings, as the timed summary gives them
    own = sum(float(seconds) for seconds in re.findall(r"([\d.]+) s(?: of compute)? ·", summary)[:1])
    own += float(re.search(r"AR: \d+ passes, ([\d.]+) s", summary).group(1))
    print(
        f"first frame after {first_frame:.2f} s, summary after {finished:.2f} s ({finished / own:.2f}x the two runs' "
        f"own compute of {own:.2f} s), timed summary after {timed:.2f} s; AR counts seen: {sorted(seen)}"
    )
    assert "step compression" in summary and re.search("speedup over AR|slower than AR|about the same", summary)
    bars = _text(browser, "race-bars")
    assert "model passes (NFE)" in bars and "seconds" in bars and "256" in bars  # NFE and clocks as bars
    assert len([n for n in seen if n < 256]) >= 2, f"the AR image should fill in over several frames, saw {seen}"
    assert first_frame is not None and first_frame < 5.0
    # why the seconds are not the passes: one click opens Compare's cost panel and measures
    browser.find_element(By.ID, "why-latency").click()
    clicked = time.perf_counter()
    while time.perf_counter() - clicked < 60 and "one-token pass" not in _text(browser, "cost-note"):
        time.sleep(0.1)
    selected = browser.find_element(By.CSS_SELECTOR, "button[role=tab][aria-selected=true]").text
    assert selected == "Compare" and "one-token pass" in _text(browser, "cost-note"), _text(browser, "cost-note")
    tabs = [button.text for button in browser.find_elements(By.CSS_SELECTOR, "button[role=tab]")]
    assert tabs == ["Race", "Inspect", "Compare", "Replay and export"], tabs  # each tab under its own name


def test_run_with_an_empty_prompt_says_why_on_the_page_and_races_nothing(server, browser):
    """The press checks Run's settings before any race: a refusal is a message on the page (an unqueued check
    raised it unseen: the page showed nothing), and the summary never says a race is starting."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server)
    wait = WebDriverWait(browser, 60)
    prompt = wait.until(
        expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, "textarea[data-testid='textbox']"))
    )
    prompt.send_keys(Keys.CONTROL, "a")
    prompt.send_keys(Keys.DELETE)  # typed, as a visitor does, so the page's value follows
    assert prompt.get_attribute("value") == ""
    browser.find_element(By.ID, "run-button").click()
    said = "//*[contains(text(), 'the prompt is empty')]"
    toast = WebDriverWait(browser, 20).until(expected_conditions.visibility_of_element_located((By.XPATH, said)))
    assert "red apple" in toast.text  # the message says what to write
    time.sleep(1.0)
    assert "Starting" not in _text(browser, "race-summary") and "Racing" not in _text(browser, "race-summary")
    assert "NFE" not in _text(browser, "method-counter")


def test_a_preset_on_the_first_screen_sets_everything_and_races(server, browser, untimed):
    """At a projector's 1280 x 720 the page opens in the projector layout with the presets above the fold,
    and without it Run is there too; one press fills the controls, says what to watch and races."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.set_window_size(1280, 720)
    browser.get(server)
    button = WebDriverWait(browser, 60).until(expected_conditions.element_to_be_clickable((By.ID, "preset-stall")))
    height = browser.execute_script("return window.innerHeight")

    def on_first_screen(element) -> bool:
        bottom = browser.execute_script("return arguments[0].getBoundingClientRect().bottom", element)
        return element.is_displayed() and 0 < bottom <= height

    run = browser.find_element(By.ID, "run-button")
    projector = browser.find_element(By.CSS_SELECTOR, "#projector input")
    WebDriverWait(browser, 10).until(lambda driver: projector.is_selected())  # a small screen: projector layout
    assert on_first_screen(button) and not run.is_displayed()
    projector.click()  # the side panel back: Run shows on the first screen too
    WebDriverWait(browser, 10).until(lambda driver: run.is_displayed())
    assert on_first_screen(button) and on_first_screen(run), "presets and Run must show without scrolling"
    button.click()
    pressed = time.perf_counter()
    while time.perf_counter() - pressed < 120 and not _timed(_text(browser, "race-summary")):
        time.sleep(0.05)
    assert "stall" in _text(browser, "preset-note").lower()
    assert "(longest 83 passes accepting nothing)" in _text(browser, "race-summary")  # the stall, in the result
    prompt = browser.find_element(By.CSS_SELECTOR, "textarea[data-testid='textbox']")
    assert prompt.get_attribute("value") == "a red car"
    assert "NFE 178" in _text(browser, "method-counter")  # the run the preset's paragraph describes
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / "preset.png"))
    browser.find_element(By.XPATH, "//button[@role='tab' and contains(., 'Inspect')]").click()
    waited = time.perf_counter()
    while time.perf_counter() - waited < 30 and "no draft accepted" not in _text(browser, "iteration-note"):
        time.sleep(0.05)
    told = _text(browser, "iteration-note")
    assert told.startswith("Iteration 36 ") and "Pass 1 of an 83-pass stall" in told  # Inspect opens on the long stall


def _race_in_slow_motion(server, browser, button: str) -> float:
    """Open the app, pick slow motion, press `button` (Run or a preset); when it was pressed."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server)
    slow = "//*[@id='race-speed']//label[contains(., 'slow motion')]"
    WebDriverWait(browser, 60).until(expected_conditions.element_to_be_clickable((By.XPATH, slow))).click()
    browser.find_element(By.ID, button).click()
    return time.perf_counter()


def test_stop_in_slow_motion_says_stopped_and_how_far(server, browser):
    """Slow motion shows the method pass by pass, its window outlined on the picture; Stop cancels the race
    and says how far each side got (Compare's note, never set on a fresh page, reaches the handler as None)."""
    from selenium.webdriver.common.by import By

    pressed = _race_in_slow_motion(server, browser, "run-button")
    while time.perf_counter() - pressed < 60 and "NFE 3 " not in _text(browser, "method-counter"):
        time.sleep(0.05)
    # the window at work on the method's picture: its drafted cells outlined in their fates' colours
    window_fates = ("accepted", "rejected", "kept", "redrawn", "new")  # not grey "discarded", a continuous fate
    fate_pixels = browser.execute_script(OUTLINE_PIXELS, [ImageColor.getrgb(colors()[fate]) for fate in window_fates])
    browser.find_element(By.ID, "stop-button").click()
    stopped = time.perf_counter()
    while time.perf_counter() - stopped < 20 and not _text(browser, "race-summary").startswith("Stopped"):
        time.sleep(0.05)
    summary = _text(browser, "race-summary")
    assert summary.startswith("Stopped before the end: the counters under the pictures say how far"), summary
    counted = _text(browser, "method-counter")  # slow motion: a few passes, not the whole run
    assert "/256 tokens" in counted and int(re.search(r"NFE (\d+)", counted).group(1)) < 20, counted
    assert fate_pixels > 500, f"the race should outline the window's cells on the method's picture ({fate_pixels} px)"


def test_replay_of_a_race_restores_the_controls_and_its_ar_run(server, browser, tiny, tmp_path):
    """Uploading trace.json with its ar-trace.json sets model, method, window, prompt and seed to the run's,
    and Inspect shows the race against AR again."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from specviz.decoding import run

    trace = run(tiny, "scd-mc", "sun", 2, params={"window": 24})
    ar = run(tiny, "ar", "sun", 2)
    trace.save(tmp_path / "trace.json")
    ar.save(tmp_path / "ar-trace.json")
    browser.get(server)
    WebDriverWait(browser, 60).until(lambda driver: driver.find_elements(By.ID, "run-button"))
    browser.find_element(By.XPATH, "//button[@role='tab' and contains(., 'Replay and export')]").click()
    upload = WebDriverWait(browser, 30).until(
        lambda driver: driver.find_element(By.CSS_SELECTOR, "#trace-upload input[type=file]")
    )
    upload.send_keys(f"{tmp_path / 'trace.json'}\n{tmp_path / 'ar-trace.json'}")
    loaded = time.perf_counter()
    while time.perf_counter() - loaded < 60 and "with the AR run it raced" not in browser.page_source:
        time.sleep(0.1)
    assert "Loaded scd-mc on tiny" in browser.find_element(By.TAG_NAME, "body").text
    method = browser.find_element(By.CSS_SELECTOR, "input[aria-label='Method']")
    window = browser.find_element(By.CSS_SELECTOR, "input[aria-label='Window W']")
    assert method.get_attribute("value").startswith("scd-mc") and window.get_attribute("value") == "24"
    prompt = browser.find_element(By.CSS_SELECTOR, "textarea[data-testid='textbox']")
    seed = browser.find_element(By.CSS_SELECTOR, "input[aria-label='Seed']")
    assert prompt.get_attribute("value") == "sun" and seed.get_attribute("value") == "2"  # Run repeats the run
    browser.find_element(By.XPATH, "//button[@role='tab' and contains(., 'Inspect')]").click()
    shown = time.perf_counter()
    raced = re.compile(r"scd-mc: [0-9.]+x step compression")  # the NFE and latency panel's title
    while time.perf_counter() - shown < 60 and not raced.search(browser.page_source):
        time.sleep(0.1)
    assert raced.search(browser.page_source)  # the NFE and latency panel has its AR run back
    # the Race tab shows the uploaded race, and Play again races it from the traces, nothing computed
    browser.find_element(By.XPATH, "//button[@role='tab' and contains(., 'Race')]").click()
    summary = _text(browser, "race-summary")
    assert f"scd-mc: {256 / trace.nfe:.2f}x step compression" in summary and "Played again" in summary
    assert f"NFE {trace.nfe} · 256/256" in _text(browser, "method-counter")
    browser.find_element(By.ID, "play-again").click()
    pressed, counts = time.perf_counter(), set()
    while time.perf_counter() - pressed < 60 and ("Played again" not in _text(browser, "race-summary") or not counts):
        found = re.search(r"(\d+)/256 tokens", _text(browser, "ar-counter"))
        counts |= {int(found.group(1))} if found and "Playing" in _text(browser, "race-summary") else set()
        time.sleep(0.05)
    played = time.perf_counter() - pressed
    print(f"played again in {played:.2f} s (recorded: {trace.seconds + ar.seconds:.2f} s); AR at {sorted(counts)}")
    assert len([n for n in counts if n < 256]) >= 2 and "Played again" in _text(browser, "race-summary")


def test_the_zipar_preset_races_its_rows_in_flight_on_the_picture(server, browser):
    """ZipAR's mechanism on the method's picture: in slow motion each pass outlines the cells it drew
    together, one per row in flight, in the front colour."""
    from selenium.webdriver.common.by import By

    pressed = _race_in_slow_motion(server, browser, "preset-zipar")
    front = ImageColor.getrgb(colors()["front"])
    pixels = 0
    # -1: the picture was between two frames (not loaded) when looked at; look again
    while time.perf_counter() - pressed < 90 and pixels <= 0:
        counter = re.search(r"NFE (\d+)", _text(browser, "method-counter"))
        if counter and int(counter.group(1)) > 10:  # two rows in flight from pass 9 on
            pixels = browser.execute_script(OUTLINE_PIXELS, [front])
        time.sleep(0.05)
    caption = _text(browser, "method-counter")
    browser.find_element(By.ID, "stop-button").click()
    assert pixels > 100, f"the race should outline the cells each pass drew together ({pixels} px)"
    assert re.search(r"pass \d+: 2 tokens drawn together, rows \d+, \d+", caption), caption  # the live caption


FIRST_SCREEN = """return ['method-image', 'ar-image', 'race-bars', 'method-counter']
  .map(id => document.getElementById(id))
  .concat([document.querySelector('#race-summary h3')])
  .map(element => element ? Math.round(element.getBoundingClientRect().bottom) : null);"""


@pytest.mark.parametrize("large", [False, True], ids=["normal type", "large type"])
def test_a_projector_screen_opens_in_the_projector_layout_and_holds_the_whole_race(server, browser, large, monkeypatch):
    """A 1280 x 577 page (a 1280 x 720 browser window) opens in the projector layout: the side panel is
    hidden, and the two pictures, the caption under the method's, the bars and the verdict are on the first
    screen during the race and after it, in normal and in large type: the verdict as it ends, timed again with
    its spread (large type's ended at 609 px; a 1280 x 720 page and the untimed verdict hid it)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    monkeypatch.setenv("SPECVIZ_TIMINGS", "2")  # the verdict in its longest form, with its spread over two timings
    _page_of(browser, 1280, 577)
    browser.get(server)
    button = WebDriverWait(browser, 60).until(expected_conditions.element_to_be_clickable((By.ID, "preset-zipar")))
    projector = "return document.body.classList.contains('specviz-projector')"
    WebDriverWait(browser, 10).until(lambda driver: driver.execute_script(projector))
    assert not browser.find_element(By.ID, "side-panel").is_displayed()
    if large:
        browser.execute_script("document.body.classList.add('specviz-large')")
    switch = "const box = s => document.querySelector(s).getBoundingClientRect(); "
    switch += "return [box('#projector .label-text').right, box('#projector').right]"
    label_right, switch_right = browser.execute_script(switch)
    assert label_right <= switch_right, (label_right, switch_right)  # "Projector layout" whole (large: cut)
    height = browser.execute_script("return window.innerHeight")
    button.click()
    pressed = time.perf_counter()
    during = None
    while time.perf_counter() - pressed < 120 and not _timed(_text(browser, "race-summary")):
        if during is None and "pass " in _text(browser, "method-counter"):
            during = browser.execute_script(FIRST_SCREEN)[:4]  # the verdict comes at the end
        time.sleep(0.05)
    after = browser.execute_script(FIRST_SCREEN)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / f"projector-{'large' if large else 'normal'}.png"))
    print(f"1280 x 577, {'large' if large else 'normal'} type: bottoms during {during}, after {after}")
    assert during is not None and all(0 < bottom <= height for bottom in during), during
    assert all(bottom is not None and 0 < bottom <= height for bottom in after), after


def _page_of(browser, width: int, height: int) -> None:
    """The page itself (the window less its frame) `width` x `height`."""
    browser.set_window_size(width, height)
    inner = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(2 * width - inner[0], 2 * height - inner[1])


# where the race's parts lie on the page: [top, bottom, left, right] of each, and the pictures' drawn size
RACE_PLACES = """const boxes = {};
for (const [name, selector] of [['verdict', '#race-summary h3'], ['bars', '#race-bars'], ['summary', '#race-summary'],
    ['method', '#method-image'], ['ar', '#ar-image']]) {
  const box = document.querySelector(selector).getBoundingClientRect();
  boxes[name] = [box.top, box.bottom, box.left, box.right].map(Math.round);
}
const drawn = image => Math.min(image.clientWidth, image.clientHeight - parseFloat(getComputedStyle(image).paddingTop));
boxes.pictures = ['#method-image img', '#ar-image img'].map(s => Math.round(drawn(document.querySelector(s))));
boxes.page = [window.innerWidth, window.innerHeight, document.documentElement.scrollHeight];
return boxes;"""


@pytest.mark.parametrize(
    "width, height, projector, large",
    [(1280, 577, True, False), (1280, 577, True, True), (1920, 937, False, True)],
    ids=["1280x577 projector", "1280x577 projector large type", "1920x937 side panel large type"],
)
def test_the_race_verdict_is_on_the_first_screen(server, browser, width, height, projector, large, untimed):
    """A 1280 x 720 window leaves a 1280 x 577 page (a 1920 x 1080 one 1920 x 937): there, in the projector
    layout in normal and large type, and in the normal layout with the side panel in large type, the race's
    verdict and bars are on the first screen after the race, beside pictures still large enough to read."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    _page_of(browser, width, height)
    browser.get(server)
    button = WebDriverWait(browser, 60).until(expected_conditions.element_to_be_clickable((By.ID, "preset-zipar")))
    in_projector = "return document.body.classList.contains('specviz-projector')"
    WebDriverWait(browser, 10).until(lambda driver: driver.execute_script(in_projector) == projector)
    if large:
        browser.execute_script("document.body.classList.add('specviz-large')")
    button.click()
    pressed = time.perf_counter()
    while time.perf_counter() - pressed < 120 and not _timed(_text(browser, "race-summary")):
        time.sleep(0.05)
    assert _timed(_text(browser, "race-summary")), (_text(browser, "race-summary"), _text(browser, "method-counter"))
    time.sleep(0.3)  # the last frame laid out
    places = browser.execute_script(RACE_PLACES)
    kind = f"{width}x{height}-{'projector' if projector else 'side-panel'}-{'large' if large else 'normal'}"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / f"verdict-{kind}.png"))
    print(f"{kind}: {places}")
    assert places["page"][:2] == [width, height], places
    for part in ("verdict", "bars"):
        top, bottom, left, right = places[part]
        assert top >= 0 and bottom <= height and left >= 0 and right <= width, (part, places)
    assert min(places["pictures"]) >= 200, places  # each picture drawn at least 200 px square


INSPECT_PLACES = """return ['iteration-note', 'inspect-steps', 'inspect-window', 'inspect-image']
  .map(id => document.getElementById(id).getBoundingClientRect())
  .map(box => [Math.round(box.top), Math.round(box.bottom)]);"""


def _shown_iteration(driver) -> tuple[int | None, int | None]:
    """The iteration Inspect's sentence describes and the one its window plot draws."""
    sentence = re.match(r"Iteration (\d+)", _text(driver, "iteration-note"))
    plot = re.search(r"iteration (\d+)/", _text(driver, "inspect-window"))
    return (int(sentence.group(1)) if sentence else None), (int(plot.group(1)) if plot else None)


# click a button and time, in the page itself (no driver round trips), until the sentence and the window
# plot both show the iteration the button moves to: seconds, or null after 10 s
TIMED_CLICK = """
const [button, done] = [arguments[0], arguments[arguments.length - 1]];
const target = arguments[1];
const shows = () => {
  const sentence = document.getElementById('iteration-note').innerText.match(/^Iteration (\\d+)/);
  const plot = document.getElementById('inspect-window').innerText.match(/iteration (\\d+)\\//);
  return sentence && plot && sentence[1] === plot[1] && (target === null ? sentence[1] : +sentence[1] === target);
};
const before = document.getElementById('iteration-note').innerText;
const started = performance.now();
const observer = new MutationObserver(() => {
  if (document.getElementById('iteration-note').innerText !== before && shows()) {
    observer.disconnect();
    done((performance.now() - started) / 1000);
  }
});
observer.observe(document.body, {subtree: true, childList: true, characterData: true});
setTimeout(() => { observer.disconnect(); done(null); }, 10000);
button.click();
"""


def test_a_projector_screen_runs_and_stops_ones_own_settings_from_the_presets_row(server, browser):
    """The projector layout hides the side panel and its Run and Stop; the presets' row holds its own, which
    race the side panel's settings and stop the race (elsewhere they are hidden)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server)
    WebDriverWait(browser, 60).until(expected_conditions.element_to_be_clickable((By.ID, "run-button")))
    assert not browser.find_element(By.ID, "projector-run").is_displayed()
    browser.find_element(By.CSS_SELECTOR, "#projector input").click()
    run = WebDriverWait(browser, 10).until(expected_conditions.element_to_be_clickable((By.ID, "projector-run")))
    assert not browser.find_element(By.ID, "run-button").is_displayed()
    run.click()
    pressed = time.perf_counter()
    while time.perf_counter() - pressed < 60 and not re.search(r"[1-9]\d*/256 tokens", _text(browser, "ar-counter")):
        time.sleep(0.05)
    browser.find_element(By.ID, "projector-stop").click()
    stopped = time.perf_counter()
    while time.perf_counter() - stopped < 20 and not _text(browser, "race-summary").startswith("Stopped"):
        time.sleep(0.05)
    summary = _text(browser, "race-summary")
    assert summary.startswith("Stopped before the end") and "sjd" in _text(browser, "method-counter"), summary


def test_inspect_on_a_projector_shows_the_window_and_image_first_and_answers_a_step_at_once(server, browser, untimed):
    """At 1280 x 720 Inspect puts its sentence, the step buttons, the whole window (its bars beside the grid)
    and the image on the first screen; a step and a jump redraw sentence and window (their times printed: the
    targets are 0.3 s and 0.5 s)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.set_window_size(1280, 720)
    inner = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(2560 - inner[0], 1440 - inner[1])  # the page itself 1280 x 720
    browser.get(server)
    WebDriverWait(browser, 60).until(expected_conditions.presence_of_element_located((By.ID, "run-button")))
    WebDriverWait(browser, 10).until(
        lambda d: d.execute_script("return document.body.classList.contains('specviz-projector')")
    )
    browser.execute_script("document.getElementById('run-button').click()")  # hidden with the side panel
    pressed = time.perf_counter()
    while time.perf_counter() - pressed < 120 and not _timed(_text(browser, "race-summary")):
        time.sleep(0.1)
    browser.find_element(By.XPATH, "//button[@role='tab' and contains(., 'Inspect')]").click()
    WebDriverWait(browser, 30).until(lambda d: None not in _shown_iteration(d))
    tabs = [button.text for button in browser.find_elements(By.CSS_SELECTOR, "button[role=tab]")]
    assert tabs == ["Race", "Inspect", "Compare", "Replay and export"], tabs  # a non-tab among them shifted these
    places = browser.execute_script(INSPECT_PLACES)
    height = browser.execute_script("return window.innerHeight")
    note, steps, window, image = places
    assert note[1] <= steps[0] and steps[1] <= window[0] and window[1] <= height and image[1] <= height, places
    browser.set_script_timeout(15)
    steps_taken, jumps = [], []
    for _ in range(5):
        now = _shown_iteration(browser)[0]
        steps_taken.append(browser.execute_async_script(TIMED_CLICK, browser.find_element(By.ID, "step-on"), now + 1))
    jump = browser.find_element(By.XPATH, "//button[contains(., 'Next acceptance')]")
    for _ in range(3):
        jumps.append(browser.execute_async_script(TIMED_CLICK, jump, None))
    assert None not in steps_taken + jumps, (steps_taken, jumps)  # every step and jump redrew sentence and window
    print(
        f"Inspect in the browser: a step {statistics.median(steps_taken):.2f} s (median of 5, "
        f"{min(steps_taken):.2f}-{max(steps_taken):.2f}), a jump {statistics.median(jumps):.2f} s (median of 3, "
        f"{min(jumps):.2f}-{max(jumps):.2f}); places {places}"
    )


@pytest.mark.parametrize("method", ["sjd-pac", "lantern++"])
def test_the_newest_tree_methods_race_their_trees_on_the_picture(server, browser, method):
    """SJD-PAC and LANTERN++ on the method's picture: in slow motion each pass outlines the positions its
    tree drafted, in their fates' colours (accepted green, refused vermillion)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server)
    choice = WebDriverWait(browser, 60).until(
        expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, "#method-choice input"))
    )
    choice.click()
    browser.find_element(By.XPATH, f"//ul[@role='listbox']//li[contains(., '{method} (')]").click()
    browser.find_element(By.XPATH, "//*[@id='race-speed']//label[contains(., 'slow motion')]").click()
    browser.find_element(By.ID, "run-button").click()
    pressed = time.perf_counter()
    fates = [ImageColor.getrgb(colors()[fate]) for fate in ("accepted", "rejected")]
    pixels = 0
    while time.perf_counter() - pressed < 90 and pixels < 200:
        counter = re.search(r"NFE (\d+)", _text(browser, "method-counter"))
        if counter and int(counter.group(1)) > 2:
            pixels = max(pixels, browser.execute_script(OUTLINE_PIXELS, fates))
        time.sleep(0.1)
    caption = _text(browser, "method-counter")
    browser.find_element(By.ID, "stop-button").click()
    assert method in caption and re.search(r"pass \d+: \d+ drafts in a tree", caption), caption
    assert pixels >= 200, f"the race should outline {method}'s drafted positions ({pixels} px)"


# for each header of Compare's table: whether every word of it lies on one line (a word broken over two
# lines has two boxes)
WHOLE_HEADER_WORDS = """
const headers = arguments[0];
const walker = document.createTreeWalker(document.getElementById('compare-table'), NodeFilter.SHOW_TEXT);
const whole = {};
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  const text = node.data.trim();
  if (!headers.includes(text) || text in whole) continue;
  whole[text] = [...text.matchAll(/\\S+/g)].every(word => {
    const range = document.createRange();
    const start = node.data.indexOf(text) + word.index;
    range.setStart(node, start);
    range.setEnd(node, start + word[0].length);
    return new Set([...range.getClientRects()].map(box => Math.round(box.top))).size === 1;
  });
}
return whole;
"""


def test_large_type_keeps_the_prompt_and_compares_headers_whole_at_1280_pixels(server, browser):
    """Large type at 1280 x 720 with the side panel open: a three-line prompt is shown whole (no line
    scrolled away), and every word of Compare's headers stays on one line."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    from specviz.ui.compare import COMPARE_HEADERS

    browser.set_window_size(1280, 720)
    inner = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(2560 - inner[0], 1440 - inner[1])
    browser.get(server)
    WebDriverWait(browser, 60).until(expected_conditions.presence_of_element_located((By.ID, "run-button")))
    WebDriverWait(browser, 10).until(
        lambda d: d.execute_script("return document.body.classList.contains('specviz-projector')")
    )
    browser.find_element(By.CSS_SELECTOR, "#projector input").click()  # the side panel back, the table narrower
    browser.execute_script("document.body.classList.add('specviz-large')")
    prompt = WebDriverWait(browser, 10).until(
        expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, "textarea[data-testid='textbox']"))
    )
    prompt.clear()
    prompt.send_keys("a smiling sun with a yellow face above a blue car on a road")
    time.sleep(0.5)
    scrolled, shown = browser.execute_script("return [arguments[0].scrollHeight, arguments[0].clientHeight]", prompt)
    assert scrolled <= shown + 4, (scrolled, shown)  # a few pixels of padding, never a line
    browser.find_element(By.XPATH, "//button[@role='tab' and contains(., 'Compare')]").click()
    whole = WebDriverWait(browser, 10).until(lambda d: d.execute_script(WHOLE_HEADER_WORDS, COMPARE_HEADERS) or None)
    assert set(whole) == set(COMPARE_HEADERS) and all(whole.values()), whole
