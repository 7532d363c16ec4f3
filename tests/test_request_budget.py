"""No single request may take the app's memory or its compute queue (issue 55): each request's budget is
decided before its work (files it names, memory its settings imply, methods it repeats) and held to while it
runs (seconds on the queue, a visitor who left); Gradio's own routes answer bad calls without a stack trace."""

import json
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from gradio_client import Client
from test_app import RACE, _controls
from test_endpoints import RawClient

from specviz.core.catalogue import CATALOGUE
from specviz.core.params import PeanutParameters, TreeParameters
from specviz.decoding.budget import MemoryBudgetError, check_pass_memory, memory_ceiling
from specviz.ui.checks import MAX_REQUEST_FILES, files_problem
from specviz.ui.compute import Deadline, OverBudget

pytestmark = pytest.mark.xdist_group("app")  # one launched app per test run

EXAMPLE = Path(__file__).parents[1] / "specviz" / "data" / "examples" / "red-apple-sjd.json"
GIB = 1024**3


def _rss() -> int:
    """This process's resident memory in bytes (the launched app runs in it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _race_values(method: str, **params) -> list:
    values = list(RACE)
    values[1] = method
    controls = _controls(method)
    from specviz.ui.controls import PARAMETERS

    for name, value in params.items():
        controls[PARAMETERS.index(name)] = value
    values[4 : 4 + len(controls)] = controls
    return values


# --- the memory a run's settings imply, estimated before any work


def test_the_estimate_bounds_what_a_tree_pass_takes():
    """The estimate is an upper bound of the measured peak (eagle2 on tiny, V 1024: 1.4M candidates took 130 MB
    beyond the session, 5.8M took 470 MB) and within about twice of it, so it refuses what would not fit
    without refusing the papers' settings."""
    measured = {(16, 300, 1000): 130e6, (64, 300, 1000): 470e6}
    for (depth, top_k, size), peak in measured.items():
        estimate = TreeParameters(tree_depth=depth, tree_top_k=top_k, tree_tokens=size).pass_bytes(1024, 256)
        assert peak <= estimate <= 2.5 * peak
    for method in CATALOGUE.values():  # every method's defaults fit a small machine's share with room to spare
        assert method.parameters().pass_bytes(16384, 2400) < 0.5 * GIB, method.name


def test_the_attacks_settings_are_refused_with_the_limit_named():
    extremes = TreeParameters(tree_depth=64, tree_top_k=1000, tree_tokens=1000)
    with pytest.raises(MemoryBudgetError, match=r"needs about \d+\.\d GB a pass.*a run may take 2\.0 GB here"):
        check_pass_memory("eagle2", extremes, 1024, 256, (2 * GIB, "an eighth of this machine's memory"))
    peanut = PeanutParameters(depth_max=65, tree_depth=32, top_k_max=1001, tree_top_k=500, tree_tokens=1000)
    with pytest.raises(MemoryBudgetError):  # the controller may grow a tree to its bounds: they are what counts
        check_pass_memory("peanut", peanut, 1024, 256, (2 * GIB, "a share"))


def test_the_ceiling_is_a_share_of_the_machine_or_the_owners_number(monkeypatch):
    monkeypatch.delenv("SPECVIZ_RUN_MEMORY_MB", raising=False)
    whole, _ = memory_ceiling(1.0)
    eighth, source = memory_ceiling(0.125)
    assert abs(eighth - whole / 8) < 4096 and "1/8 of this machine's memory" in source
    monkeypatch.setenv("SPECVIZ_RUN_MEMORY_MB", "300")
    assert memory_ceiling(0.125) == (300 * 1024**2, "SPECVIZ_RUN_MEMORY_MB=300")
    monkeypatch.setenv("SPECVIZ_RUN_MEMORY_MB", "lots")
    with pytest.raises(ValueError, match="whole number of megabytes"):
        memory_ceiling()


