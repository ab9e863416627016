"""Recognise a lost accelerator, wherever the error surfaced.

When a TPU worker dies or its connection drops, TensorFlow raises
``UnavailableError`` ("Socket closed"), ``AbortedError`` (the device's
incarnation changed), ``DeadlineExceededError``, or errors saying "Unable
to find a context_id" or "TPU system has not been initialized". They may
arrive wrapped: raised inside a Keras callback, re-raised by the agent. So
the whole ``__cause__``/``__context__`` chain is examined.

On JAX the same losses arrive as ``JaxRuntimeError`` (``XlaRuntimeError``
in older jaxlib) whose message starts with the XLA status code:
``UNAVAILABLE``, ``DEADLINE_EXCEEDED`` or ``ABORTED``, or says the TPU
halted. Other XLA errors (``RESOURCE_EXHAUSTED``: out of memory,
``INVALID_ARGUMENT``: a bug) are not losses and are raised as they are.

Nothing here imports TensorFlow or JAX: if one is not imported yet, none of
its errors can exist, and the messages are matched as text.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

# TensorFlow error classes that mean "the device or its link went away".
LOSS_ERROR_TYPES = ("UnavailableError", "AbortedError", "DeadlineExceededError")

# Lower-case fragments of messages seen when a TPU or its worker is lost.
LOSS_MESSAGES = (
    "socket closed",
    "unable to find a context_id",
    "tpu system has not been initialized",
    "incarnation",
)

# JAX's runtime error classes (by name: jaxlib moved them between releases)
# and the XLA status codes, or words, that mean the device went away.
JAX_ERROR_TYPES = ("JaxRuntimeError", "XlaRuntimeError")
JAX_LOSS_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED")
JAX_LOSS_MESSAGES = ("tpu halted", "device halted", "tpu is halted")

# Extra fragments that make a failure to *connect* worth another try.
CONNECT_RETRY_MESSAGES = (
    "failed to connect",
    "connection refused",
    "connection reset",
    "deadline exceeded",
)


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it was raised from or while handling."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending.extend((current.__cause__, current.__context__))  # type: ignore[arg-type]


def _loss_types() -> tuple[type, ...]:
    tf = sys.modules.get("tensorflow")
    errors = getattr(tf, "errors", None) if tf is not None else None
    if errors is None:  # not imported, or still importing
        return ()
    found = (getattr(errors, name, None) for name in LOSS_ERROR_TYPES)
    return tuple(t for t in found if isinstance(t, type))


def _is_jax_loss(link: BaseException) -> bool:
    if type(link).__name__ not in JAX_ERROR_TYPES:
        return False
    text = str(link).lstrip()
    return text.startswith(JAX_LOSS_CODES) or any(
        fragment in text.lower() for fragment in JAX_LOSS_MESSAGES
    )


def _matches(
    exc: BaseException, types: tuple[type, ...], fragments: tuple[str, ...]
) -> bool:
    for link in exception_chain(exc):
        if _is_jax_loss(link):
            return True
        if types and isinstance(link, types):
            return True
        text = str(link).lower()
        if any(fragment in text for fragment in fragments):
            return True
    return False


def is_accelerator_loss(exc: BaseException) -> bool:
    """True if ``exc`` means the accelerator (or the link to it) was lost.

    Such a loss is recoverable in the same process: reconnect, rebuild the
    model in a fresh strategy scope, restore the last checkpoint.

    Args:
        exc: any exception, possibly wrapping the TensorFlow error.

    Returns:
        Whether ``exc`` or anything in its cause/context chain is a
        TensorFlow ``UnavailableError``, ``AbortedError`` or
        ``DeadlineExceededError``, a JAX runtime error with one of
        :data:`JAX_LOSS_CODES`, or carries one of :data:`LOSS_MESSAGES`.
    """
    return _matches(exc, _loss_types(), LOSS_MESSAGES)


def is_retryable_connect_error(exc: BaseException) -> bool:
    """True if a failed attempt to connect to the TPU is worth repeating."""
    if is_accelerator_loss(exc):
        return True
    return _matches(exc, (ConnectionError, TimeoutError), CONNECT_RETRY_MESSAGES)
