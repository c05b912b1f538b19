"""embedding and scatter_reduce beyond the registry harness: torch's conventions that are not the
derivative of the lookup (padding_idx, scale_grad_by_freq), prod with zeros at second order,
complex sum/mean, src larger than index, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxrules.numpy as rnp
from jaxrules.nn import cross_entropy as rnn_cross_entropy
from jaxrules.nn import embedding
from jaxrules.numpy import scatter_reduce
from jaxrules.scipy.linalg import block_diag
from jaxrules.testing import check_derivatives

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


def test_a_picks_gradient_is_elementwise_and_other_gathers_scatter():
    """One index per line (cross_entropy's pick of the target class): the VJP is ``where(position
    == index, ct, 0)`` (``partials.scatter_add``), no scatter (XLA fuses it into the log-softmax's backward); several
    indices per line, where duplicates accumulate, keep the scatter-add. Both match jax.numpy's
    autodiff, duplicates included."""
    logits = jnp.asarray(RNG.standard_normal((4, 6)))
    target = jnp.array([5, 0, 0, 3])
    pick = jax.make_jaxpr(jax.grad(lambda x: rnn_cross_entropy(x, target)))(logits)
    assert "scatter" not in str(pick)
    x = jnp.asarray(RNG.standard_normal((3, 5, 2)))
    for idx in (RNG.integers(0, 5, (3, 1, 2)), np.array([[[1, 1], [1, 4], [1, 1]]]).repeat(3, 0)):
        ours = jax.grad(lambda x: jnp.sum(jnp.cos(rnp.take_along_axis(x, idx, axis=1))))(x)
        theirs = jax.grad(lambda x: jnp.sum(jnp.cos(jnp.take_along_axis(x, idx, axis=1))))(x)
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
        text = str(jax.make_jaxpr(jax.grad(lambda x: jnp.sum(rnp.take_along_axis(x, idx, axis=1))))(x))
        assert ("scatter" in text) == (idx.shape[1] > 1)


def test_scatter_prod_with_zeros_second_order_matches_finite_differences():
    x = np.array([[0.0, 2.0, 1.5]])
    src = np.array([[0.0, 3.0, 0.5, -2.0]])
    index = np.array([[0, 0, 1, 0]])
    for include_self in (True, False):
        f = lambda x, s: scatter_reduce(x, 1, index, s, "prod", include_self=include_self)  # noqa: E731
        check_derivatives(f, (x, src))


def test_scatter_complex_sum_and_mean_and_src_cut_to_index():
    x = RNG.standard_normal((2, 3)) + 1j * RNG.standard_normal((2, 3))
    src = RNG.standard_normal((2, 4)) + 1j * RNG.standard_normal((2, 4))
    index = np.array([[0, 0], [2, 1]])
    for reduce in ("sum", "mean"):
        check_derivatives(lambda x, s: scatter_reduce(x, 1, index, s, reduce), (x, src))
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
        (lambda: rnp.pad(np.ones(3), 1, mode="nosuch"), ValueError, ["pad", "mode"]),
        (lambda: rnp.pad(np.ones(3), 1, mode="edge", constant_values=1.0), ValueError, ["pad", "constant_values"]),
        (lambda: rnp.pad(np.ones(3), 1, mode="reflect", reflect_type="sideways"), ValueError, ["pad", "reflect_type"]),
        (lambda: rnp.pad(np.ones((0, 2)), 1, mode="wrap"), ValueError, ["pad", "empty axis"]),
        (lambda: rnp.take(np.ones(3), np.array([0]), mode="raise"), ValueError, ["take", "mode"]),
        (lambda: rnp.take(np.ones(3), np.array([0]), out=np.ones(1)), ValueError, ["take", "out"]),
        (lambda: rnp.take(np.zeros(0), np.array([0])), IndexError, ["take", "empty axis"]),
        (lambda: rnp.take_along_axis(np.ones(3), np.zeros((1, 1), int), None), ValueError, ["take_along_axis", "1-D"]),
        (lambda: rnp.take_along_axis(np.ones(3), np.zeros(1, int), mode="wrap"), ValueError,
         ["take_along_axis", "mode"]),
        (lambda: rnp.repeat(np.ones(3), 2, out_sharding="x"), ValueError, ["repeat", "out_sharding"]),
        (lambda: rnp.matmul(np.ones((2, 2)), np.ones((2, 2)), preferred_element_type=np.int32), ValueError,
         ["matmul", "preferred_element_type"]),
        (lambda: rnp.matmul(np.ones((2, 2)), np.ones((2, 2)), precision="bogus"), ValueError, ["matmul", "precision"]),
        (lambda: rnp.linalg.slogdet(np.eye(2), method="cholesky"), ValueError, ["slogdet", "method"]),
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
        (lambda: rnp.take(np.ones(3), np.array([0.5])), TypeError, "integers"),
        (lambda: rnp.repeat(np.ones(3), [1, 2]), ValueError, "3 entries"),
        (lambda: jax.jit(lambda r: rnp.repeat(np.ones(3), r))(np.ones(3, int)), ValueError, "total_repeat_length"),
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


# ----------------------------------------------------------------------------------------------
# JAX's parameters of pad, take, take_along_axis, repeat, matmul, slogdet


def _matches_jax(ours, theirs, x, rtol=1e-12):
    """Value, JVP and VJP (random tangent and cotangent) of ``ours`` equal those of the
    jax.numpy function ``theirs`` (JAX's own autodiff), NaN where JAX gives NaN."""
    expected = theirs(x)
    np.testing.assert_allclose(ours(x), expected, rtol=rtol, atol=rtol)
    t, ct = RNG.standard_normal(np.shape(x)), RNG.standard_normal(expected.shape)
    np.testing.assert_allclose(jax.jvp(ours, (x,), (t,))[1], jax.jvp(theirs, (x,), (t,))[1], rtol=rtol, atol=rtol)
    np.testing.assert_allclose(jax.vjp(ours, x)[1](ct)[0], jax.vjp(theirs, x)[1](ct)[0], rtol=rtol, atol=rtol)


PAD_CASES = [("constant", {"constant_values": ((1.0, 2.0), (3.0, -4.0))}), ("empty", {}), ("edge", {}), ("wrap", {}),
             ("reflect", {}), ("symmetric", {}), ("reflect", {"reflect_type": "odd"}),
             ("symmetric", {"reflect_type": "odd"}), ("linear_ramp", {"end_values": ((1.0, -2.0), (0.5, 3.0))}),
             ("maximum", {}), ("minimum", {"stat_length": 2}), ("mean", {"stat_length": ((1, 2), (3, 1))}),
             ("median", {})]


@pytest.mark.parametrize("mode, kwargs", PAD_CASES, ids=[f"{m}{'-' + '-'.join(k) if k else ''}" for m, k in PAD_CASES])
def test_pad_modes_match_jax_numpy(mode, kwargs):
    # widths beyond the axis length exercise the repeated reflections and wraps
    x = RNG.standard_normal((3, 4))
    widths = ((1, 5), (9, 2))
    # mode "empty" leaves the padding unset (on a GPU it holds whatever the memory held): compare x's part
    part = (slice(1, 4), slice(9, 13)) if mode == "empty" else ...
    assert rnp.pad(x, widths, mode, **kwargs).shape == (9, 15)
    _matches_jax(lambda x: rnp.pad(x, widths, mode, **kwargs)[part], lambda x: jnp.pad(x, widths, mode, **kwargs)[part],
                 x)


def test_pad_with_a_callable_and_traced_constant_values_match_jax_numpy():
    def fill(row, widths, axis, kwargs):
        return row.at[: widths[0]].set(2 * row[widths[0]]).at[row.shape[0] - widths[1]:].set(kwargs["value"])

    x = RNG.standard_normal((3, 4))
    _matches_jax(lambda x: rnp.pad(x, 2, fill, value=-1.0), lambda x: jnp.pad(x, 2, fill, value=-1.0), x)
    # the fill value as a (differentiable) array argument
    grad = jax.grad(lambda c: rnp.pad(x, 1, constant_values=c).sum())(jnp.asarray(1.5))
    np.testing.assert_allclose(grad, 5 * 6 - 3 * 4)  # one per padded entry


@pytest.mark.parametrize("ours, theirs", [("reflect", "reflect"), ("edge", "replicate"), ("wrap", "circular")])
def test_pad_modes_match_torch_pads(ours, theirs):
    x = RNG.standard_normal((2, 3, 4, 5))
    ct = RNG.standard_normal((2, 3, 7, 10))
    y, pullback = jax.vjp(lambda x: rnp.pad(x, ((0, 0), (0, 0), (1, 2), (3, 2)), ours), x)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.pad(tx, (3, 2, 1, 2), mode=theirs)
    ty.backward(torch.tensor(ct))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(pullback(ct)[0], tx.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("mode, fill_value", [(None, None), ("fill", 7.0), ("clip", None), ("wrap", None)])
@pytest.mark.parametrize("axis", [None, 1])
def test_take_modes_match_jax_numpy(mode, fill_value, axis):
    # out-of-bound and negative indices: filled (no gradient there), clipped or wrapped as JAX
    x, idx = RNG.standard_normal((3, 4)), jnp.array([[0, -1], [5, -7], [3, 2]])
    kw = {"mode": mode, "fill_value": fill_value, "unique_indices": False, "indices_are_sorted": False}
    _matches_jax(lambda x: rnp.take(x, idx, axis, **kw), lambda x: jnp.take(x, idx, axis, **kw), x)


@pytest.mark.parametrize("mode, wrap", [(None, None), ("fill", False), ("clip", None), ("clip", False),
                                        ("promise_in_bounds", True), ("one_hot", None)])
def test_take_along_axis_modes_match_jax_numpy(mode, wrap):
    x = RNG.standard_normal((3, 4))
    # indices broadcast against x off the axis; promise_in_bounds is promised in-bounds indices
    idx = jnp.array([[0, -1, 3, -4]]) if mode == "promise_in_bounds" else jnp.array([[0, -1, 4, -5, 2]])
    kw = {"mode": mode, "fill_value": -3.0 if mode == "fill" else None}
    if wrap is not None:  # None: JAX's default (jax 0.12's wrap_negative_indices is a bool, True by default)
        kw["wrap_negative_indices"] = wrap
    _matches_jax(lambda x: rnp.take_along_axis(x, idx, 1, **kw), lambda x: jnp.take_along_axis(x, idx, 1, **kw), x)
    flat = jnp.array([1, 11, -2, 13])
    _matches_jax(lambda x: rnp.take_along_axis(x, flat, None), lambda x: jnp.take_along_axis(x, flat, None), x)
    last = jnp.array([[1], [3], [0]])  # axis defaults to -1
    _matches_jax(lambda x: rnp.take_along_axis(x, last), lambda x: jnp.take_along_axis(x, last), x)


def test_repeat_total_repeat_length_matches_jax_numpy_with_traced_repeats():
    x = RNG.standard_normal((3, 2))
    for reps, total in [(np.array([1, 0, 2]), 5), (2, 4), (np.array([3, 3, 3]), 7)]:  # padded with the last, cut
        _matches_jax(lambda x: rnp.repeat(x, reps, 0, total_repeat_length=total),
                     lambda x: jnp.repeat(x, reps, 0, total_repeat_length=total), x)
    jitted = jax.jit(lambda x, r: rnp.repeat(x, r, 0, total_repeat_length=4))
    reps = jnp.array([1, 2, 1])
    np.testing.assert_array_equal(jitted(x, reps), jnp.repeat(x, reps, 0, total_repeat_length=4))
    np.testing.assert_array_equal(jax.grad(lambda x: jitted(x, reps).sum())(x), np.repeat([[1.0], [2.0], [1.0]], 2, 1))


def test_matmul_precision_and_preferred_element_type_and_slogdet_method_as_jax():
    a, b = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((4, 5))
    for kw in ({"precision": "highest"}, {"precision": ("high", "highest")}, {"precision": "float32"},
               {"preferred_element_type": jnp.float64}):
        _matches_jax(lambda a: rnp.matmul(a, b, **kw), lambda a: jnp.matmul(a, b, **kw), a)
    a32, b32 = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
    ours = rnp.matmul(a32, b32, preferred_element_type=jnp.float32)
    theirs = jnp.matmul(a32, b32, preferred_element_type=jnp.float32)
    assert ours.dtype == theirs.dtype == jnp.float32
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    assert jax.grad(lambda a: rnp.matmul(a, b32, preferred_element_type=jnp.float32).sum())(a32).dtype == jnp.bfloat16
    m = RNG.standard_normal((3, 3))
    for method in (None, "lu", "qr"):
        _matches_jax(lambda m: rnp.linalg.slogdet(m, method=method).logabsdet,
                     lambda m: jnp.linalg.slogdet(m, method=method).logabsdet, m, rtol=1e-10)