def test_the_command_line_refuses_the_tree_extremes_before_any_pass(capsys, monkeypatch, tmp_path):
    """On a machine whose half is under the 5.7 GB these settings need (here: SPECVIZ_RUN_MEMORY_MB as its owner
    would set it), the CLI died in a DefaultCPUAllocator traceback minutes into the run; now one line, exit 2.
    (Where the memory is there, the run goes ahead: 40 passes in 302 s here.)"""
    from specviz import cli

    monkeypatch.setenv("SPECVIZ_RUN_MEMORY_MB", "2048")
    out = tmp_path / "never-written"
    args = ["run", "--method", "eagle2", "--tree-depth", "64", "--tree-top-k", "1000", "--tree-tokens", "1000"]
    started = time.perf_counter()
    assert cli.main([*args, "--prompt", "red apple", "--out", str(out)]) == 2
    assert time.perf_counter() - started < 30
    err = capsys.readouterr().err
    assert "GB a pass" in err and "SPECVIZ_RUN_MEMORY_MB=2048" in err and "Traceback" not in err
    assert not out.exists()


# --- what a request names, counted before it is read


def test_files_are_counted_before_any_is_read():
    one = {"path": str(EXAMPLE), "meta": {"_type": "gradio.FileData"}}
    assert files_problem([one]) is None
    assert "the same file is named twice" in files_problem([one, dict(one)])
    assert f"a call takes {MAX_REQUEST_FILES} at most" in files_problem([one] * 350)


def test_the_replay_bomb_is_refused_without_reading_the_copies(server, tmp_path):
    """One upload listed K times in one /replay call cost 43 MB a copy (K = 100 took the server 4.5 GB up):
    now the call is refused by its count, and the memory does not grow with K."""
    api = f"{server}gradio_api"
    with EXAMPLE.open("rb") as trace:
        uploaded = httpx.post(f"{api}/upload", files={"files": ("trace.json", trace)}).json()[0]
    client = RawClient(server)
    replay = next(d["id"] for d in client.config["dependencies"] if d["api_name"] == "replay")
    reference = {"path": uploaded, "meta": {"_type": "gradio.FileData"}, "orig_name": "trace.json"}
    before = _rss()
    for copies in (2, 100, 1000):
        status, message = client.call(replay, [[reference] * copies, False, False])
        assert status == "refused", copies
        assert "at most" in message or "named twice" in message
    assert _rss() - before < 50 * 1024**2  # 1,102 copies named, none parsed


# --- before any work: memory of the settings, methods named twice


def test_the_tree_extremes_are_refused_before_any_work(server):
    client = Client(server, verbose=False)
    values = _race_values("eagle2", tree_depth=64, tree_top_k=1000, tree_tokens=1000)
    before, started = _rss(), time.perf_counter()
    with pytest.raises(Exception, match=r"GB a pass"):
        client.predict(*values, "live", api_name="/race")
    assert time.perf_counter() - started < 20 and _rss() - before < 200 * 1024**2


def test_compare_takes_each_method_once(server):
    client = Client(server, verbose=False)
    values = RACE[:1] + RACE[2:]
    with pytest.raises(Exception, match="chosen more than once"):
        client.predict(*values, False, False, ["sjd", "sjd"], api_name="/compare")
    with pytest.raises(Exception, match="1,000 choices"):
        client.predict(*values, False, False, ["sjd"] * 1000, api_name="/compare")


# --- while it runs: the time budget and a visitor who left


def test_a_deadline_stops_work_once_its_time_is_up():
    deadline = Deadline(seconds=0.05)
    deadline.check()
    time.sleep(0.06)
    with pytest.raises(OverBudget, match="budget of 0 s"):
        deadline.check()
    assert Deadline(seconds=5).wanted()  # no queued event (a direct call): only the clock counts


def test_a_comparison_stops_at_the_request_budget(server, monkeypatch):
    monkeypatch.setenv("SPECVIZ_REQUEST_SECONDS", "2")
    client = Client(server, verbose=False)
    values = RACE[:1] + RACE[2:]
    started = time.perf_counter()
    with pytest.raises(Exception, match="reached its budget of 2 s"):
        client.predict(*values, False, False, ["sjd", "scd-mc", "scd-gs", "jacobi", "eagle2", "peanut"],
                       api_name="/compare")  # fmt: skip
    assert time.perf_counter() - started < 15  # the six runs and their timing take about 25 s here


