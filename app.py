"""specviz app: `python app.py` serves it on http://127.0.0.1:7860 (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT,
else on a Space 0.0.0.0 and PORT)."""

import os
import sys

from specviz.core.errors import REQUEST_ERRORS
from specviz.core.threads import configure_threads
from specviz.ui import build, launch_options, server_address

try:  # a wrong setting (SPECVIZ_DEVICE, SPECVIZ_MODELS, PORT, ...) is one line at start, not a traceback
    configure_threads()  # every core but one, or SPECVIZ_THREADS: a busy machine must not stall the runs
    demo = build()
    if __name__ == "__main__":
        host, port = server_address(dict(os.environ))
except REQUEST_ERRORS as error:
    sys.exit(f"specviz: {error}")

if __name__ == "__main__":
    demo.launch(server_name=host, server_port=port, **launch_options(demo))
