"""Sorting ops beyond the registry harness: torch 2.13's orders (indices with ties and NaN),
gradients against torch with ties and NaN, zero-size input, bad input."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxrules.numpy as rnp
from jaxrules.testing import check_derivatives

RNG = np.random.default_rng(17)
NAN = np.nan
# Ties, NaN (several), signed zeros and infinities in every row.
MESSY = np.array([
    [3.0, 1.0, 3.0, 2.0, 1.0, NAN, 2.0, -0.0],
    [0.0, -0.0, 5.0, NAN, NAN, -np.inf, 5.0, 1.0],
    [2.0, 2.0, 2.0, 2.0, np.inf, 1.0, 1.0, 2.0],
])


def _torch_grad(fn, x, ct):
    tx = torch.tensor(x, requires_grad=True)
    out = fn(tx)
    out = out[0] if isinstance(out, tuple) else out
    (out * torch.tensor(ct)).sum().backward()
    return tx.grad.numpy()


def _our_grad(fn, x, ct):
    def loss(a):
        out = fn(a)
        return jnp.sum(jnp.asarray(ct) * (out[0] if isinstance(out, tuple) else out))

    return np.asarray(jax.grad(loss)(x))


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("axis", [1, 0])
def test_sort_and_argsort_are_torchs_stable_order_and_gradient(descending, axis):
    x = MESSY
    ours = rnp.sort(x, axis=axis, descending=descending)
    theirs = torch.sort(torch.tensor(x), dim=axis, descending=descending, stable=True)
    np.testing.assert_array_equal(ours, theirs.values.numpy())
    np.testing.assert_array_equal(rnp.argsort(x, axis=axis, descending=descending), theirs.indices.numpy())
    ct = RNG.standard_normal(x.shape)
    grad = _our_grad(lambda a: rnp.sort(a, axis=axis, descending=descending), x, ct)
    theirs_grad = _torch_grad(lambda a: torch.sort(a, dim=axis, descending=descending, stable=True), x, ct)
    np.testing.assert_array_equal(grad, theirs_grad)
    # JVP: the tangent permuted as the values
    t = RNG.standard_normal(x.shape)
    tangent = jax.jvp(lambda a: rnp.sort(a, axis=axis, descending=descending), (x,), (t,))[1]
    np.testing.assert_array_equal(tangent, np.take_along_axis(t, theirs.indices.numpy(), axis))


def test_sort_flattens_for_axis_none_and_keeps_integer_input():
    x = MESSY[:2, :4]
    np.testing.assert_array_equal(rnp.sort(x, axis=None), np.sort(x, axis=None))
    ints = np.array([[3, 1, 2], [0, 5, 4]])
    np.testing.assert_array_equal(rnp.sort(ints), np.sort(ints))
    assert rnp.sort(ints).dtype == jnp.asarray(ints).dtype
    np.testing.assert_array_equal(rnp.argsort(ints, axis=0, descending=True), [[0, 1, 1], [1, 0, 0]])
    assert rnp.argsort(ints, dtype=jnp.int32).dtype == jnp.int32
    for x in (np.array([True, False, True]), np.array([3, -128, 127, 0, 3], np.int8), np.array([0, 255, 3], np.uint8)):
        expected = torch.sort(torch.tensor(x), descending=True, stable=True)
        np.testing.assert_array_equal(rnp.sort(x, descending=True), expected.values.numpy())
        np.testing.assert_array_equal(rnp.argsort(x, descending=True), expected.indices.numpy())


def _every_value(dtype, count=None):
    """Every bit pattern of a 16-bit float dtype (NaN of both signs, subnormals, signed zeros), or
    ``count`` random patterns of a wider one with those specials added."""
    if count is None:
        return jnp.arange(2**16, dtype=jnp.uint32).astype(jnp.uint16).view(dtype)
    bits = np.random.default_rng(3).integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.0, 1.0], np.float32)
    return jnp.asarray(np.concatenate([bits.view(np.float32), specials]))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_topk_order_every_float_as_torch(dtype, descending):
    """``sort`` orders every value of a dtype as torch's stable sort, and ``topk``'s indices are
    the first k of that order: NaN of either sign after the numbers (before, descending), -0.0
    and 0.0 equal, subnormals in place."""
    x = _every_value(jnp.dtype(dtype), None if dtype != "float32" else 50_000)
    x = jnp.stack([x, x[::-1]])
    theirs = torch.sort(torch.from_numpy(np.asarray(x.astype(jnp.float32))).to(getattr(torch, dtype)),
                        dim=1, descending=descending, stable=True).indices.numpy()
    np.testing.assert_array_equal(rnp.argsort(x, axis=1, descending=descending), theirs)
    for k in (8, 300):  # a GPU selects up to 16 in a kernel of its own, more by a sort
        top = rnp.topk(x, k, axis=1, largest=descending)
        np.testing.assert_array_equal(top.indices, theirs[:, :k])
        np.testing.assert_array_equal(np.asarray(top.values.astype(jnp.float32)),
                                      np.take_along_axis(np.asarray(x.astype(jnp.float32)), theirs[:, :k], 1))
    zeros = jnp.asarray(np.array([[0.0, -0.0, 1e-40, -0.0, 0.0, -1e-40, 0.0]], np.float32)).astype(x.dtype)
    for k in (1, 3, 7):  # ties of the two zeros: positions in order
        expected = torch.sort(torch.tensor(np.asarray(zeros.astype(jnp.float32))).to(getattr(torch, dtype)),
                              dim=1, descending=descending, stable=True).indices.numpy()[:, :k]
        np.testing.assert_array_equal(rnp.topk(zeros, k, axis=1, largest=descending).indices, expected)


def test_kthvalue_and_median_order_subnormals_and_signed_zeros_as_torch():
    """The k-th smallest of subnormals, zeros of both signs and NaN: torch's values, and the
    k-th index of torch's stable sort (the earliest position among ties; torch's own kthvalue
    picks among tied zeros by its selection). A CPU's float comparison would take the
    subnormals for zeros."""
    x = np.array([[1e-40, -1e-40, 0.0, -1e-39, -0.0, 2.0], [NAN, 1e-40, -0.0, 0.0, -1e-40, 1e-39]], np.float32)
    order = torch.sort(torch.tensor(x), dim=1, stable=True).indices.numpy()
    for k in range(1, 7):
        ours, theirs = rnp.kthvalue(x, k, axis=1), torch.kthvalue(torch.tensor(x), k, dim=1)
        np.testing.assert_array_equal(ours.values, theirs.values.numpy())
        np.testing.assert_array_equal(ours.indices, order[:, k - 1])
    ours, theirs = rnp.median(x, axis=1, return_indices=True), torch.median(torch.tensor(x), dim=1)
    np.testing.assert_array_equal(ours.values, theirs.values.numpy())
    np.testing.assert_array_equal(ours.indices, [order[0, 2], 0])  # the lower middle; the NaN's


def test_topk_selects_without_sorting_and_sort_compares_one_key():
    """``topk`` is ``lax.top_k`` of x's canonical values (a selection, a fraction of a whole
    sort's time), ``sort`` a stable sort of one integer key and the positions: one integer
    comparison a step."""
    x = jnp.ones((4, 64), jnp.bfloat16)
    top = str(jax.make_jaxpr(lambda a: rnp.topk(a, 5))(x))
    assert "top_k[" in top and "sort[" not in top
    # on bfloat16 (a sort of half the bytes of a 32-bit key), never the GPU's TopK kernel of k <= 16
    assert re.search(r"bf16\[4,17\] [a-z]+:i32\[4,17\] = top_k\[[^\]]*\bk=17\b", top)
    ordered = str(jax.make_jaxpr(lambda a: rnp.sort(a))(x))
    assert ordered.count("sort[") == 1 and "num_keys=1" in ordered
    assert re.search(r"i16\[4,64\] [a-z]+:i(32|64)\[4,64\] = sort\[", ordered)  # (bfloat16's bits, positions)


def test_topk_values_match_torch_indices_are_the_earliest_among_ties():
    """torch 2.13 CPU's choice among equal values follows its partial sort (pinned below, so a
    change in torch shows up here); ours is the stable order. NaN is the largest in both."""
    y = torch.tensor([3.0, 1.0, 3.0, 3.0], dtype=torch.float64)
    assert torch.topk(y, 2).indices.tolist() == [2, 3]
    ours = rnp.topk(y.numpy(), 2)
    assert ours.indices.tolist() == [0, 2]
    for largest in (True, False):
        for k in (0, 1, 3, 8):
            ours = rnp.topk(MESSY, k, axis=1, largest=largest)
            theirs = torch.topk(torch.tensor(MESSY), k, dim=1, largest=largest)
            np.testing.assert_array_equal(ours.values, theirs.values.numpy())
            np.testing.assert_array_equal(np.take_along_axis(MESSY, np.asarray(ours.indices), 1), ours.values)
            # earliest positions among ties: the first k of the stable order
            order = torch.sort(torch.tensor(MESSY), dim=1, descending=largest, stable=True).indices.numpy()
            np.testing.assert_array_equal(ours.indices, order[:, :k])
    x = RNG.permutation(np.arange(20.0)).reshape(4, 5)  # no ties: the gradients agree with torch's
    ct = RNG.standard_normal((2, 5))
    grad = _our_grad(lambda a: rnp.topk(a, 2, axis=0, largest=False), x, ct)
    np.testing.assert_array_equal(grad, _torch_grad(lambda a: torch.topk(a, 2, dim=0, largest=False), x, ct))
    assert rnp.topk(np.array([1.0, NAN, 2.0]), 1).indices.tolist() == [1]


@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("axis", [1, 0])
def test_cummax_cummin_indices_and_gradients_match_torch_with_ties_and_nan(name, axis):
    ours = getattr(rnp, name)(MESSY, axis)
    theirs = getattr(torch, name)(torch.tensor(MESSY), dim=axis)
    np.testing.assert_array_equal(ours.values, theirs.values.numpy())
    np.testing.assert_array_equal(ours.indices, theirs.indices.numpy())
    ct = RNG.standard_normal(MESSY.shape)
    grad = _our_grad(lambda a: getattr(rnp, name)(a, axis), MESSY, ct)
    np.testing.assert_allclose(grad, _torch_grad(lambda a: getattr(torch, name)(a, dim=axis), MESSY, ct), atol=1e-15)


def test_cummax_rule_by_hand():
    """torch's rule, written out: ties take the later index, a NaN sticks until the next NaN."""
    x = np.array([1.0, 3.0, 3.0, 2.0, NAN, 5.0, NAN, 1.0])
    out = rnp.cummax(x, 0)
    assert out.indices.tolist() == [0, 1, 2, 2, 4, 4, 6, 6]
    assert rnp.cummin(np.array([2.0, 1.0, 1.0, 3.0, NAN]), 0).indices.tolist() == [0, 1, 2, 2, 4]
    grad = jax.grad(lambda a: rnp.cummax(a, 0).values[:4].sum())(x)
    np.testing.assert_array_equal(grad, [1, 1, 2, 0, 0, 0, 0, 0])