def test_a_visitor_who_leaves_frees_the_queue(server, caplog):
    """A comparison of slow trees whose page closes stops within a pass: the next visitor's race does not wait
    for it (before, every queued run of a disconnected client ran to its end)."""
    caplog.set_level("WARNING", logger="specviz.ui")
    raw = RawClient(server)
    compare = next(d["id"] for d in raw.config["dependencies"] if d["api_name"] == "compare")
    components = {c["id"]: c for c in raw.config["components"]}
    dependency = next(d for d in raw.config["dependencies"] if d["id"] == compare)
    labels = [components[i].get("props", {}).get("label") for i in dependency["inputs"]]
    values = [components[i].get("props", {}).get("value") for i in dependency["inputs"]]
    slow = {"Tree depth": 16, "Tree top-k": 300, "Tree size": 1000}  # about 0.4 s a pass, a minute a run
    for position, label in enumerate(labels):
        if label in slow:
            values[position] = slow[label]
        elif label == "Methods":
            values[position] = ["eagle2"]
    body = {"data": values, "fn_index": compare, "session_hash": uuid.uuid4().hex, "event_data": None}
    joined = httpx.post(f"{raw.api}/queue/join", json=body)
    assert joined.status_code == 200, joined.text[:300]
    stream = httpx.stream("GET", f"{raw.api}/queue/data", params={"session_hash": body["session_hash"]}, timeout=60)
    with stream as events:  # read until the comparison is running, then close the page
        for line in events.iter_lines():
            if line.startswith("data:") and json.loads(line[5:]).get("msg") == "process_generating":
                break
    time.sleep(1.0)
    started = time.perf_counter()
    done = threading.Event()

    def next_visitor():
        Client(server, verbose=False).predict(*RACE, "live", api_name="/race")
        done.set()

    threading.Thread(target=next_visitor, daemon=True).start()
    assert done.wait(40), "the next visitor's race waited for the closed page's comparison"
    stopped = [r.getMessage() for r in caplog.records if "closed or stopped it" in r.getMessage()]
    assert stopped and "comparison" in stopped[0], "the comparison ran on after its page closed"
    print(f"the next race finished {time.perf_counter() - started:.1f} s after the page closed")


# --- Gradio's own routes


def test_gradios_routes_refuse_bad_calls_without_a_stack_trace(server, capfd, tmp_path):
    api = f"{server}gradio_api"
    capfd.readouterr()
    for fn_index in (-1, 99999, "x", 2.5):
        body = {"data": [], "fn_index": fn_index, "session_hash": "s"}
        answer = httpx.post(f"{api}/queue/join", json=body)
        assert answer.status_code == 422 and "no endpoint" in answer.json()["error"]
    assert httpx.post(f"{api}/call/v2/hint", json={"data": []}).status_code == 404
    assert httpx.get(f"{server}monitoring/summary").status_code == 403
    assert httpx.get(f"{server}monitoring").status_code == 403
    page = tmp_path / "page.html"
    page.write_text("<script>alert(1)</script>")
    assert httpx.post(f"{api}/upload", files={"files": ("page.html", page.read_bytes())}).status_code == 400
    many = [("files", (f"t{i}.json", b"{}")) for i in range(200)]
    answer = httpx.post(f"{api}/upload", files=many)
    assert answer.status_code == 400 and "200 files" in answer.json()["error"]
    assert httpx.post(f"{api}/upload", files={"files": ("t.json", b"{}")}).status_code == 200
    log = capfd.readouterr()
    assert "Traceback" not in log.err + log.out and "Monitoring URL" not in log.err + log.out


def test_a_zipar_race_exports_beside_its_ar_run(tiny, tmp_path):
    """ZipAR records the order it decided cells in and AR none: the export beside AR compared whole geometries
    and failed ('Something went wrong (ValueError)'); the grids are the same, so both are drawn."""
    from specviz import metrics, viz
    from specviz.decoding import run
    from specviz.models.protocol import decode_in_order

    zipar, ar = run(tiny, "zipar", "red apple", 0), run(tiny, "ar", "red apple", 0)
    assert zipar.geometry.order is not None and ar.geometry.order is None

    def image_at(trace):
        return lambda k: decode_in_order(tiny, metrics.tokens_through(trace, k), trace.geometry.order)

    (written,) = viz.write_animation(zipar, image_at(zipar), [tmp_path / "race.gif"], ar=ar, ar_image_at=image_at(ar))
    assert written.stat().st_size > 10_000


