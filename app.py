"""specviz app: `python app.py` serves it on http://127.0.0.1:7860 (on a Space, on 0.0.0.0)."""

import os

from specviz.threads import configure_threads
from specviz.ui import CSS, MAX_UPLOAD_BYTES, build

configure_threads()  # every core but one, or SPECVIZ_THREADS: a busy machine must not stall the runs
demo = build()
demo.queue(default_concurrency_limit=1, max_size=32)

if __name__ == "__main__":
    on_space = bool(os.environ.get("SPACE_ID"))
    demo.launch(
        server_name="0.0.0.0" if on_space else os.environ.get("SPECVIZ_HOST", "127.0.0.1"),
        server_port=int(os.environ.get("PORT", "7860")),
        css=CSS,
        show_error=False,
        max_file_size=MAX_UPLOAD_BYTES,
    )