def test_nanmedian_with_indices_matches_torch():
    """Rows without equal numbers (torch's index among ties is unspecified), NaN, an even count
    (the lower middle), and an all-NaN row (NaN, index 0)."""
    x = np.array([
        [4.0, NAN, 1.0, 3.0, 2.0, NAN],
        [NAN, NAN, NAN, NAN, NAN, NAN],
        [0.5, -1.0, 7.0, 2.0, 3.0, -4.0],
        [NAN, 9.0, NAN, NAN, NAN, NAN],
    ])
    ours = rnp.nanmedian(x, axis=1, return_indices=True)
    theirs = torch.nanmedian(torch.tensor(x), dim=1)
    np.testing.assert_array_equal(ours.values, theirs.values.numpy())
    # all NaN: ours index 0; torch 2.13 CPU's nth_element leaves 3 for six entries (pinned)
    assert int(ours.indices[1]) == 0 and int(theirs.indices[1]) == 3
    rows = [0, 2, 3]
    np.testing.assert_array_equal(np.asarray(ours.indices)[rows], theirs.indices.numpy()[rows])
    ct = RNG.standard_normal(4)
    grad = _our_grad(lambda a: rnp.nanmedian(a, axis=1, return_indices=True), x, ct)
    expected = _torch_grad(lambda a: torch.nanmedian(a, dim=1), x, ct)
    np.testing.assert_array_equal(grad[rows], expected[rows])
    np.testing.assert_array_equal(grad[1], ct[1] * np.eye(6)[0])
    keep = rnp.nanmedian(x.T, axis=0, keepdims=True, return_indices=True)
    assert keep.values.shape == keep.indices.shape == (1, 4)
    # ties: the stable order's lower middle (torch documents no rule); value torch's
    tied = np.array([2.0, NAN, 2.0, 1.0, 2.0])
    out = rnp.nanmedian(tied, axis=0, return_indices=True)
    assert (float(out.values), int(out.indices)) == (2.0, 0)
    assert float(torch.nanmedian(torch.tensor(tied), dim=0).values) == 2.0


