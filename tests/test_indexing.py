"""embedding and scatter_reduce beyond the registry harness: torch's conventions that are not the
derivative of the lookup (padding_idx, scale_grad_by_freq), prod with zeros at second order,
complex sum/mean, src larger than index, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.test_util import check_grads

import jaxrules.numpy as rnp
from jaxrules.nn import embedding
from jaxrules.numpy import scatter_reduce
from jaxrules.scipy.linalg import block_diag

RNG = np.random.default_rng(5)
INDICES = np.array([[0, 2, 1, 2], [2, 2, 4, 1]])


@pytest.mark.parametrize("padding_idx, scale", [(2, False), (None, True), (1, True)])
def test_embedding_conventions_match_torch_and_formulas_agree(padding_idx, scale):
    weight = RNG.standard_normal((5, 3))
    ct = RNG.standard_normal(INDICES.shape + (3,))
    f = lambda w: embedding(INDICES, w, padding_idx=padding_idx, scale_grad_by_freq=scale)  # noqa: E731
    ours = jax.grad(lambda w: jnp.sum(ct * f(w)))(weight)
    tw = torch.tensor(weight, requires_grad=True)
    out = torch.nn.functional.embedding(torch.tensor(INDICES), tw, padding_idx, scale_grad_by_freq=scale)
    (torch.tensor(ct) * out).sum().backward()
    np.testing.assert_allclose(ours, tw.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(f(weight), out.detach().numpy())
    t = RNG.standard_normal(weight.shape)
    tangent = jax.jvp(f, (weight,), (t,))[1]
    np.testing.assert_allclose(np.sum(ct * tangent), np.sum(ours * t), rtol=1e-12)  # JVP = transpose of VJP
    if padding_idx is not None:
        assert np.all(ours[padding_idx] == 0)


def test_scatter_prod_with_zeros_second_order_matches_finite_differences():
    x = np.array([[0.0, 2.0, 1.5]])
    src = np.array([[0.0, 3.0, 0.5, -2.0]])
    index = np.array([[0, 0, 1, 0]])
    for include_self in (True, False):
        f = lambda x, s: scatter_reduce(x, 1, index, s, "prod", include_self=include_self)  # noqa: E731
        check_grads(f, (x, src), order=2, modes=("fwd", "rev"), eps=1e-4)


def test_scatter_complex_sum_and_mean_and_src_cut_to_index():
    x = RNG.standard_normal((2, 3)) + 1j * RNG.standard_normal((2, 3))
    src = RNG.standard_normal((2, 4)) + 1j * RNG.standard_normal((2, 4))
    index = np.array([[0, 0], [2, 1]])
    for reduce in ("sum", "mean"):
        check_grads(lambda x, s: scatter_reduce(x, 1, index, s, reduce), (x, src), order=2, modes=("fwd", "rev"))
    real = np.arange(6.0).reshape(2, 3)
    ours = scatter_reduce(real, 1, index, np.ones((2, 4)), "sum")
    ones = torch.ones(2, 4, dtype=torch.float64)
    theirs = torch.scatter_reduce(torch.tensor(real), 1, torch.tensor(index), ones, "sum")
    np.testing.assert_allclose(ours, theirs.numpy())


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: scatter_reduce(np.ones((2, 3)), 1, np.zeros((2, 2), int), np.ones((2, 2)), "max"), ValueError,
         ["scatter_reduce", "reduce"]),
        (lambda: scatter_reduce(np.ones((2, 3)), 1, np.zeros((2, 2)), np.ones((2, 2)), "sum"), TypeError,
         ["scatter_reduce", "index"]),
        (lambda: scatter_reduce(np.ones((2, 3)), 1, np.zeros((2, 5), int), np.ones((2, 2)), "sum"), ValueError,
         ["scatter_reduce", "src"]),
        (lambda: scatter_reduce(np.ones((2, 3)), 1, np.zeros(2, int), np.ones(2), "sum"), ValueError,
         ["scatter_reduce", "rank"]),
        (lambda: embedding(np.zeros(3, int), np.ones(4)), ValueError, ["embedding", "weight"]),
        (lambda: rnp.concatenate([np.ones((2, 3)), np.ones((2, 2))]), ValueError, ["concatenate", "axis"]),
        (lambda: rnp.stack([np.ones(2), np.ones(3)]), ValueError, ["stack", "shape"]),
        (lambda: rnp.take_along_axis(np.ones((2, 3)), np.zeros(2, int), 1), TypeError, ["take_along_axis", "indices"]),
        (lambda: rnp.masked_fill(np.ones(3), np.ones(3), 0.0), TypeError, ["masked_fill", "mask"]),
        (lambda: rnp.pad(np.ones(3), 1, mode="edge"), ValueError, ["pad", "mode"]),
        (lambda: embedding(np.zeros(3), np.ones((4, 2))), TypeError, ["embedding", "indices"]),
        (lambda: embedding(np.zeros(3, int), np.ones((4, 2)), padding_idx=7), ValueError, ["embedding", "padding_idx"]),
    ],
)
def test_bad_input(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("name", ["max", "min", "median", "kthvalue"])
def test_value_selection_indices_and_gradients_with_ties(name):
    """max/min: torch's index (the first extreme) and torch's gradient (to that index only).
    median/kthvalue: torch documents no tie rule for the index; ours is the stable sort's, the
    values equal torch's and the gradient goes to the returned index only, as torch's does."""
    x = np.array([[3.0, 1.0, 3.0, 2.0, 1.0], [2.0, 2.0, 2.0, 0.5, 7.0], [4.0, 4.0, 1.0, 1.0, 4.0]])
    args = (3,) if name == "kthvalue" else ()
    kwargs = {} if name == "kthvalue" else {"return_indices": True}
    ours = getattr(rnp, name)(x, *args, axis=1, **kwargs)
    theirs = getattr(torch, name)(torch.tensor(x), *args, dim=1)
    np.testing.assert_array_equal(ours.values, theirs.values.numpy())
    np.testing.assert_array_equal(np.take_along_axis(x, np.asarray(ours.indices)[:, None], 1)[:, 0], ours.values)
    grad = jax.grad(lambda a: getattr(rnp, name)(a, *args, axis=1, **kwargs).values.sum())(x)
    np.testing.assert_array_equal(grad, np.eye(5)[np.asarray(ours.indices)])
    if name in ("max", "min"):
        np.testing.assert_array_equal(ours.indices, theirs.indices.numpy())
        tx = torch.tensor(x, requires_grad=True)
        getattr(torch, name)(tx, dim=1).values.sum().backward()
        np.testing.assert_array_equal(grad, tx.grad.numpy())
    if name == "kthvalue":  # the stable sort: among the three 2s of row 1, the 3rd smallest is the 2nd of them
        assert int(ours.indices[1]) == 1


def test_max_with_indices_propagates_nan_like_torch():
    x = np.array([[1.0, np.nan, 5.0], [0.0, -1.0, np.nan]])
    for name in ("max", "min"):
        ours = getattr(rnp, name)(x, axis=1, return_indices=True)
        theirs = getattr(torch, name)(torch.tensor(x), dim=1)
        np.testing.assert_array_equal(ours.indices, theirs.indices.numpy())
        assert np.all(np.isnan(ours.values))


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: rnp.max(np.ones((2, 3)), axis=(0, 1), return_indices=True), TypeError, "single int"),
        (lambda: rnp.max(np.ones((2, 3)), axis=1, initial=0.0, return_indices=True), ValueError, "initial"),
        (lambda: rnp.kthvalue(np.ones((2, 3)), 4), ValueError, r"k must be an integer in \[1, 3\]"),
        (lambda: rnp.median(np.ones((2, 0)), axis=1, return_indices=True), ValueError, "length 0"),
        (lambda: rnp.min(np.ones(2) + 1j, axis=0, return_indices=True), TypeError, "complex"),
        (lambda: rnp.split(np.ones(5), 2), ValueError, "equal sections"),
        (lambda: rnp.take(np.ones((3, 2)), np.array([3]), axis=0), ValueError, r"\[-3, 3\)"),
        (lambda: rnp.take(np.ones(3), np.array([0.5])), TypeError, "integers"),
        (lambda: rnp.repeat(np.ones(3), [1, 2]), ValueError, "3 entries"),
        (lambda: rnp.tile(np.ones(3), (-1,)), ValueError, "non-negative"),
        (lambda: block_diag(np.ones((2, 2, 2))), ValueError, "rank <= 2"),
    ],
)
def test_selection_and_shape_ops_reject_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_split_pieces_that_are_unused_get_zero_gradient():
    x = RNG.standard_normal((6, 2))
    grad = jax.grad(lambda a: jnp.sum(rnp.split(a, 3)[1] ** 2))(x)
    expected = np.zeros_like(x)
    expected[2:4] = 2 * x[2:4]
    np.testing.assert_allclose(grad, expected)
    np.testing.assert_allclose(jax.grad(lambda a: jnp.sum(rnp.unstack(a)[4]))(x), np.eye(6)[4][:, None] * np.ones(2))


@pytest.mark.parametrize("reduce", ["amax", "amin", "mean", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_matches_torch(reduce, include_self):
    x = np.array([[1.0, 5.0], [2.0, -1.0], [0.5, 3.0]])
    source = np.array([[4.0, 2.0], [1.5, -2.0], [3.0, 7.0], [0.25, 1.0]])
    index = np.array([2, 0, 2, 2])
    ct = RNG.standard_normal(x.shape)
    f = lambda a, s: rnp.index_reduce(a, 0, index, s, reduce, include_self)  # noqa: E731
    ours = jax.vjp(f, x, source)
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(source, requires_grad=True)
    out = tx.index_reduce(0, torch.tensor(index), ts, reduce, include_self=include_self)
    (out * torch.tensor(ct)).sum().backward()
    np.testing.assert_allclose(ours[0], out.detach().numpy())
    for a, t in zip(ours[1](ct), (tx.grad, ts.grad)):
        np.testing.assert_allclose(a, t.numpy(), atol=1e-12)