def test_a_new_press_ends_the_pages_race_and_says_so_at_once(server):
    """Run pressed while the page's race is still going (a slow-motion race, a minute long here): the press
    answers at once with a line that the race starts, and the old race ends within a pass, so the new one does
    not wait for it (a lecturer once saw nothing for 13 s after pressing a preset: the race before it held the
    queue while its clocks were timed)."""
    raw = RawClient(server)
    dependencies = raw.config["dependencies"]
    press = next(d for d in dependencies if d["api_name"] == "own_run_shown")
    race = next(d for d in dependencies if d["api_name"] == "race")
    assert race["trigger_after"] == press["id"] and race["trigger_only_on_success"]  # the press checks, then races
    components = {c["id"]: c for c in raw.config["components"]}
    given = iter([*RACE, "slow"])  # the page's race settings in slow motion; its press (a State) the server's own
    values = [None if components[i]["type"] == "state" else next(given) for i in race["inputs"]]
    body = {"data": values, "fn_index": race["id"], "session_hash": raw.session, "event_data": None}
    joined = httpx.post(f"{raw.api}/queue/join", json=body)
    assert joined.status_code == 200, joined.text[:300]
    race_event = joined.json()["event_id"]
    stream = httpx.stream("GET", f"{raw.api}/queue/data", params={"session_hash": raw.session}, timeout=60)
    with stream as events:
        lines = events.iter_lines()
        for line in lines:  # until the race shows its passes
            message = json.loads(line[5:]) if line.startswith("data:") else {}
            if message.get("msg") == "process_generating" and message.get("event_id") == race_event:
                break
        time.sleep(1.5)  # a few slow-motion passes
        pressed = time.perf_counter()
        components = {c["id"]: c for c in raw.config["components"]}
        values = [components[i].get("props", {}).get("value") for i in press["inputs"]]  # the page's defaults
        body = {"data": values, "fn_index": press["id"], "session_hash": raw.session, "event_data": None}
        assert httpx.post(f"{raw.api}/queue/join", json=body).status_code == 200
        said = None
        for line in lines:
            message = json.loads(line[5:]) if line.startswith("data:") else {}
            if message.get("msg") != "process_completed":
                continue
            if message.get("event_id") == race_event:
                last = message["output"]["data"]  # Gradio shows an event's last frame once more as it ends
                break
            said = message["output"]["data"]
        ended = time.perf_counter() - pressed
    assert said is not None and "*Starting the race: the previous race stops first" in str(said), said
    summary = race["outputs"].index(
        next(i for i in race["outputs"] if components[i].get("props", {}).get("elem_id") == "race-summary")
    )
    assert last[summary] == "*Starting the race...*", last[summary]  # not the old race's summary put back
    assert race["trigger_mode"] == "always_last"  # pressed again while it runs, the new race runs after it
    assert ended < 5, f"the page's old race ran on {ended:.1f} s after the new press"
    print(f"the old race ended {ended:.2f} s after the press")


def test_a_press_ends_only_its_own_pages_race():
    from specviz.ui import compute

    def deadline_of(page: str, **options) -> Deadline:
        token = compute.PAGE.set(page)
        try:
            return Deadline(seconds=60, **options)
        finally:
            compute.PAGE.reset(token)

    racing, other_page, comparing = (
        deadline_of("a", superseded_by_press=True),
        deadline_of("b", superseded_by_press=True),
        deadline_of("a"),
    )
    token = compute.PAGE.set("a")
    try:
        compute.race_pressed("run")
    finally:
        compute.PAGE.reset(token)
    assert not racing.wanted() and other_page.wanted() and comparing.wanted()
    with pytest.raises(compute.Superseded, match="started another race"):
        racing.check()
    assert deadline_of("a", superseded_by_press=True).wanted()  # a race begun after the press goes on


