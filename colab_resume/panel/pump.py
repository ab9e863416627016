"""Handle the notebook's pending widget messages from inside a running cell.

A Jupyter kernel handles messages (button clicks arrive as ``comm_msg``) on
its main thread, between cells. While a cell runs ``fit`` that thread is
busy, so a click waits in a socket until training ends — a Stop button
that stops nothing. This pump, called from the training loop's own thread
(the kernel's main thread, inside the running cell), takes the waiting
messages off the socket the main thread listens on:

* widget messages (``comm_open``, ``comm_msg``, ``comm_close``) are handled
  at once by the kernel's own comm handlers, so button callbacks run;
* everything else (the next cell's ``execute_request``...) is handed back,
  in arrival order, to the kernel's own receive callback on its event
  loop, which runs it after the current cell, exactly as if it had never
  been touched.

Only headers are peeked at for messages handed back: the session's replay
guard records a signature only when content is unpacked, so the kernel
later accepts the same message as new.

Where the main thread reads:

* ipykernel 6 (Colab ships 6.x): the shell ROUTER stream, ``kernel.shell_stream``;
* ipykernel 7: a shell-channel thread reads the ROUTER and forwards each
  message through an in-process socket pair to the main thread; the pump
  reads that pair's receiving end
  (``shell_channel_thread.manager.get_shell_channel_to_subshell_pair(None)``).

Anything unrecognised makes :meth:`KernelPump.find` return None: the panel
still refreshes, its buttons then act when the cell ends, and nothing is
ever lost. Widget updates are sent from the same thread, in the running
cell's context, which is what Colab needs to render them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

COMM_TYPES = frozenset({"comm_open", "comm_msg", "comm_close"})
# A safety bound per call; a notebook has a handful of messages waiting.
MAX_MESSAGES = 10_000


class KernelPump:
    """Takes pending shell messages off the kernel's main-thread socket.

    Build it with :meth:`find`; call :meth:`pump` from the kernel's main
    thread while a cell runs.

    Args:
        kernel: the running ``ipykernel`` kernel.
        stream: the ``ZMQStream`` the main thread receives shell messages on.
        deliver: the stream's receive callback (what the event loop would
            call with each message).
    """

    def __init__(self, kernel: Any, stream: Any, deliver: Callable[..., Any]) -> None:
        self.kernel = kernel
        self.stream = stream
        self.deliver = deliver
        self.handled = 0  # widget messages handled so far (for tests and the bench)
        self.handed_back = 0

    @classmethod
    def find(cls) -> KernelPump | None:
        """The pump for the kernel this code runs in, or None outside a kernel."""
        if "ipykernel" not in sys.modules or "IPython" not in sys.modules:
            return None  # never import a notebook stack from a script
        try:
            from IPython import get_ipython

            kernel = getattr(get_ipython(), "kernel", None)
            if kernel is None or getattr(kernel, "session", None) is None:
                return None
            stream = _main_shell_stream(kernel)
            deliver = getattr(stream, "_recv_callback", None)
            if stream is None or deliver is None or stream.socket is None:
                log.info("panel: unknown ipykernel layout; clicks act after the cell")
                return None
            return cls(kernel, stream, deliver)
        except Exception:  # an unknown kernel: stay inert, never break training
            log.info("panel: cannot reach the kernel's messages", exc_info=True)
            return None

    def pump(self) -> int:
        """Handle the widget messages waiting now; returns how many.

        A no-op off the kernel's main thread: the socket belongs to it.
        """
        if threading.current_thread() is not threading.main_thread():
            return 0
        import zmq

        socket = self.stream.socket
        held: list[Any] = []
        handled = 0
        # Drain to EAGAIN: the socket's readiness signal is edge-triggered, and
        # a message left behind would not wake the stream again.
        for _ in range(MAX_MESSAGES):
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            try:
                if self._handle_if_widget(frames):
                    handled += 1
                    continue
            except Exception:  # a broken widget message must not stop training
                log.warning("panel: a widget message failed", exc_info=True)
                continue
            held.append(frames)
        if held:
            self.handed_back += len(held)
            self.stream.io_loop.add_callback(self._hand_back, held)
        self.handled += handled
        return handled

    def _handle_if_widget(self, frames: list[Any]) -> bool:
        session = self.kernel.session
        idents, parts = session.feed_identities(list(frames), copy=False)
        header = session.deserialize(parts, content=False, copy=False)["header"]
        msg_type = header.get("msg_type")
        if msg_type not in COMM_TYPES:
            return False
        msg = session.deserialize(parts, content=True, copy=False)
        handler = self.kernel.shell_handlers.get(msg_type)
        if handler is None:
            return True
        result = handler(self.stream, idents, msg)
        if inspect.isawaitable(result):
            _run_to_completion(result)
        return True

    def _hand_back(self, held: list[Any]) -> None:
        """On the kernel's event loop: deliver what the pump took, in order."""
        for frames in held:
            result = self.deliver(frames)
            if inspect.isawaitable(result):
                asyncio.ensure_future(result)


def _main_shell_stream(kernel: Any) -> Any:
    thread = getattr(kernel, "shell_channel_thread", None)
    if thread is not None and getattr(kernel, "_supports_kernel_subshells", True):
        manager = getattr(thread, "manager", None)
        pair_of = getattr(manager, "get_shell_channel_to_subshell_pair", None)
        if pair_of is None:
            return None
        return getattr(pair_of(None), "to_stream", None)
    return getattr(kernel, "shell_stream", None)


def _run_to_completion(awaitable: Any) -> None:
    """Drive a comm handler's coroutine that never really waits."""
    coroutine = awaitable.__await__()
    try:
        for _ in range(100):
            coroutine.send(None)
    except StopIteration:
        return
    finally:
        coroutine.close()
    log.warning("panel: a widget handler waited on the event loop; dropped it")