def test_nanmedian_values_are_numpys_and_the_derivative_goes_to_the_middle_entries():
    x = np.array([[4.0, NAN, 1.0, 3.0, 2.0], [NAN, NAN, NAN, NAN, NAN], [5.0, 1.0, NAN, 2.0, 2.0]])
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        expected = np.nanmedian(x, axis=1)
    np.testing.assert_array_equal(rnp.nanmedian(x, axis=1), expected)
    grad = jax.grad(lambda a: rnp.nanmedian(a, axis=1).sum())(x)
    # row 0: numbers 1 2 3 4, middles 2 (pos 4) and 3 (pos 3); row 1: position 0; row 2: 1 2 2 5,
    # middles the two 2s (positions 3, 4)
    np.testing.assert_array_equal(grad, [[0, 0, 0, 0.5, 0.5], [1, 0, 0, 0, 0], [0, 0, 0, 0.5, 0.5]])
    y = RNG.standard_normal((2, 3, 4))
    expected = np.nanmedian(y, axis=(0, 2), keepdims=True)
    np.testing.assert_allclose(rnp.nanmedian(y, axis=(0, 2), keepdims=True), expected)
    np.testing.assert_allclose(rnp.nanmedian(y), np.nanmedian(y))


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_values_and_gradients_match_torch(method):
    x = RNG.permutation(np.linspace(-3, 4, 24)).reshape(4, 6)
    x[1, 2] = x[1, 4]  # a tie
    q = [0.0, 0.1, 0.25, 0.5, 0.7, 1.0]
    ours = rnp.quantile(x, q, axis=1, method=method)
    tq = torch.tensor(q, dtype=torch.float64)
    theirs = torch.quantile(torch.tensor(x), tq, dim=1, interpolation=method)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(ours, np.quantile(x, q, axis=1, method=method), rtol=1e-14, atol=1e-14)
    ct = RNG.standard_normal(ours.shape)
    grad = _our_grad(lambda a: rnp.quantile(a, q, axis=1, method=method), x, ct)
    expected = _torch_grad(lambda a: torch.quantile(a, tq, dim=1, interpolation=method), x, ct)
    np.testing.assert_allclose(grad, expected, rtol=1e-13, atol=1e-14)


