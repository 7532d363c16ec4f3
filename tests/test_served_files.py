"""Every file the app hands a browser arrives whole (issue 58, item 3): the launched app's file route, fetched by
several clients at once while their sessions make new pictures (Inspect's image, the same iteration again, as a
refresh after the race's retiming or a change of type size sends it) and new exports. A file a client was handed
is never written again: Gradio once rewrote a cached picture in place whenever the same picture was sent again,
and a browser still streaming it got a truncated file (h11: "Too little data for declared Content-Length")."""

import hashlib
import io
import json
import os
import threading
import time
import uuid
import zipfile
from pathlib import Path

import httpx
import pytest
from PIL import Image

pytestmark = pytest.mark.xdist_group("app")  # one launched app per test run

HAMMER_SECONDS = 12.0


class Session:
    """One browser's session, as raw queue calls: a call's outputs read from the session's stream."""

    def __init__(self, url: str, config: dict):
        self.url, self.api = url, f"{url}gradio_api"
        self.session = uuid.uuid4().hex
        self.ids = {d["api_name"]: d["id"] for d in config["dependencies"] if d["backend_fn"]}
        self.client = httpx.Client(timeout=120)

    def call(self, name: str, data: list) -> list:
        body = {"data": data, "fn_index": self.ids[name], "session_hash": self.session, "event_data": None}
        joined = self.client.post(f"{self.api}/queue/join", json=body)
        assert joined.status_code == 200, joined.text[:300]
        event = joined.json()["event_id"]
        with self.client.stream("GET", f"{self.api}/queue/data", params={"session_hash": self.session}) as sse:
            for line in sse.iter_lines():
                message = json.loads(line[5:]) if line.startswith("data:") else {}
                if message.get("event_id") == event and message["msg"] == "process_completed":
                    assert message["success"], message["output"]
                    return message["output"]["data"]
        raise AssertionError(f"{name} never completed")

    def upload(self, *paths: Path) -> list[dict]:
        files = [("files", (path.name, path.read_bytes(), "application/json")) for path in paths]
        sent = self.client.post(f"{self.api}/upload", files=files)
        assert sent.status_code == 200, sent.text[:300]
        return [
            {"path": server_path, "orig_name": path.name, "meta": {"_type": "gradio.FileData"}}
            for server_path, path in zip(sent.json(), paths, strict=True)
        ]


def handed_files(outputs) -> list[dict]:
    """Every file (FileData) among a call's outputs, in updates and lists too."""
    if isinstance(outputs, dict):
        if outputs.get("meta", {}).get("_type") == "gradio.FileData" and outputs.get("url"):
            return [outputs]
        return [found for value in outputs.values() for found in handed_files(value)]
    if isinstance(outputs, list):
        return [found for value in outputs for found in handed_files(value)]
    return []


def whole(name: str, body: bytes) -> str | None:
    """Why `body` is not a whole file of its kind; None where it is."""
    try:
        if name.endswith((".png", ".gif", ".webp")):
            with Image.open(io.BytesIO(body)) as image:
                for frame in range(getattr(image, "n_frames", 1)):
                    image.seek(frame)
                    image.load()
        elif name.endswith(".json"):
            json.loads(body)
        elif name.endswith(".zip"):
            with zipfile.ZipFile(io.BytesIO(body)) as archive:
                bad = archive.testzip()
                if bad is not None:
                    return f"{bad} is damaged in the archive"
    except Exception as error:  # any damage: a truncated PNG, JSON or archive
        return f"{type(error).__name__}: {error}"
    return None


@pytest.fixture
def raced_traces(tiny, tmp_path) -> list[Path]:
    from specviz.decoding import run

    trace, ar = run(tiny, "sjd", "red apple", 0, params={"window": 16}), run(tiny, "ar", "red apple", 0)
    trace.save(tmp_path / "trace.json")
    ar.save(tmp_path / "ar-trace.json")
    return [tmp_path / "trace.json", tmp_path / "ar-trace.json"]


