"""The Gradio app: race a method against AR, inspect every iteration, compare, replay and export.

One module per tab (`race`, `inspection`, `compare`, `replay`), each building its components and
wiring its handlers; `controls` is the side panel, `service` what they share on the server,
`activity` what Stop reads, `layout` the page. Tabs import only these, never each other. Only calls
down: models and decoding to run, specviz.viz to draw. Each browser session keeps its own runs in
`gr.State`, so concurrent users never see each other's traces.
"""

from specviz.ui.layout import CSS, build, launch_options
from specviz.ui.service import MAX_UPLOAD_BYTES, server_address

__all__ = ["CSS", "MAX_UPLOAD_BYTES", "build", "launch_options", "server_address"]