def test_quantile_nan_and_nearest_half_to_even():
    x = np.array([[3.0, 1.0, NAN, 2.0, NAN], [3.0, 1.0, 0.0, 2.0, 4.0]])
    ours = rnp.quantile(x, 0.3, axis=1)
    assert np.isnan(ours[0]) and ours[1] == pytest.approx(1.2)
    grad = jax.grad(lambda a: rnp.quantile(a, 0.3, axis=1).sum())(x)
    np.testing.assert_allclose(grad, _torch_grad(lambda a: torch.quantile(a, 0.3, dim=1), x, np.ones(2)))
    np.testing.assert_array_equal(grad[0], [0, 0, 0, 0, 1])  # the last NaN, torch's rank n - 1
    ranks = np.arange(5.0)
    got = rnp.quantile(ranks, [0.125, 0.375, 0.625], method="nearest")  # ranks 0.5, 1.5, 2.5
    np.testing.assert_array_equal(got, [0, 2, 2])
    np.testing.assert_array_equal(got, np.quantile(ranks, [0.125, 0.375, 0.625], method="nearest"))


def test_quantile_inverted_cdf_values_match_numpy_and_jax_numpy():
    """numpy's ``inverted_cdf`` without weights: the order statistic at ``ceil(q n) - 1``
    (clipped to [0, n - 1]); the q grid hits ``q n`` integer, where the CDF steps."""
    q = np.linspace(0, 1, 41)
    for n in (1, 2, 3, 5, 8, 10):
        x = RNG.standard_normal((3, n))
        ours = rnp.quantile(x, q, axis=1, method="inverted_cdf")
        np.testing.assert_array_equal(ours, np.quantile(x, q, axis=1, method="inverted_cdf"))
        np.testing.assert_array_equal(ours, jnp.quantile(jnp.asarray(x), jnp.asarray(q), axis=1, method="inverted_cdf"))
    y = RNG.standard_normal((2, 3, 4))
    for axis, keepdims in ((None, False), (1, True), ((0, 2), False), (-1, True)):
        np.testing.assert_array_equal(rnp.quantile(y, [0.2, 0.75], axis=axis, keepdims=keepdims, method="inverted_cdf"),
                                      np.quantile(y, [0.2, 0.75], axis=axis, keepdims=keepdims, method="inverted_cdf"))
    x32 = RNG.standard_normal(7).astype(np.float32)
    ours32 = rnp.quantile(x32, jnp.asarray(q, jnp.float32), method="inverted_cdf")
    assert ours32.dtype == jnp.float32
    expected32 = jnp.quantile(jnp.asarray(x32), jnp.asarray(q, jnp.float32), method="inverted_cdf")
    np.testing.assert_array_equal(ours32, expected32)
    with_nan = np.array([3.0, 1.0, NAN, 2.0, 5.0])
    assert np.isnan(rnp.quantile(with_nan, 0.5, method="inverted_cdf"))
    assert np.isnan(np.quantile(with_nan, 0.5, method="inverted_cdf"))


