"""Checks that can only run on the values (a loss that depends on an eigenvector's phase, two
NestedTensors with different offsets), and how their errors reach the user.

* ``runtime_check(bad, message)``: raises ``RuntimeCheckError(message)`` (a ``ValueError``) when
  any of ``bad`` is true. Eagerly that is the error itself. Under ``jax.jit`` the check runs as a
  host callback, and JAX delivers its exception as a ``jax.errors.JaxRuntimeError`` (on a CPU
  from the call, on a GPU from the call or the next wait on its result), whose status text is
  XLA's (``INTERNAL: CpuCallback error calling callback: Traceback ...``) and ends with
  ``RuntimeCheckError: <message>``. Nothing inside a callback can change that text: XLA formats
  the whole Python stack above the callback before the exception's type and message. So this
  module (imported with any op) gives ``JaxRuntimeError`` a ``__str__`` that puts the library's
  message first when the error carries a ``RuntimeCheckError``: ``str(error).splitlines()[0]``
  is the message naming the op and the argument, then a blank line and XLA's text unchanged
  (every other ``JaxRuntimeError`` prints as before; ``error.args`` is untouched). This is how
  the error reads under a plain ``jit`` on every backend, at no run-time cost. JAX also logs a
  failed callback's traceback on stderr; this module drops those log records for the library's
  own errors only.
* ``checked(fn)``: ``fn`` with those errors raised as the library's ``ValueError`` (the message
  alone), also for errors from inside a ``jax.jit``.
* ``checked_only(bad, message)``: a ``runtime_check`` that runs only inside ``checked``, for the
  checks of indices and offsets that are concrete in eager calls (checked on the host there) and
  traced in a jitted training step, where a host callback in every call would stall a GPU at
  each step. Outside ``checked`` a traced bad index makes the op's result NaN instead (each op's
  docstring says so): under a plain ``jit`` these checks raise nothing. The mode is a
  ``jax.make_user_context``, part of ``jit``'s cache key: a function traced outside ``checked``
  is traced again inside it, with the callbacks.

Why not ``checked`` by default: it waits for ``fn``'s result (``jax.block_until_ready``), which
ends the overlap of the host and an asynchronous device at every call, and it cannot wrap a
user's own ``jax.jit``; the message-first ``__str__`` needs neither.

Why not ``jax.experimental.checkify``: a ``checkify.check`` inside a user's ``jax.jit`` that is
not itself wrapped in ``checkify.checkify`` fails to trace, so it cannot be the default; and a
mode that switched between the two at trace time would be undone by ``jit``'s cache unless it is
part of the cache key (``checked_only``'s ``jax.make_user_context`` is), while ``checked``
catches both. JAX's ``error_check`` (``set_error_if``/``raise_if_error``) raises only where the
user calls ``raise_if_error`` after the computation, and does not support ``vmap``.
"""

from __future__ import annotations

import functools
import logging
import re

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules.mechanism import CALLBACK_LOGGERS

__all__ = ["RuntimeCheckError", "checked", "checked_only", "in_checked", "runtime_check"]

_MARKER = "RuntimeCheckError: "
_CHECKED = jax.make_user_context(default_value=False)  # True inside ``checked``: in jit's cache key


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


def in_checked() -> bool:
    """Whether the call runs inside ``checked`` (while tracing, too)."""
    return bool(_CHECKED.value)


def checked_only(bad, message: str) -> None:
    """``runtime_check(bad, message)`` inside ``checked``; nothing outside it (the op then makes
    its result NaN where ``bad``)."""
    if in_checked():
        runtime_check(bad, message)


class _DropOwnCallbackErrors(logging.Filter):
    """Drops JAX's "callback failed" log record when the exception is a ``RuntimeCheckError``
    (it is raised to the caller anyway); every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], RuntimeCheckError))


for _name in CALLBACK_LOGGERS:
    logging.getLogger(_name).addFilter(_DropOwnCallbackErrors())


# XLA's status text (kept across a reload of this module, which must not wrap it twice)
_JAX_STR = getattr(jax.errors.JaxRuntimeError.__str__, "xla_str", jax.errors.JaxRuntimeError.__str__)


def _jax_text(error: BaseException) -> str:
    return _JAX_STR(error) if isinstance(error, jax.errors.JaxRuntimeError) else str(error)


def library_message(error: BaseException) -> str | None:
    """The message of the ``RuntimeCheckError`` that ``error`` (a ``JaxRuntimeError``) carries,
    or None: the line after the last ``RuntimeCheckError: `` of XLA's text (a library message is
    one line; whatever a backend appends after it is not part of it: the next lines, and the
    `` [executable_name='...']`` that jax 0.12's CUDA runtime adds to the line itself)."""
    text = _jax_text(error)
    at = text.rfind(_MARKER)
    if at < 0:
        return None
    lines = text[at + len(_MARKER):].strip().splitlines()
    return _EXECUTABLE_NAME.sub("", lines[0]) if lines else None


_EXECUTABLE_NAME = re.compile(r" \[executable_name='[^']*'\]$")


def _message_first(error: jax.errors.JaxRuntimeError) -> str:
    """``JaxRuntimeError.__str__``: the library's message, a blank line, XLA's text, when the
    error carries a ``RuntimeCheckError``; XLA's text alone otherwise."""
    text = _JAX_STR(error)
    message = library_message(error)
    return text if message is None else f"{message}\n\n{text}"


_message_first.xla_str = _JAX_STR
jax.errors.JaxRuntimeError.__str__ = _message_first


def checked(fn):
    """``fn`` whose run-time check failures raise ``ValueError`` with the library's message (also
    when they come from inside ``jax.jit``, where JAX raises ``JaxRuntimeError``); ``fn``'s result
    is waited for (``jax.block_until_ready``) so that the error is raised here. Inside it the
    ``checked_only`` checks run too (out-of-range indices, invalid offsets under ``jit``).

    Example: ``jaxrules.checked(jax.jit(loss))(params)``.
    """

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            with _CHECKED(True):
                return jax.block_until_ready(fn(*args, **kwargs))
        except jax.errors.JaxRuntimeError as error:
            message = library_message(error)
            if message is None:
                raise
            raise ValueError(message) from None

    return run
