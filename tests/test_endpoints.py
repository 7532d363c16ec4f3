"""Every endpoint of the launched app, called as a hostile client calls it (raw queue calls: any count,
any type, file references to server paths): each bad call is refused with one short message and one
line in the log, never a stack trace, and before its handler runs."""

import json
import math
import shutil
import time
import uuid
from pathlib import Path

import httpx
import pytest
from gradio_client import Client, handle_file

import specviz

pytestmark = pytest.mark.xdist_group("app")  # one launched app per test run

HUGE = "x" * 1_000_000
MESSAGE_LIMIT = 300  # characters: a refusal quotes a bad value briefly, never whole


def _file(path: str) -> dict:
    return {"path": path, "meta": {"_type": "gradio.FileData"}, "orig_name": "trace.json"}


PASSWD = _file("/etc/passwd")
# bad values by component type; each is refused by the component's own check, so no case runs a model
BAD_VALUES = {
    "number": ["x", math.nan, math.inf, [1], True, 2.5, PASSWD],
    "slider": [None, "x", math.nan, 1e308, PASSWD],
    "checkbox": [None, "x", 1, PASSWD],
    "textbox": [7, ["x"], HUGE, PASSWD],
    "markdown": [7, PASSWD],
    "dropdown": ["not a choice", HUGE, ["x"], PASSWD],
    "radio": ["not a choice", None, PASSWD],
    "checkboxgroup": ["x", ["not a choice"], PASSWD],
    "dataset": ["x", 10**6, None],
    "file": [
        [PASSWD],
        [_file("/tmp/gradio/no-such-upload/trace.json")],
        [_file("/tmp/gradio")],
        [_file("../../../../etc/passwd")],
        [_file(str(Path(specviz.__file__)))],
        [{"path": "x", "url": "http://169.254.169.254/latest", "meta": {"_type": "gradio.FileData"}}],
        [{"path": 7, "meta": 5}],
        PASSWD,
        "x",
    ],
}


class RawClient:
    """Queue calls with exactly the values given, as any HTTP client can send them."""

    def __init__(self, url: str):
        self.api = f"{url}gradio_api"
        self.session = uuid.uuid4().hex
        self.config = httpx.get(f"{url}config", timeout=30).json()

    def call(self, fn_index: int, data: list) -> tuple[str, str | None]:
        """('ok', None) or ('refused', the message); the call's end, read from the session's stream."""
        body = {"data": data, "fn_index": fn_index, "session_hash": self.session, "event_data": None}
        joined = httpx.post(
            f"{self.api}/queue/join", content=json.dumps(body), headers={"content-type": "application/json"}
        )
        assert joined.status_code == 200, joined.text[:300]
        event = joined.json()["event_id"]
        with httpx.stream("GET", f"{self.api}/queue/data", params={"session_hash": self.session}, timeout=120) as sse:
            for line in sse.iter_lines():
                message = json.loads(line[5:]) if line.startswith("data:") else {}
                if message.get("event_id") == event and message["msg"] == "process_completed":
                    return ("ok", None) if message["success"] else ("refused", message["output"].get("error"))
        raise AssertionError("the call never completed")


def _cases(config: dict):
    """(endpoint, case, fn_index, values) for each endpoint: wrong counts, then each kind of input it takes
    (once per kind: a race's 30 numbers share one check) with each bad value of that kind."""
    components = {c["id"]: c for c in config["components"]}
    seen = set()
    for dependency in config["dependencies"]:
        if not dependency["backend_fn"]:
            continue
        name = dependency["api_name"]
        kinds = tuple(components[i]["type"] for i in dependency["inputs"])
        if (name.rstrip("_0123456789"), kinds) in seen:  # race_1 ... race_5 are one handler
            continue
        seen.add((name.rstrip("_0123456789"), kinds))
        defaults = [components[i].get("props", {}).get("value") for i in dependency["inputs"]]
        for count in {0, max(0, len(defaults) - 1), len(defaults) + 1} - {len(defaults)}:
            yield name, f"{count} values", dependency["id"], [*defaults, None][:count]
        tried = set()
        for position, component in enumerate(components[i] for i in dependency["inputs"]):
            kind = component["type"]
            if kind in tried or kind not in BAD_VALUES:
                continue
            tried.add(kind)
            for value in BAD_VALUES[kind]:
                values = list(defaults)
                values[position] = value
                shown = f"<{len(value):,} characters>" if value is HUGE else repr(value)[:60]
                yield name, f"{component['props'].get('label') or kind} = {shown}", dependency["id"], values


