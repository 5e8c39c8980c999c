"""Streams: a completion's chunks generated in their own thread, ahead of the client, and sent as
server-sent events ending in [DONE]."""
from __future__ import annotations

import asyncio
import threading
from typing import Iterator

import anyio


def chunk_tokens(chunk: dict) -> int:
    """1 when a streamed chunk carries generated text (a completion's or a chat delta's), else 0."""
    choice = (chunk.get("choices") or [{}])[0]
    return int(bool(choice.get("text") or (choice.get("delta") or {}).get("content")))


class AheadOfClient:
    """A chunk generator run in its own thread, up to `depth` chunks ahead of the client: the
    next token is computed while the last one is sent, and a chunk crosses threads once."""

    DONE = object()

    def __init__(self, chunks: Iterator[dict], loop: asyncio.AbstractEventLoop, depth: int = 8):
        self._chunks, self._loop = chunks, loop
        self._queue: asyncio.Queue = asyncio.Queue()
        self._room = threading.Semaphore(depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pypowerinfer-stream", daemon=True)
        self._thread.start()

    def _put(self, item) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _run(self) -> None:
        try:
            for chunk in self._chunks:
                self._room.acquire()
                if self._stop.is_set():
                    break
                self._put(chunk)
        except Exception as exc:  # noqa: BLE001 - handed to the client's side, which raises it
            self._put(exc)
        finally:
            self._chunks.close()  # ends the generation: the Llama is free again
            self._put(self.DONE)

    async def get(self):
        item = await self._queue.get()
        self._room.release()
        if isinstance(item, Exception):
            raise item
        return item

    async def close(self) -> None:
        """Stop generating (the stream ended or its client left) and wait until it has stopped."""
        self._stop.set()
        self._room.release()  # a producer waiting for room sees the stop
        await anyio.to_thread.run_sync(self._thread.join)
