"""``jaxrules.interpret_cache``: an interpreted kernel called several times in one program is
lowered once; the compiled path calls the entry point as it is."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules.interpret_cache import traced_once_when_interpreted
from jaxrules.nested import kernels

BLOCK = 16


def _forward(x):
    """The ragged attention forward kernel, interpreted, on 2 sequences (5 and 16 rows) of one head."""
    meta = kernels.block_meta(jnp.array([0, 5, 21]), None, 2, BLOCK)
    return kernels.forward(meta, x, x, x, scale=0.25, block=BLOCK, interpret=True)[0]


def test_a_kernel_run_twice_is_lowered_once():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((1, 3 * BLOCK, 16)))
    whiles = lambda f: jax.jit(f).lower(x).as_text().count("stablehlo.while")  # noqa: E731
    once = whiles(_forward)
    assert once > 0  # the interpreter's loops over the grid and the key blocks
    assert whiles(lambda x: _forward(x) + _forward(2 * x)) == once
    np.testing.assert_allclose(jax.jit(_forward)(x), _forward(x))


def test_compiled_path_is_not_wrapped():
    traced = []

    @traced_once_when_interpreted(lambda statics: statics["interpret"])
    def entry(x, *, interpret):
        traced.append(isinstance(x, jax.core.Tracer))
        return x + 1

    entry(jnp.ones(2), interpret=False)
    entry(jnp.ones(2), interpret=True)
    entry(jnp.ones(2), interpret=True)  # traced once per shape
    assert traced == [False, True]