def test_a_race_still_waiting_its_turn_is_ended_by_a_later_press():
    """A race carries the stamp of the press that started it: a press made while it still waited in the queue
    (a Space busy with other visitors, a comparison holding the compute queue) ends it before its first frame,
    where before only races already under way were ended."""
    from specviz.core.settings import SamplingSettings
    from specviz.ui import compute
    from specviz.ui import race as race_tab
    from specviz.ui.controls import RunRequest, own_parameters

    token = compute.PAGE.set("a page")
    try:
        first = compute.race_pressed("zipar")
        second = compute.race_pressed("pjd")  # pressed while the first race waited its turn
        assert Deadline(superseded_by_press=True, press=first).superseded()
        assert not Deadline(superseded_by_press=True, press=second).superseded()
        request = RunRequest("tiny", "sjd", "sun", 0, SamplingSettings(), own_parameters("sjd"))
        frames = list(race_tab.race_frames(request, slow=False, opens_on=None, press=first))
        assert frames == [race_tab.SUPERSEDED]  # it never began: no clearing of the screen, no run
    finally:
        compute.PAGE.reset(token)


def test_stop_pressed_while_a_race_waits_to_begin_means_it_never_begins():
    """The page defers a press of the running race's own button until that race ends (`always_last`); Stop then
    cancels the running race, and the deferred race began after it anyway, under Stop's own line "Stopped before
    the race began". A race pressed before the page's Stop now never begins; one pressed after it runs."""
    from specviz.core.settings import SamplingSettings
    from specviz.ui import compute
    from specviz.ui import race as race_tab
    from specviz.ui.controls import RunRequest, own_parameters

    token = compute.PAGE.set("a stopped page")
    try:
        live = Deadline(superseded_by_press=True, press=compute.race_pressed("run"))  # a race under way
        compute.stop_pressed()
        # Gradio cancels it: ended by its own check first, it put its failure's summary and message over Stop's line
        # (a browser walk saw that on every Stop of a live race)
        assert live.stopped() and live.wanted()
        live.check()
        deferred = compute.race_pressed("run")  # pressed again while a race ran: its race waits for that one's end
        compute.stop_pressed()
        deadline = Deadline(superseded_by_press=True, press=deferred)
        assert deadline.stopped() and not deadline.superseded()
        request = RunRequest("tiny", "sjd", "sun", 0, SamplingSettings(), own_parameters("sjd"))
        frames = list(race_tab.race_frames(request, slow=False, opens_on=None, press=deferred))
        assert frames == [race_tab.STOPPED_BEFORE_START]  # Stop's line stays: no clearing, no run
        assert compute.last_pressed() == compute.STOP  # a preset's contrast run does not follow either
        after = compute.race_pressed("run")
        assert Deadline(superseded_by_press=True, press=after).wanted()
    finally:
        compute.PAGE.reset(token)


def test_the_stop_button_is_recorded_for_its_page(server):
    from specviz.ui import compute

    raw = RawClient(server)
    stop = next(d for d in raw.config["dependencies"] if d["api_name"] == "stop")
    components = {c["id"]: c for c in raw.config["components"]}
    values = [components[i].get("props", {}).get("value") for i in stop["inputs"]]
    assert raw.call(stop["id"], values) == ("ok", None)
    token = compute.PAGE.set(raw.session)
    try:
        assert compute.last_pressed() == compute.STOP
    finally:
        compute.PAGE.reset(token)


def test_a_page_is_known_as_opened_in_a_browser_only_once_its_load_events_ran(server):
    from specviz.ui import compute

    raw = RawClient(server)
    token = compute.PAGE.set(raw.session)
    try:
        assert not compute.opened_in_a_browser()  # a client that runs no load events: no wait for Inspect's views
        opened = next(d for d in raw.config["dependencies"] if d["api_name"] == "page_opened")
        assert opened["targets"][0][1] == "load"
        assert raw.call(opened["id"], []) == ("ok", None)  # what the browser does as it opens the page
        assert compute.opened_in_a_browser()
    finally:
        compute.PAGE.reset(token)