def test_quantile_inverted_cdf_derivative_goes_to_the_selected_entry():
    x = np.array([[3.0, 1.0, 4.0, 2.0, 5.0], [0.5, -1.0, 2.5, 7.0, -3.0]])
    q = [0.0, 0.2, 0.21, 0.5, 1.0]
    jac = jax.jacobian(lambda a: rnp.quantile(a, q, axis=1, method="inverted_cdf"))(jnp.asarray(x))
    # row 0 sorted 1 2 3 4 5: positions ceil(5 q) - 1 -> 0 0 1 2 4 -> entries 1 1 3 0 4
    for i, entry in enumerate([1, 1, 3, 0, 4]):
        expected = np.zeros_like(x)
        expected[0, entry] = 1
        np.testing.assert_array_equal(jac[i, 0], expected)
    # as jax.numpy's (its sort's derivative) away from ties
    np.testing.assert_array_equal(
        jac, jax.jacobian(lambda a: jnp.quantile(a, jnp.asarray(q), axis=1, method="inverted_cdf"))(jnp.asarray(x)))
    # against central differences, both modes, to second order (piecewise linear: second derivative 0)
    check_derivatives(lambda a: rnp.quantile(a, q, axis=1, method="inverted_cdf"), (x,))
    tangent = jax.jvp(lambda a: rnp.quantile(a, 0.5, method="inverted_cdf"), (jnp.asarray(x[0]),),
                      (jnp.arange(5.0) + 1,))[1]
    assert tangent == 1.0  # the median, 3.0, is entry 0
    with_nan = np.array([3.0, NAN, 2.0, NAN, 5.0])
    grad = jax.grad(lambda a: rnp.quantile(a, 0.5, method="inverted_cdf"))(jnp.asarray(with_nan))
    np.testing.assert_array_equal(grad, [0, 0, 0, 1, 0])  # the last NaN, as the other methods


def test_quantile_shapes_follow_jax_numpy():
    y = RNG.standard_normal((2, 3, 4))
    for q in (0.4, [0.2, 0.9], [[0.1], [0.6]]):
        for axis, keepdims in ((None, False), (1, True), ((0, 2), False), ((0, 2), True), (-1, False)):
            ours = rnp.quantile(y, q, axis=axis, keepdims=keepdims)
            np.testing.assert_allclose(ours, np.quantile(y, q, axis=axis, keepdims=keepdims), rtol=1e-14)