def test_every_endpoint_refuses_bad_values_with_one_line_and_no_stack_trace(server, capfd, caplog):
    client = RawClient(server)
    cases = list(_cases(client.config))
    assert len({name for name, *_ in cases}) >= 25 and len(cases) >= 150
    bad = []
    capfd.readouterr()
    with caplog.at_level("WARNING", logger="specviz.ui"):
        for name, case, fn_index, values in cases:
            caplog.clear()
            status, message = client.call(fn_index, values)
            lines = [r.getMessage() for r in caplog.records if r.name == "specviz.ui"]
            log = capfd.readouterr().err
            if status != "refused" or len(message or "") > MESSAGE_LIMIT or len(lines) != 1 or "Traceback" in log:
                bad.append(f"{name}: {case}: {status}, {(message or '')[:120]!r}, {len(lines)} log lines")
    assert not bad, f"{len(bad)} of {len(cases)} cases:\n" + "\n".join(bad)


def test_the_iteration_slider_refuses_a_value_outside_its_current_range(server, capfd):
    """The slider's range is set per run: a value valid for the last run's range is refused for this one,
    with this run's range in the message."""
    examples = Path(specviz.__file__).parent / "data" / "examples"
    client = Client(server, verbose=False)
    client.predict([handle_file(str(examples / "red-apple-ar.json"))], False, False, api_name="/replay")  # 0 to 255
    _, iteration, *_ = client.predict(
        [handle_file(str(examples / "red-apple-sjd.json"))], False, False, api_name="/replay"
    )
    last = iteration["maximum"]
    assert last == 87
    capfd.readouterr()
    for value in (200, last + 1, -1):
        with pytest.raises(
            Exception, match=rf"Iteration \(arrow keys step\): {value} is out of range \(allowed: 0 to {last}\)"
        ):
            client.predict(value, False, False, api_name="/at_iteration")
    for value, message in ((2.5, "2.5 is not a whole number"), ("7", "a number is needed, got '7'")):
        with pytest.raises(Exception, match=message):
            client.predict(value, False, False, api_name="/step_on")
    assert "Traceback" not in capfd.readouterr().err
    assert "iteration 87/" in json.loads(
        client.predict(last, False, False, api_name="/at_iteration")[0]["value"]["plot"]
    )["layout"]["title"]["text"].replace("<br>", " ")


def test_a_huge_prompt_to_the_hint_is_refused_before_any_work(server, capfd):
    client = RawClient(server)
    hint = next(d["id"] for d in client.config["dependencies"] if d["api_name"] == "hint")
    started = time.perf_counter()
    status, message = client.call(hint, ["tiny", "a" * 10_000_000])
    assert time.perf_counter() - started < 10  # the upload of 10 MB, not seconds of encoding
    assert status == "refused" and message == "Prompt: 10,000,000 characters; the limit is 2,000"
    assert client.call(hint, ["tiny", "a slice of pizza" + " " * 1984])[0] == "ok"  # within the limit: a hint
    assert "Traceback" not in capfd.readouterr().err


def test_exports_are_served_only_as_the_copies_a_session_received(server):
    """The export folder itself is not served (only the copies Gradio makes for the session that asked,
    under an unguessable name); the REST routes that would skip the queue are closed."""
    from specviz.ui.replay import EXPORT_ROOT, export_folder

    made = export_folder() / "trace.json"
    made.write_text("{}")
    try:
        assert httpx.get(f"{server}gradio_api/file={made}").status_code == 403
        assert httpx.get(f"{server}gradio_api/file={EXPORT_ROOT}").status_code == 403
    finally:
        shutil.rmtree(made.parent)
    closed = httpx.post(f"{server}gradio_api/run/hint", json={"data": ["tiny", "pizza"]})
    assert closed.status_code == 404 and "join the queue" in closed.text