def test_run_pressed_on_a_model_not_loaded_yet_answers_at_once_without_loading_it(server, monkeypatch):
    """The press's answer checked the settings against the model, loading it first: a released model's first use
    (its weights read, minutes) held the answer, and the page showed nothing new until the load ended. The press
    now answers at once that the model loads first, and the race loads it."""
    from specviz.ui import activity, loading

    loads = []
    monkeypatch.setattr(loading, "load_model", lambda name, **_: loads.append(name))
    raw = RawClient(server)
    press = next(d for d in raw.config["dependencies"] if d["api_name"] == "own_run_shown")
    components = {c["id"]: c for c in raw.config["components"]}
    values = [components[i].get("props", {}).get("value") for i in press["inputs"]]
    model = next(i for i, c in enumerate(press["inputs"]) if components[c].get("props", {}).get("label") == "Model")
    assert values[model] == "tiny" and loading.loaded_model("janus-pro") is None
    values[model] = "janus-pro"
    summary = press["outputs"].index(
        next(i for i in press["outputs"] if components[i].get("props", {}).get("elem_id") == "race-summary")
    )
    frames = _streamed(raw, press, values)
    assert frames[-1]["success"] and loads == [], frames[-1]
    said = frames[-1]["output"]["data"][summary]
    assert said == activity.starting(None, None, loading="janus-pro") and "janus-pro loads first" in said, said
    assert said.startswith(activity.STARTING.rstrip(".*"))  # so Stop says the race had not begun


def _streamed(raw: RawClient, dependency: dict, values: list) -> list[dict]:
    """The messages of one queued call that carry its outputs, to its end."""
    body = {"data": values, "fn_index": dependency["id"], "session_hash": raw.session, "event_data": None}
    event = httpx.post(f"{raw.api}/queue/join", json=body).json()["event_id"]
    frames = []
    with httpx.stream("GET", f"{raw.api}/queue/data", params={"session_hash": raw.session}, timeout=60) as stream:
        for line in stream.iter_lines():
            message = json.loads(line[5:]) if line.startswith("data:") else {}
            if message.get("event_id") != event:
                continue
            if message.get("msg") in ("process_generating", "process_completed") and message.get("output"):
                frames.append(message)
            if message.get("msg") == "process_completed":
                return frames
    raise AssertionError("the call never completed")


@pytest.fixture
def hub_unreachable(monkeypatch):
    from specviz.core.errors import ModelUnavailable
    from specviz.ui import loading

    def unreachable(name, **_):
        raise ModelUnavailable(f"{name}: the hub cannot be reached")

    monkeypatch.setattr(loading, "load_model", unreachable)


def test_a_race_whose_model_fails_to_load_says_it_stopped(server, hub_unreachable):
    """The press said the model loads first; where the load fails (weights missing, hub unreachable), the summary
    says the race stopped beside the message, rather than go on saying it starts."""
    from specviz.ui import race as race_tab

    raw = RawClient(server)
    race = next(d for d in raw.config["dependencies"] if d["api_name"] == "race")
    components = {c["id"]: c for c in raw.config["components"]}
    given = iter(["janus-pro", *RACE[1:], "live"])
    values = [None if components[i]["type"] == "state" else next(given) for i in race["inputs"]]
    summary = race["outputs"].index(
        next(i for i in race["outputs"] if components[i].get("props", {}).get("elem_id") == "race-summary")
    )
    frames = _streamed(raw, race, values)
    assert not frames[-1]["success"] and "hub cannot be reached" in str(frames[-1]["output"]), frames[-1]
    shown = [frame["output"]["data"][summary] for frame in frames if frame["output"].get("data")]
    assert shown and shown[-1] == race_tab.RACE_STOPPED, shown


def test_a_comparison_says_its_model_loads_first_and_that_nothing_was_compared_when_it_fails(server, hub_unreachable):
    raw = RawClient(server)
    compare = next(d for d in raw.config["dependencies"] if d["api_name"] == "compare")
    components = {c["id"]: c for c in raw.config["components"]}
    values = [components[i].get("props", {}).get("value") for i in compare["inputs"]]
    model = next(i for i, c in enumerate(compare["inputs"]) if components[c].get("props", {}).get("label") == "Model")
    values[model] = "janus-pro"
    note = next(i for i, c in enumerate(compare["outputs"]) if components[c]["type"] == "markdown")
    frames = _streamed(raw, compare, values)
    assert not frames[-1]["success"] and "hub cannot be reached" in str(frames[-1]["output"]), frames[-1]
    notes = []
    # after its first value, a generator's output arrives as a diff: here a whole replacement
    for frame in (frame for frame in frames if frame["output"].get("data")):
        value = frame["output"]["data"][note]
        notes.append(value[0][2] if isinstance(value, list) and value and value[0][:2] == ["replace", []] else value)
    assert notes[0].startswith("*Comparing once janus-pro has loaded"), notes
    assert notes[-1] == "*Nothing was compared: the message above says why.*", notes