def test_zero_size_input_where_torch_accepts_it():
    empty = np.zeros((3, 0))
    assert rnp.sort(empty, axis=1).shape == (3, 0) == tuple(torch.sort(torch.tensor(empty), dim=1).values.shape)
    assert rnp.topk(np.ones((2, 3)), 0).values.shape == (2, 0) == tuple(torch.topk(torch.ones(2, 3), 0).values.shape)
    assert rnp.cummax(empty, 1).indices.shape == (3, 0)
    assert rnp.cummin(np.zeros((0, 2)), 0).values.shape == (0, 2)
    med = rnp.nanmedian(np.zeros((0, 3)), axis=1, return_indices=True)
    theirs = torch.nanmedian(torch.zeros(0, 3), dim=1)
    assert med.values.shape == med.indices.shape == tuple(theirs.values.shape) == (0,)
    assert jax.grad(lambda a: rnp.sort(a, axis=1).sum())(empty).shape == (3, 0)
    assert jax.grad(lambda a: rnp.cummax(a, 1).values.sum())(empty).shape == (3, 0)
    assert rnp.quantile(np.ones(3), []).shape == (0,) == tuple(torch.quantile(torch.ones(3), torch.tensor([])).shape)
    with pytest.raises(RuntimeError):  # torch refuses these; so do we (ValueError, below)
        torch.quantile(torch.zeros(0, dtype=torch.float64), 0.5)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: rnp.sort(np.ones(3), kind="quicksort"), TypeError, ["sort", "kind"]),
        (lambda: rnp.sort(np.ones((2, 3)), axis=2), ValueError, ["sort", "axis"]),
        (lambda: rnp.sort(np.ones(3), descending="yes"), TypeError, ["sort", "descending"]),
        (lambda: rnp.argsort("abc"), TypeError, ["argsort", "'a'"]),
        (lambda: rnp.argsort(np.ones(3), order="x"), TypeError, ["argsort", "order"]),
        (lambda: rnp.topk(np.ones((2, 3)), 4), ValueError, ["topk", "k", "[0, 3]"]),
        (lambda: rnp.topk(np.ones((2, 3)), 1.5), ValueError, ["topk", "k"]),
        (lambda: rnp.topk(np.ones((2, 3)), 1, axis=(0, 1)), TypeError, ["topk", "axis"]),
        (lambda: rnp.topk(np.ones(3), 1, largest=None), TypeError, ["topk", "largest"]),
        (lambda: rnp.cummax(np.ones((2, 3)), None), TypeError, ["cummax", "axis"]),
        (lambda: rnp.cummin(np.ones(3) * 1j, 0), TypeError, ["cummin", "'x'", "complex"]),
        (lambda: rnp.cummin(np.ones((2, 3)), -3), ValueError, ["cummin", "axis"]),
        (lambda: rnp.nanmedian(np.ones((2, 0)), axis=1, return_indices=True), ValueError, ["nanmedian", "axis"]),
        # nanmedian of no elements (no return_indices): NaN, as torch and numpy (tests/test_empty.py)
        (lambda: rnp.nanmedian(np.ones((2, 3)), axis=(0, 1), return_indices=True), TypeError, ["nanmedian", "axis"]),
        (lambda: rnp.nanmedian(np.ones(3), out=np.ones(())), TypeError, ["nanmedian", "out"]),
        (lambda: rnp.quantile(np.ones(3), 1.5), ValueError, ["quantile", "q", "[0, 1]"]),
        (lambda: rnp.quantile(np.ones(3), "half"), TypeError, ["quantile", "q"]),
        (lambda: rnp.quantile(np.ones(3), 0.5, method="weibull"), ValueError, ["quantile", "method"]),
        (lambda: rnp.quantile(np.zeros(0), 0.5), ValueError, ["quantile", "zero-size"]),
        (lambda: rnp.quantile(np.ones(3) + 1j, 0.5), TypeError, ["quantile", "'a'", "complex"]),
        (lambda: jax.jit(lambda q: rnp.quantile(np.ones(3), q))(0.5j), TypeError, ["quantile", "q", "real"]),
    ],
)
def test_bad_input(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value)


def test_jaxrules_numpy_exposes_the_ops():
    from jaxrules.ops import sorting

    for name in ("sort", "argsort", "topk", "cummax", "cummin", "nanmedian", "quantile"):
        assert getattr(rnp, name) is getattr(sorting, name)
        assert name in rnp.__all__


def test_integer_outputs_under_vmap_and_jit_equal_the_row_by_row_results():
    """The harness compares the values under vmap; the indices too, here (NaN, ties, signed zeros)."""
    calls = {
        "argsort": lambda r: rnp.argsort(r, descending=True),
        "topk": lambda r: rnp.topk(r, 3, largest=False).indices,
        "cummax": lambda r: rnp.cummax(r, 0).indices,
        "cummin": lambda r: rnp.cummin(r, 0).indices,
        "nanmedian": lambda r: rnp.nanmedian(r, axis=0, return_indices=True).indices,
    }
    for name, f in calls.items():
        rows = np.stack([np.asarray(f(row)) for row in MESSY])
        np.testing.assert_array_equal(jax.vmap(f)(MESSY), rows, err_msg=name)
        np.testing.assert_array_equal(jax.jit(jax.vmap(f))(MESSY), rows, err_msg=name)
        np.testing.assert_array_equal(jax.vmap(f, in_axes=1)(MESSY.T), rows, err_msg=name)


def test_integer_input_keeps_its_dtype_like_torch():
    x = np.array([[3, -1, 3, 7], [0, 0, -5, 2]], np.int32)
    for name, ours, theirs in (
        ("topk", rnp.topk(x, 2, axis=1), torch.topk(torch.tensor(x), 2, dim=1)),
        ("topk smallest", rnp.topk(x, 3, axis=1, largest=False), torch.topk(torch.tensor(x), 3, dim=1, largest=False)),
        ("cummax", rnp.cummax(x, 1), torch.cummax(torch.tensor(x), 1)),
        ("cummin", rnp.cummin(x, 1), torch.cummin(torch.tensor(x), 1)),
    ):
        assert ours.values.dtype == jnp.int32, name
        np.testing.assert_array_equal(ours.values, theirs.values.numpy(), err_msg=name)
        if name.startswith("cum"):  # torch's topk index among ties is its partial sort's (see above)
            np.testing.assert_array_equal(ours.indices, theirs.indices.numpy(), err_msg=name)
    assert rnp.cummin(np.array([True, False, False]), 0).indices.tolist() == [0, 1, 2]


