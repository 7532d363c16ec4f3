"""The Gradio app: race a method against AR, inspect every iteration, compare, replay and export.

One module per tab (`race`, `inspection`, `compare`, `replay`), each building its components and
wiring its handlers; `controls` is the side panel, `activity` what Stop reads, `layout` the page.
What the tabs share on the server: `compute` (the one compute thread and a request's budget),
`loading` (the offered models, loaded once, and GPU work), `pictures` and `handover` (decoded pictures,
runs handed to Inspect), `outputs` (handlers' values by name), `errors` (failures as messages),
`checks` and `guard` (what a client sends). Tabs import only these, never each other. Only calls
down: models and decoding to run, specviz.viz to draw. Each browser session keeps its own runs in
`gr.State`, so concurrent users never see each other's traces.
"""

from specviz.ui.checks import MAX_UPLOAD_BYTES
from specviz.ui.layout import CSS, build, launch_options, server_address

__all__ = ["CSS", "MAX_UPLOAD_BYTES", "build", "launch_options", "server_address"]