def test_every_picture_and_export_arrives_whole_while_clients_fetch_and_sessions_make_more(server, raced_traces, capfd):
    """Three sessions of the same race ask Inspect for the same iteration again and again (a refresh sends it
    again with the same picture), step away and back, and export; eight clients fetch every file handed out,
    many times over, meanwhile. Every fetch is whole (its declared length, a decodable image, JSON or archive)
    and the same bytes as every other fetch of that address; a file handed out is never changed on disk."""
    config = httpx.get(f"{server}config", timeout=30).json()
    sessions = [Session(server, config) for _ in range(3)]
    for session in sessions:
        uploaded = session.upload(*raced_traces)
        session.call("replay", [uploaded, False, False])
    j = 5
    handed: dict[str, tuple[str, str]] = {}  # address -> (file on disk, its hash when handed out)
    lock, stop = threading.Lock(), threading.Event()
    problems: list[str] = []
    fetched = {"count": 0}

    def hand_out(outputs) -> None:
        for file in handed_files(outputs):
            digest = hashlib.sha256(Path(file["path"]).read_bytes()).hexdigest()
            with lock:
                handed.setdefault(file["url"], (file["path"], digest))

    def make(session: Session, exports: bool) -> None:
        calls = 0
        while not stop.is_set():
            try:
                if exports and calls % 4 == 3:
                    hand_out(session.call("export", [None, j, False, True]))
                elif calls % 2:
                    hand_out(session.call("refresh", [None, j, "run_length", False, False, False]))
                else:
                    hand_out(session.call("at_iteration", [None, j, False, False, False]))
                    hand_out(session.call("step_on", [None, j, False, False, False]))
            except Exception as error:
                with lock:
                    problems.append(f"making: {type(error).__name__}: {error}")
                return
            calls += 1

    first_body: dict[str, str] = {}

    def fetch() -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                with lock:
                    addresses = list(handed)
                if not addresses:
                    time.sleep(0.01)
                    continue
                for address in addresses[-12:]:
                    url = address if address.startswith("http") else f"{server.rstrip('/')}{address}"
                    try:
                        answer = client.get(url)
                        body = answer.content
                    except httpx.HTTPError as error:  # the server broke off a response it had begun
                        with lock:
                            problems.append(f"{address}: {type(error).__name__}: {error}")
                        continue
                    declared = int(answer.headers.get("content-length", len(body)))
                    damage = whole(address, body) if answer.status_code == 200 else f"HTTP {answer.status_code}"
                    if damage is None and declared != len(body):
                        damage = f"{len(body)} bytes of {declared} declared"
                    digest = hashlib.sha256(body).hexdigest()
                    with lock:
                        fetched["count"] += 1
                        if damage is not None:
                            problems.append(f"{address}: {damage}")
                        elif first_body.setdefault(address, digest) != digest:
                            problems.append(f"{address}: fetched twice with different bytes")

    threads = [threading.Thread(target=make, args=(s, k == 0), daemon=True) for k, s in enumerate(sessions)]
    threads += [threading.Thread(target=fetch, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(HAMMER_SECONDS)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    changed = [
        url for url, (path, digest) in handed.items()
        if os.path.exists(path) and hashlib.sha256(Path(path).read_bytes()).hexdigest() != digest
    ]  # fmt: skip
    names = [Path(path).name for path, _ in handed.values()]
    exports = {name for name in names if not name.endswith(".png") or name.startswith("iteration-")}
    pictures = len(names) - len(exports)
    print(f"{len(handed)} files handed out ({pictures} pictures, exports {sorted(exports)}), {fetched['count']} "
          f"fetches, {len(problems)} problems")  # fmt: skip
    assert {"trace.json", "ar-trace.json", "figures.zip", "animation.gif"} <= exports, exports  # exports were made
    assert not problems, f"{len(problems)} fetches not whole, first ones: {problems[:5]}"
    assert "Content-Length" not in capfd.readouterr().err  # the server's h11 tracebacks, as the issue saw them
    assert not changed, f"files changed after they were handed out: {changed[:5]}"
    assert pictures >= 3, names  # pictures were made, the same one several times, each its own file


def test_a_picture_sent_again_is_a_new_file_and_the_one_handed_out_is_never_written_again():
    """The same picture sent twice by any image of the page (Inspect's refresh sends the iteration's picture
    again) is two files, the first not written again (its bytes and time unchanged); so is a picture sent in an
    update (`gr.update(value=...)`, which Gradio answers with a new component of the same class) and as an
    array; the picture's description is kept."""
    import gradio as gr
    import numpy as np

    from specviz.ui import build

    demo = build()
    images = [block for block in demo.blocks.values() if isinstance(block, gr.Image)]
    assert {"method-image", "ar-image", "race-map", "inspect-image", "contrast-image"} <= {i.elem_id for i in images}
    picture = Image.new("RGB", (384, 384), "#0072B2")
    picture.info["Description"] = "sjd: 24 tokens after iteration 5"
    for image in images:
        rebuilt = image.__class__(**{**image.constructor_args, "render": False})  # as Gradio answers an update
        for component, value in ((image, picture), (rebuilt, picture), (image, np.asarray(picture))):
            first = Path(component.postprocess(value).path)
            was = first.stat().st_mtime_ns, first.read_bytes()
            time.sleep(0.01)
            second = Path(component.postprocess(value).path)
            assert second != first, f"{image.elem_id}: the same file handed out twice, written again in between"
            assert (first.stat().st_mtime_ns, first.read_bytes()) == was
            assert first.name == second.name == f"image.{image.format}"  # a download's name, as before
        with Image.open(image.postprocess(picture).path) as shown:
            assert shown.info["Description"] == picture.info["Description"]