def test_zero_dimensional_input_keeps_the_references_shapes():
    """0-d input: sort/argsort with axis=None flatten to (1,) as jax.numpy; topk, cummax and
    cummin return 0-d values and indices as torch (review finding)."""
    x = np.float64(3.0)
    assert rnp.sort(x, axis=None).shape == jnp.sort(x, axis=None).shape == (1,)
    assert rnp.argsort(x, axis=None).shape == jnp.argsort(x, axis=None).shape == (1,)
    t = torch.tensor(3.0)
    assert rnp.sort(x).shape == tuple(torch.sort(t).values.shape) == ()  # jax.numpy refuses axis -1 of 0-d
    for ours, theirs in [(rnp.topk(x, 1), torch.topk(t, 1)), (rnp.cummax(x, 0), torch.cummax(t, 0)),
                         (rnp.cummin(x, 0), torch.cummin(t, 0))]:
        assert ours.values.shape == ours.indices.shape == tuple(theirs.values.shape) == ()


@pytest.mark.parametrize("values, q, expected", [
    ([1.0, np.inf], 0.5, np.inf), ([1.0, np.inf], 0.75, np.inf), ([-np.inf, 1.0], 0.25, -np.inf),
    ([np.inf, np.inf], 0.5, np.inf), ([1.0, 2.0, np.inf], 0.6, np.inf), ([-np.inf, np.inf], 0.5, np.nan),
    ([1.0, np.inf], 0.0, 1.0),
])
def test_quantile_with_an_infinite_end_is_the_interpolations_limit(values, q, expected):
    """Between a finite and an infinite value the interpolation's limit is that infinity (as
    jax.numpy gives); torch's and NumPy's ``b - (b - a)(1 - w)`` give ``inf - inf = NaN`` for
    ``w >= 1/2``. Opposite infinities stay NaN."""
    x = jnp.asarray(values)
    for method in ("linear", "midpoint"):
        if method == "midpoint" and q == 0.0:
            continue
        np.testing.assert_array_equal(rnp.quantile(x, q, method=method), expected)
    if values == [1.0, np.inf] and q == 0.5:
        assert np.isnan(float(torch.quantile(torch.tensor(values), q)))  # torch's inf - inf
    if len(values) == 2 and q == 0.5:
        np.testing.assert_array_equal(rnp.nanmedian(x), expected)


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest", "inverted_cdf"])
def test_quantile_of_a_traced_q_matches_jax_numpy_and_torch(method):
    """``q`` traced (jit, vmap, grad), as jax.numpy takes it: the values of a concrete ``q``, the
    derivative with respect to ``q`` of torch's composite form (``(n - 1)(x[hi] - x[lo])`` for
    linear, 0 for the piecewise-constant methods), which jax.numpy's equals too, and, at
    non-integer ranks, second-order finite differences in ``x`` and ``q`` together."""
    x = RNG.standard_normal((3, 7))
    q = np.array([0.1, 0.37, 0.8])  # ranks 0.6, 2.22, 4.8: between entries
    with jax.enable_x64(True):
        fn = jax.jit(lambda x, q: rnp.quantile(x, q, axis=1, method=method))
        np.testing.assert_allclose(fn(jnp.asarray(x), jnp.asarray(q)), rnp.quantile(x, q, axis=1, method=method),
                                   rtol=1e-15)
        vmapped = jax.vmap(lambda qi: rnp.quantile(jnp.asarray(x), qi, axis=1, method=method))(jnp.asarray(q))
        np.testing.assert_allclose(vmapped, rnp.quantile(x, q, axis=1, method=method), rtol=1e-15)
        ct = RNG.standard_normal((3, 3))
        dq = jax.grad(lambda q: jnp.sum(rnp.quantile(jnp.asarray(x), q, axis=1, method=method) * ct))(jnp.asarray(q))
        tq = torch.tensor(q, requires_grad=True)
        if method == "linear":
            (torch.quantile(torch.tensor(x), tq, dim=1) * torch.tensor(ct)).sum().backward()
            np.testing.assert_allclose(dq, tq.grad.numpy(), rtol=1e-12, atol=1e-15)
        else:  # torch's other interpolations do not depend on q differentiably (no graph to q)
            if method != "inverted_cdf":  # (torch has none)
                assert not torch.quantile(torch.tensor(x), tq, dim=1, interpolation=method).requires_grad
            np.testing.assert_array_equal(dq, 0.0)
        if method != "nearest":  # jax.numpy 0.10 rounds half down; no half here, but its form differs
            want = jax.grad(lambda q: jnp.sum(jnp.quantile(jnp.asarray(x), q, axis=1, method=method) * ct))(
                jnp.asarray(q))
            np.testing.assert_allclose(dq, want, rtol=1e-12, atol=1e-15)
        if method == "linear":
            assert np.all(np.abs(dq) > 0)
            check_derivatives(lambda x, q: rnp.quantile(x, q, axis=1), (jnp.asarray(x), jnp.asarray(q)))


