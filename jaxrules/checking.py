"""Checks that can only run on the values (a loss that depends on an eigenvector's phase, two
NestedTensors with different offsets), and how their errors reach the user.

* ``runtime_check(bad, message)``: raises ``RuntimeCheckError(message)`` (a ``ValueError``) when
  any of ``bad`` is true. Eagerly that is the error itself. Under ``jax.jit`` the check runs as a
  host callback, and JAX delivers its exception as a ``jax.errors.JaxRuntimeError`` whose text
  ends with ``RuntimeCheckError: <message>`` (XLA puts the callback's traceback first; nothing in
  a callback can change that). JAX also logs a failed callback's traceback on stderr; this module
  drops those log records for the library's own errors only.
* ``checked(fn)``: ``fn`` with those errors raised as the library's ``ValueError`` (the message
  alone, first), also for errors from inside a ``jax.jit``.

Why not ``jax.experimental.checkify``: a ``checkify.check`` inside a user's ``jax.jit`` that is
not itself wrapped in ``checkify.checkify`` fails to trace, so it cannot be the default; and a
checked mode that switched between the two at trace time would be undone by ``jit``'s cache (a
function traced outside the mode keeps its callback), while ``checked`` catches both.
"""

from __future__ import annotations

import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules.mechanism import CALLBACK_LOGGERS

__all__ = ["RuntimeCheckError", "checked", "runtime_check"]

_MARKER = "RuntimeCheckError: "


class RuntimeCheckError(ValueError):
    """A check of the values that failed (``runtime_check``); its message names the op."""


def _raise_if(bad, message):
    if np.any(bad):
        raise RuntimeCheckError(message)


@jax.custom_batching.custom_vmap
def _any_over_batch(bad):
    """``any(bad)``; under ``vmap`` over the batch too, so the result is not batched: JAX's
    batching rule of a host callback slices its batched arguments one entry at a time, which a
    batch axis sharded over an ``Explicit`` mesh refuses (a slice of one of 8 shards)."""
    return jnp.any(bad)


@_any_over_batch.def_vmap
def _any_over_batch_vmap(axis_size, in_batched, bad):
    del axis_size, in_batched
    return _any_over_batch(bad), False


def runtime_check(bad, message: str) -> None:
    """Raise ``RuntimeCheckError(message)`` if any of ``bad`` (a boolean array) is true, from a
    host callback, so the check also fires under ``jit``; under ``vmap``, if it is true for any
    entry of the batch (the callback gets one boolean)."""
    jax.debug.callback(functools.partial(_raise_if, message=message), _any_over_batch(bad))


class _DropOwnCallbackErrors(logging.Filter):
    """Drops JAX's "callback failed" log record when the exception is a ``RuntimeCheckError``
    (it is raised to the caller anyway); every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], RuntimeCheckError))


for _name in CALLBACK_LOGGERS:
    logging.getLogger(_name).addFilter(_DropOwnCallbackErrors())


def library_message(error: BaseException) -> str | None:
    """The message of the ``RuntimeCheckError`` that ``error`` (a ``JaxRuntimeError``) carries,
    or None."""
    text = str(error)
    at = text.rfind(_MARKER)
    return None if at < 0 else text[at + len(_MARKER):].strip()


def checked(fn):
    """``fn`` whose run-time check failures raise ``ValueError`` with the library's message (also
    when they come from inside ``jax.jit``, where JAX raises ``JaxRuntimeError``); ``fn``'s result
    is waited for (``jax.block_until_ready``) so that the error is raised here.

    Example: ``jaxrules.checked(jax.jit(loss))(params)``.
    """

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return jax.block_until_ready(fn(*args, **kwargs))
        except jax.errors.JaxRuntimeError as error:
            message = library_message(error)
            if message is None:
                raise
            raise ValueError(message) from None

    return run
