"""Pinned cases of the fuzz test's fixed entries (issue 16; tests/test_fuzz_records.py's
``FUZZ_OPEN`` and tests/test_nonfinite.py's ``OPEN``): each the entry's input, its value and
gradients against torch 2.13, or the library's clear error where torch refuses."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import jaxrules.nn as nn

torch = pytest.importorskip("torch")


# ----------------------------------------------------------------------------------------------
# layer_norm / rms_norm: a 0-d input (was IndexError in the kernel records' wrappers)


@pytest.mark.parametrize("impl", ["xla", "pallas_interpret"])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_norm_empty_normalized_shape(op, impl):
    x = jnp.asarray(1.5)
    with pytest.raises(RuntimeError, match="at least 1-dimensional"):  # torch refuses too
        getattr(torch.nn.functional, op)(torch.tensor(1.5), ())
    with pytest.raises(ValueError, match=f"{op}: normalized_shape must name at least one axis"):
        getattr(nn, op)(x, x.shape[-1:], impl=impl)
    with pytest.raises(ValueError, match=f"{op}: normalized_shape"):
        getattr(nn, op)(x, 1, impl=impl)
