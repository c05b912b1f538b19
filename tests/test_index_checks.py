"""Out-of-range indices and invalid offsets: where torch raises, a ``ValueError`` naming the op
with concrete inputs (also under an eager ``vmap``) and inside ``jaxrules.checked`` (also under
``jit``); under plain ``jit``,
where no check runs, NaN, never a finite wrong value."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxrules
import jaxrules.nn as rnn
import jaxrules.numpy as rnp
from jaxrules import nested

X = np.random.default_rng(0).standard_normal((2, 3))
W = np.arange(8.0).reshape(4, 2)

CASES = {
    "nll_loss_negative": (lambda x, t: rnn.nll_loss(x, t), lambda x, t: F.nll_loss(x, t), X, [0, -1]),
    "nll_loss_past_the_end": (lambda x, t: rnn.nll_loss(x, t, reduction="sum"),
                              lambda x, t: F.nll_loss(x, t, reduction="sum"), X, [3, 0]),
    "cross_entropy_past_the_end": (lambda x, t: rnn.cross_entropy(x, t), lambda x, t: F.cross_entropy(x, t), X, [0, 3]),
    "cross_entropy_negative_none": (lambda x, t: rnn.cross_entropy(x, t, reduction="none", label_smoothing=0.1),
                                    lambda x, t: F.cross_entropy(x, t, reduction="none", label_smoothing=0.1),
                                    X, [-2, 1]),
    "embedding_past_the_end": (lambda w, i: rnn.embedding(i, w), lambda w, i: F.embedding(i, w), W, [0, 4]),
    "embedding_negative": (lambda w, i: rnn.embedding(i, w), lambda w, i: F.embedding(i, w), W, [-1, 2]),
    "scatter_reduce_past_the_end": (lambda x, i: rnp.scatter_reduce(x, 0, i, jnp.ones((2, 2)), "sum"),
                                    lambda x, i: x.scatter_reduce(0, i, torch.ones(2, 2, dtype=x.dtype), "sum"),
                                    W, [[0, 1], [4, 0]]),
    "scatter_reduce_negative_amax": (lambda x, i: rnp.scatter_reduce(x, 1, i, jnp.ones((1, 2)), "amax"),
                                     lambda x, i: x.scatter_reduce(1, i, torch.ones(1, 2, dtype=x.dtype), "amax"),
                                     W, [[0, -1]]),
    "index_reduce_past_the_end": (lambda x, i: rnp.index_reduce(x, 0, i, jnp.ones((2, 2)), "prod"),
                                  lambda x, i: x.index_reduce(0, i, torch.ones(2, 2, dtype=x.dtype), "prod"),
                                  W, [1, 4]),
    "index_reduce_negative_mean": (lambda x, i: rnp.index_reduce(x, 1, i, jnp.ones((4, 1)), "mean"),
                                   lambda x, i: x.index_reduce(1, i, torch.ones(4, 1, dtype=x.dtype), "mean"),
                                   W, [-2]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_out_of_range_index_raises_eagerly_and_checked_and_is_nan_under_jit(name):
    ours, theirs, x, index = CASES[name]
    with pytest.raises((IndexError, RuntimeError)):
        theirs(torch.tensor(x), torch.tensor(index))
    i = jnp.asarray(index)
    with pytest.raises(ValueError, match=r"^(nll_loss|cross_entropy|embedding|scatter_reduce|index_reduce): "):
        ours(jnp.asarray(x), i)
    with pytest.raises(ValueError, match="out of range"):
        jaxrules.checked(jax.jit(ours))(jnp.asarray(x), i)
    value = jax.jit(ours)(jnp.asarray(x), i)
    grad = jax.jit(jax.grad(lambda a, b: jnp.sum(ours(a, b))))(jnp.asarray(x), i)
    assert np.isnan(value).any() and np.isnan(grad).any()
    # The same jitted function, called in and out of checked: each traced in its mode.
    jitted = jax.jit(ours)
    assert np.isnan(jitted(jnp.asarray(x), i)).any()
    with pytest.raises(ValueError):
        jaxrules.checked(jitted)(jnp.asarray(x), i)
    assert np.isnan(jitted(jnp.asarray(x), i)).any()


@pytest.mark.parametrize("name", sorted(CASES))
def test_out_of_range_index_raises_under_an_eager_vmap(name):
    """torch.func.vmap raises where torch does; so does an eager ``jax.vmap`` (each example's
    indices are known on the host), one vmap or two; an in-range batch gives the row-by-row
    values."""
    ours, _, x, index = CASES[name]
    batch = jnp.stack([jnp.asarray(index)] * 3)
    with pytest.raises(ValueError, match=r"^(nll_loss|cross_entropy|embedding|scatter_reduce|index_reduce): "):
        jax.vmap(lambda i: ours(jnp.asarray(x), i))(batch)
    with pytest.raises(ValueError):
        jax.vmap(jax.vmap(lambda i: ours(jnp.asarray(x), i)))(batch[None])
    good = jnp.zeros_like(batch)
    np.testing.assert_allclose(jax.vmap(lambda i: ours(jnp.asarray(x), i))(good),
                               jnp.stack([ours(jnp.asarray(x), g) for g in good]), rtol=1e-12)


def test_in_range_indices_pass_checked_under_jit_as_torch():
    t = jnp.asarray([2, -100])
    value = jaxrules.checked(jax.jit(rnn.cross_entropy))(jnp.asarray(X), t)
    np.testing.assert_allclose(value, F.cross_entropy(torch.tensor(X), torch.tensor([2, -100])).item(), rtol=1e-12)
    rows = jaxrules.checked(jax.jit(rnn.embedding))(jnp.asarray([3, 0], jnp.int8), jnp.asarray(W))
    np.testing.assert_array_equal(rows, F.embedding(torch.tensor([3, 0]), torch.tensor(W)).numpy())


def test_in_range_scatter_indices_pass_checked_under_jit_as_torch():
    def scatter(x, i):
        return rnp.scatter_reduce(x, 0, i, jnp.full((2, 2), 3.0), "amax", include_self=False)

    i = np.asarray([[3, 0], [3, 1]])
    expected = torch.tensor(W).scatter_reduce(0, torch.tensor(i), torch.full((2, 2), 3.0, dtype=torch.float64),
                                              "amax", include_self=False).numpy()
    np.testing.assert_array_equal(jax.jit(scatter)(jnp.asarray(W), jnp.asarray(i)), expected)
    checked = jaxrules.checked(jax.jit(scatter))(jnp.asarray(W), jnp.asarray(i, jnp.int8))
    np.testing.assert_array_equal(checked, expected)


def test_embedding_bag_out_of_range_index_checked_under_jit():
    def bag(w, i):
        return rnn.embedding_bag(i, w, jnp.asarray([0, 1]), mode="sum")

    with pytest.raises(RuntimeError):
        F.embedding_bag(torch.tensor([0, 5]), torch.tensor(W), torch.tensor([0, 1]), mode="sum")
    with pytest.raises(ValueError, match="embedding_bag"):
        jaxrules.checked(jax.jit(bag))(jnp.asarray(W), jnp.asarray([0, 5]))
    assert np.isnan(jax.jit(bag)(jnp.asarray(W), jnp.asarray([0, 5]))).any()


@pytest.mark.parametrize("offsets", [[0, 4, 2, 6], [0, 2, 7], [1, 2, 6]])
def test_invalid_traced_offsets_are_nan_under_jit_and_raise_inside_checked(offsets):
    values = jnp.arange(12.0).reshape(6, 2)

    def total(v, o):
        return jnp.sum(nested.from_jagged(v, o).values)

    with pytest.raises(ValueError, match="offsets"):
        nested.from_jagged(values, np.asarray(offsets))
    assert np.isnan(jax.jit(total)(values, jnp.asarray(offsets)))
    assert np.isnan(jax.jit(jax.grad(total))(values, jnp.asarray(offsets))).all()
    with pytest.raises(ValueError, match="from_jagged: offsets"):
        jaxrules.checked(jax.jit(total))(values, jnp.asarray(offsets))
    assert float(jaxrules.checked(jax.jit(total))(values, jnp.asarray([0, 2, 6]))) == float(jnp.sum(values))


def test_traced_padded_lengths_past_the_padding_are_nan():
    def total(p, lengths):
        return jnp.sum(nested.from_padded(p, lengths, total=5).values)

    padded = jnp.ones((2, 3, 2))
    assert np.isnan(jax.jit(total)(padded, jnp.asarray([1, 4])))
    with pytest.raises(ValueError, match="from_padded"):
        jaxrules.checked(jax.jit(total))(padded, jnp.asarray([1, 4]))
    assert float(jax.jit(total)(padded, jnp.asarray([2, 3]))) == 10.0