def test_quantile_of_a_traced_q_at_an_integer_rank_and_out_of_range():
    """At an integer rank (q = 0.5 of 5 entries) the derivative with respect to q is 0, as
    jax.numpy's and torch's; a traced q outside [0, 1] raises at run time (a ``ValueError`` inside
    ``jaxrules.checked``, jax.numpy gives no error); integer q is taken."""
    import jaxrules

    x = jnp.asarray([4.0, 3.0, 2.0, 1.0, 0.0])
    assert jax.grad(lambda q: rnp.quantile(x, q))(0.5) == 0.0
    tq = torch.tensor(0.5, requires_grad=True)
    torch.quantile(torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0]), tq).backward()
    assert tq.grad == 0.0
    with pytest.raises(ValueError, match="quantile: q must be in \\[0, 1\\] \\(a traced value\\)"):
        jaxrules.checked(jax.jit(lambda q: rnp.quantile(x, q)))(1.5)
    assert jax.jit(lambda q: rnp.quantile(x, q))(jnp.asarray(1)) == 4.0
    with pytest.raises(TypeError, match="^quantile: q must be real numbers"):
        jax.jit(lambda q: rnp.quantile(x, q))(jnp.asarray(0.5 + 0j))


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest", "inverted_cdf"])
def test_nanquantile_and_percentiles_are_quantiles_of_the_numbers(method):
    """``nanquantile`` ignores NaN (an all-NaN row gives NaN), ``percentile`` and ``nanpercentile``
    take ``q`` in [0, 100]: values as numpy's (jax.numpy's but for ``nearest`` at a half rank, which
    jax.numpy 0.10 rounds down), gradients as torch's ``nanquantile``/``quantile`` (at q / 100),
    a traced ``q``'s derivative ``1 / 100`` of quantile's."""
    x = RNG.standard_normal((4, 9))
    x[1, [2, 5]], x[2, :], x[3, 4] = NAN, NAN, NAN
    q, ct = np.array([0.1, 0.5, 0.9]), RNG.standard_normal((3, 4))
    with jax.enable_x64(True):
        forms = (("nanquantile", q, True), ("percentile", 100 * q, False), ("nanpercentile", 100 * q, True))
        for name, qq, nan in forms:
            got = getattr(rnp, name)(jnp.asarray(x), qq, axis=1, method=method)
            want = getattr(np, name)(x, qq, axis=1, method=method)
            np.testing.assert_allclose(got, want, rtol=1e-14, equal_nan=True)
            if method not in ("nearest", "inverted_cdf"):
                np.testing.assert_allclose(got, getattr(jnp, name)(x, qq, axis=1, method=method), rtol=1e-14,
                                           equal_nan=True)
            if method == "inverted_cdf":  # torch has none
                continue
            grad = jax.grad(lambda v, name=name, qq=qq: jnp.sum(getattr(rnp, name)(v, qq, axis=1, method=method) * ct))
            tx = torch.tensor(x, requires_grad=True)
            reference = torch.nanquantile if nan else torch.quantile
            (reference(tx, torch.tensor(q), dim=1, interpolation=method) * torch.tensor(ct)).sum().backward()
            np.testing.assert_allclose(grad(jnp.asarray(x)), tx.grad.numpy(), rtol=1e-13, atol=1e-15)
        dq = jax.grad(lambda p: jnp.sum(rnp.percentile(jnp.asarray(x[0]), p, method=method)))(jnp.asarray(37.0))
        dq_quantile = jax.grad(lambda p: jnp.sum(rnp.quantile(jnp.asarray(x[0]), p, method=method)))(jnp.asarray(0.37))
        np.testing.assert_allclose(dq, dq_quantile / 100, rtol=1e-12)


def test_percentile_refuses_q_outside_0_to_100():
    with pytest.raises(ValueError, match=r"^percentile: q must be in \[0, 100\]"):
        rnp.percentile(np.ones(3), 101.0)
    with pytest.raises(ValueError, match=r"^nanquantile: q must be in \[0, 1\]"):
        rnp.nanquantile(np.ones(3), 50.0)
    with pytest.raises(ValueError, match="^percentile: argument 'out_sharding' must be None"):
        rnp.percentile(np.ones(3), 50.0, out_sharding="x")
