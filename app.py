"""specviz app: `python app.py` serves it on http://127.0.0.1:7860 (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT,
else on a Space 0.0.0.0 and PORT)."""

import os

from specviz.core.threads import configure_threads
from specviz.ui import build, launch_options, server_address

configure_threads()  # every core but one, or SPECVIZ_THREADS: a busy machine must not stall the runs
demo = build()

if __name__ == "__main__":
    host, port = server_address(dict(os.environ))
    demo.launch(server_name=host, server_port=port, **launch_options(demo))
