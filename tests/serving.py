"""A FastAPI app served by uvicorn in a thread on a free port, for the server tests."""
from __future__ import annotations

import threading
import time


def serve(app):
    """Start the app; returns (its base URL, a function that stops it)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    assert server.started, "server did not start"

    def stop():
        server.should_exit = True
        thread.join(timeout=10)

    return f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}", stop
