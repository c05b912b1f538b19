"""jaxrules.numpy and jaxrules.nn against jax.numpy and jax.nn where a drop-in replacement must
give the same values and dtypes: narrow integer indices, weighted logsumexp, reductions with a
``dtype``, integer inputs (kept integer, or promoted to jax.numpy's float dtype)."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxrules.nn as rnn
import jaxrules.numpy as rnp
import jaxrules.scipy.special as rsp
import jaxrules.torch as rtorch

NARROW = ("int8", "int16", "uint8", "uint16")
X = jnp.arange(200.0)
TABLE = jnp.arange(400.0).reshape(200, 2)

INDEX_OPS = {
    "take": (lambda i: rnp.take(X, i), lambda i: jnp.take(X, i.astype(jnp.int32))),
    "take_clip": (lambda i: rnp.take(X, i, mode="clip"), lambda i: jnp.take(X, i.astype(jnp.int32), mode="clip")),
    "take_wrap": (lambda i: rnp.take(X, i, mode="wrap"), lambda i: jnp.take(X, i.astype(jnp.int32), mode="wrap")),
    "take_along_axis": (lambda i: rnp.take_along_axis(X, i, 0), lambda i: jnp.take_along_axis(X, i, 0)),
    "take_along_axis_clip": (lambda i: rnp.take_along_axis(X, i, 0, mode="clip"),
                             lambda i: jnp.take_along_axis(X, i, 0, mode="clip")),
    "embedding": (lambda i: rnn.embedding(i, TABLE), lambda i: TABLE[i.astype(jnp.int32)]),
    "one_hot": (lambda i: rnn.one_hot(i, 200), lambda i: jax.nn.one_hot(i, 200)),
    "scatter_reduce": (lambda i: rnp.scatter_reduce(X, 0, i, jnp.ones(4), "sum"),
                       lambda i: X.at[i.astype(jnp.int32)].add(1.0)),
}


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("name", sorted(INDEX_OPS))
def test_narrow_integer_indices_into_a_long_axis_match_jax_numpy(name, dtype):
    # A bound such as n - 1 = 199 cast into int8 wraps to -57: every index clipped to it.
    ours, theirs = INDEX_OPS[name]
    i = jnp.asarray([1, 2, 3, 127], dtype)
    a, b = ours(i), theirs(i)
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)
    # (jax.numpy's own take(mode="wrap") and .at[int8].add overflow on the bound: widened above)


def test_logsumexp_ignores_zero_weight_entries_as_jax():
    a, b = jnp.asarray([-1000.0, -2.0]), jnp.asarray([1.0, 0.0])
    np.testing.assert_allclose(rsp.logsumexp(a, b=b), jax.scipy.special.logsumexp(a, b=b), rtol=1e-12)
    a, b = jnp.asarray([[-1000.0, 2.0, 1.0], [0.0, 5.0, -3.0]]), jnp.asarray([[1.0, 0.0, 2.0], [0.0, 0.0, 1.0]])
    for kw in ({}, {"axis": 1}, {"axis": 1, "return_sign": True}):
        np.testing.assert_allclose(rsp.logsumexp(a, b=b, **kw), jax.scipy.special.logsumexp(a, b=b, **kw), rtol=1e-12)
    ours = jax.grad(lambda u, v: jnp.sum(rsp.logsumexp(u, axis=1, b=v)), (0, 1))(a, b)
    theirs = jax.grad(lambda u, v: jnp.sum(jax.scipy.special.logsumexp(u, axis=1, b=v)), (0, 1))(a, b)
    for g, h in zip(ours, theirs):
        np.testing.assert_allclose(g, h, rtol=1e-12)


def _same(ours, theirs):
    try:
        expected = theirs()
    except (TypeError, ValueError, IndexError) as error:
        with pytest.raises(type(error)):
            ours()
        return
    got = ours()
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    rtol = 2e-3 if got.dtype == jnp.float16 else 1e-6  # (jax.numpy sums float16 in float32)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=rtol)


REDUCTIONS = ("sum", "prod", "mean", "var", "std", "nansum", "nanprod", "cumsum", "cumprod")


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_with_a_dtype_match_jax_numpy(name):
    for x in (jnp.asarray([1, 2, 4], jnp.int32), jnp.asarray([1, 2, 4], jnp.int16), jnp.asarray([1.0, 2.5, 4.0]),
              jnp.asarray([1.0 + 1j, 2.0, 4.0])):
        for dtype in (None, jnp.int8, jnp.int16, jnp.int32, jnp.float16, jnp.float32, jnp.complex64):
            if jnp.iscomplexobj(x) and dtype is not None and not jnp.issubdtype(dtype, jnp.complexfloating) \
                    and name not in ("var", "std"):
                continue  # jax.numpy drops the imaginary part with a warning
            _same(lambda x=x, dtype=dtype: getattr(rnp, name)(x, dtype=dtype),
                  lambda x=x, dtype=dtype: getattr(jnp, name)(x, dtype=dtype))


@pytest.mark.parametrize("name", ["relu", "hard_tanh"])
def test_integer_activations_keep_their_dtype_as_jax_nn(name):
    x = jnp.asarray([-3, 0, 2, 9], jnp.int32)
    _same(lambda: getattr(rnn, name)(x), lambda: getattr(jax.nn, name)(x))


def test_integer_power_is_integer_as_jax_numpy():
    i = jnp.asarray([1, 2, 3], jnp.int32)
    _same(lambda: rnp.power(i, i), lambda: jnp.power(i, i))
    _same(lambda: rnp.power(2, i), lambda: jnp.power(2, i))
    _same(lambda: rnp.power(i, 2), lambda: jnp.power(i, 2))
    _same(lambda: rnp.power(i, 2.0), lambda: jnp.power(i, 2.0))
    _same(lambda: rnp.power(i, jnp.asarray([0.5, 1.0, 2.0])), lambda: jnp.power(i, jnp.asarray([0.5, 1.0, 2.0])))


_X64_SCRIPT = """
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import jaxrules.numpy as rnp, jaxrules.nn as rnn, jaxrules.scipy.linalg as rsl
cases = [("mean", rnp.mean, jnp.mean), ("var", rnp.var, jnp.var), ("std", rnp.std, jnp.std),
         ("log1p", rnp.log1p, jnp.log1p), ("softplus", rnn.softplus, jax.nn.softplus),
         ("softmax", rnn.softmax, jax.nn.softmax), ("exp", rnp.exp, jnp.exp),
         ("expm", lambda v: rsl.expm(v.reshape(2, 2)), lambda v: jax.scipy.linalg.expm(v.reshape(2, 2)))]
for dtype in ("int8", "int16", "int32", "uint32", "int64"):
    for name, ours, theirs in cases:
        x = jnp.arange(4, dtype=dtype)
        got, expected = ours(x).dtype, theirs(x).dtype
        assert got == expected, (name, dtype, got, expected)
print("ok")
"""


def test_integer_inputs_promote_to_jax_numpys_float_dtype_under_x64():
    # jax.numpy: float32 for integers narrower than 64 bits, float64 for int64, also under x64.
    # (A subprocess: the setting is process-wide, and the suite's processes have it on already.)
    result = subprocess.run([sys.executable, "-c", _X64_SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]


@pytest.mark.parametrize("name", ["sum", "nansum", "prod", "max", "min", "amax", "amin"])
def test_initial_of_the_wrong_shape_raises_jax_numpys_error_type(name):
    x = jnp.ones((3, 4))
    with pytest.raises(ValueError):
        getattr(jnp, name)(x, axis=0, initial=jnp.ones(3))
    with pytest.raises(ValueError, match="initial"):
        getattr(rnp, name)(x, axis=0, initial=jnp.ones(3))
    with pytest.raises(ValueError, match="initial"):
        getattr(rnp, name)(x.astype(jnp.int32), axis=0, initial=jnp.ones(4))


@pytest.mark.parametrize("name", ["fft2", "fftn", "rfftn", "irfftn", "ifftn", "ifft2", "rfft2", "irfft2"])
def test_repeated_fft_axes_raise_jax_numpys_error_type(name):
    x = jnp.ones((3, 4))
    for axes in ((1, 1), (1, -1), (0, -2)):  # jax.numpy: ValueError, then TypeError (from its transpose)
        try:
            getattr(jnp.fft, name)(x, axes=axes)
        except (TypeError, ValueError) as error:
            with pytest.raises(type(error)):
                getattr(rnp.fft, name)(x, axes=axes)


WHERE_OPS = ("sum", "mean", "prod", "var", "std", "max", "min", "amax", "amin", "nansum")


@pytest.mark.parametrize("name", WHERE_OPS)
def test_where_of_a_non_boolean_array_raises_jax_numpys_error_type(name):
    x = jnp.arange(6.0).reshape(2, 3)
    kw = {"initial": 0.0} if name in ("max", "min", "amax", "amin") else {}
    for where in (jnp.asarray([[1, 0, 2], [0, 3, 1]]), jnp.asarray([1.0, 0.0, 1.0]), jnp.asarray([True, False, True])):
        _same(lambda where=where: getattr(rnp, name)(x, where=where, **kw),
              lambda where=where: getattr(jnp, name)(x, where=where, **kw))
    with pytest.raises(ValueError, match=f"^a?{name.removeprefix('a')}: where must be None or a boolean array"):
        getattr(rnp, name)(x, where=jnp.ones(3, jnp.int32), **kw)
    for nn_name in ("softmax", "log_softmax"):
        _same(lambda n=nn_name: getattr(rnn, n)(x, where=jnp.asarray([1, 0, 1])),
              lambda n=nn_name: getattr(jax.nn, n)(x, where=jnp.asarray([1, 0, 1])))


def test_weighted_quantile_is_jax_numpys():
    a = np.asarray([[3.0, 1.0, 4.0, 1.5, 9.0], [2.0, 7.0, 1.0, 8.0, 2.5]])
    w = np.asarray([[1.0, 2.0, 1.0, 0.5, 1.0], [0.5, 0.5, 3.0, 1.0, 1.0]])
    q = np.asarray([0.1, 0.5, 0.9])
    for kw in ({}, {"axis": 1}, {"axis": 1, "keepdims": True}):
        got = rnp.quantile(jnp.asarray(a), jnp.asarray(q), method="inverted_cdf", weights=jnp.asarray(w), **kw)
        np.testing.assert_allclose(got, np.quantile(a, q, method="inverted_cdf", weights=w, **kw), rtol=1e-6)
        with pytest.raises(NotImplementedError):  # jax.numpy's: only inverted_cdf takes weights
            jnp.quantile(jnp.asarray(a), jnp.asarray(q), method="linear", weights=jnp.asarray(w), **kw)
        with pytest.raises(NotImplementedError):
            rnp.quantile(jnp.asarray(a), jnp.asarray(q), method="linear", weights=jnp.asarray(w), **kw)
    grad = jax.grad(lambda x: jnp.sum(rnp.quantile(x, q, axis=1, method="inverted_cdf", weights=w)))(jnp.asarray(a))
    expected = jax.grad(lambda x: jnp.sum(jnp.quantile(x, q, axis=1, method="inverted_cdf", weights=w)))(jnp.asarray(a))
    np.testing.assert_array_equal(grad, expected)


def test_logsumexp_with_complex_b_or_return_sign_matches_jax():
    a = jnp.asarray([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]])
    b = jnp.asarray([[1 + 1j, -2 + 0.5j, 0.3j], [1.0, 2.0, 3.0]])
    a_complex = a + 1j * jnp.asarray([[0.3, 2.0, -1.0], [1.0, 1.0, 1.0]])
    ls = jax.scipy.special.logsumexp
    for args, kw in (((a,), {"b": b}), ((a,), {"b": b, "axis": 1}), ((a,), {"b": b, "axis": 1, "return_sign": True}),
                     ((a_complex,), {"return_sign": True}), ((a_complex,), {"b": b, "axis": 0, "keepdims": True})):
        ours, theirs = rsp.logsumexp(*args, **kw), ls(*args, **kw)
        for got, expected in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
            assert got.dtype == expected.dtype
            np.testing.assert_allclose(got, expected, rtol=1e-6)
    # an independent value: log(sum(b exp(a))) on the principal branch, numpy's
    np.testing.assert_allclose(rsp.logsumexp(a, b=b), np.log(np.sum(np.asarray(b) * np.exp(np.asarray(a)))), rtol=1e-6)
    g = jax.grad(lambda u: jnp.real(rsp.logsumexp(u, b=b)))(a)
    np.testing.assert_allclose(g, jax.grad(lambda u: jnp.real(ls(u, b=b)))(a), rtol=1e-6)


def test_clip_with_neither_bound_is_the_identity_as_jax_numpy():
    for x in (jnp.asarray([-1.5, 0.0, 2.0]), jnp.arange(3), jnp.asarray([True, False])):
        _same(lambda x=x: rnp.clip(x), lambda x=x: jnp.clip(x))
        _same(lambda x=x: rnp.clip(x, None, None), lambda x=x: jnp.clip(x, None, None))
    x = jnp.asarray([-1.5, 0.0, 2.0])
    np.testing.assert_array_equal(jax.grad(lambda v: jnp.sum(rnp.clip(v) * v))(x), 2 * x)
    with pytest.raises(RuntimeError):  # torch.clamp needs a bound; so does jaxrules.torch's
        torch.clamp(torch.ones(3))
    with pytest.raises(ValueError, match="^clamp: at least one"):
        rtorch.clamp(x)


def test_sort_and_argsort_of_complex_input_are_lexicographic_as_jax_numpy():
    z = jnp.asarray([[2 + 1j, 1 + 5j, 2 - 1j, 1 + 0j, jnp.nan + 0j, 0 + 1j], [1j, -1j, 0, 3, 3 - 2j, 3 + 2j]])
    for kw in ({}, {"axis": 0}, {"axis": None}, {"descending": True}, {"stable": False}):
        _same(lambda kw=kw: rnp.sort(z, **kw), lambda kw=kw: jnp.sort(z, **kw))
        _same(lambda kw=kw: rnp.argsort(z, **kw), lambda kw=kw: jnp.argsort(z, **kw))
    # lexicographic, independently: numpy's complex sort (NaN last)
    np.testing.assert_array_equal(rnp.sort(z[1]), np.sort(np.asarray(z[1])))
    np.testing.assert_array_equal(rnp.argsort(z[1]), np.argsort(np.asarray(z[1]), kind="stable"))
    t = jnp.asarray(np.random.default_rng(0).standard_normal(6) * 1j)
    tangent = jax.jvp(lambda v: rnp.sort(v), (z[1],), (t,))[1]
    np.testing.assert_array_equal(tangent, t[np.argsort(np.asarray(z[1]), kind="stable")])
    for b in (jnp.asarray([True, False, True, False]), jnp.asarray([[False, True], [True, True]])):
        for kw in ({}, {"descending": True}, {"axis": 0}):
            _same(lambda b=b, kw=kw: rnp.argsort(b, **kw), lambda b=b, kw=kw: jnp.argsort(b, **kw))
            _same(lambda b=b, kw=kw: rnp.sort(b, **kw), lambda b=b, kw=kw: jnp.sort(b, **kw))


def test_take_from_an_empty_axis_raises_jax_numpys_error_type():
    e = jnp.zeros((2, 0))
    for args, kw in (((jnp.asarray([0]),), {"axis": 1}), ((jnp.asarray([0, 1]),), {"axis": 1, "mode": "fill"}),
                     ((jnp.asarray([0]),), {"axis": 1, "mode": "clip"}),
                     ((jnp.asarray([0]),), {"axis": 1, "mode": "wrap"}),
                     ((jnp.asarray([], jnp.int32),), {"axis": 1}), ((jnp.asarray([0]),), {})):
        _same(lambda args=args, kw=kw: rnp.take(e, *args, **kw), lambda args=args, kw=kw: jnp.take(e, *args, **kw))
    with pytest.raises(IndexError):
        jnp.take(jnp.zeros(0), jnp.asarray([0]))
    for error in (IndexError, ValueError):  # jax.numpy's type, and the library's for bad input
        with pytest.raises(error, match="^take: cannot take 1 entries from the empty axis"):
            rnp.take(jnp.zeros(0), jnp.asarray([0]))


MATMUL_SHAPES = [((1, 3, 4), (4, 5)), ((3, 4), (1, 4, 5)), ((2, 1, 3, 4), (1, 5, 4, 2)), ((1, 1, 3, 4), (4,)),
                 ((4,), (1, 1, 4, 5)), ((1, 1, 4), (1, 4, 1)), ((1, 4), (4, 1)), ((1, 4), (4,)), ((4,), (4, 1)),
                 ((1, 1, 1, 4), (1, 4)), ((3,), (4,)), ((2, 3, 4), (3, 4, 5)), ((2, 3), ())]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_with_size_one_batch_dims_matches_jax_numpy(shapes):
    rng = np.random.default_rng(0)
    a, b = (jnp.asarray(rng.standard_normal(s), jnp.float32) for s in shapes)
    _same(lambda: rnp.matmul(a, b), lambda: jnp.matmul(a, b))
    try:
        expected = jax.grad(lambda u, v: jnp.sum(jnp.sin(jnp.matmul(u, v))), (0, 1))(a, b)
    except (TypeError, ValueError):
        return
    got = jax.grad(lambda u, v: jnp.sum(jnp.sin(rnp.matmul(u, v))), (0, 1))(a, b)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    tangent = jax.jvp(rnp.matmul, (a, b), (jnp.cos(a), jnp.sin(b)))[1]
    np.testing.assert_allclose(tangent, jax.jvp(jnp.matmul, (a, b), (jnp.cos(a), jnp.sin(b)))[1], rtol=1e-5, atol=1e-6)


def test_take_along_axis_promise_in_bounds_matches_jax_numpy():
    x = jnp.arange(6.0).reshape(2, 3)
    i = jnp.asarray([[0, 2], [1, 0]])
    promise = {"mode": "promise_in_bounds"}
    _same(lambda: rnp.take_along_axis(x, i, 1, **promise), lambda: jnp.take_along_axis(x, i, 1, **promise))
    _same(lambda: jax.jit(lambda v: rnp.take_along_axis(v, i, 1, **promise))(x),
          lambda: jax.jit(lambda v: jnp.take_along_axis(v, i, 1, **promise))(x))
    np.testing.assert_array_equal(rnp.take_along_axis(x, i, 1, **promise),
                                  np.take_along_axis(np.asarray(x), np.asarray(i), 1))
    grad = jax.grad(lambda v: jnp.sum(rnp.take_along_axis(v, i, 1, **promise) ** 2))(x)
    np.testing.assert_array_equal(grad, jax.grad(lambda v: jnp.sum(jnp.take_along_axis(v, i, 1, **promise) ** 2))(x))
    _same(lambda: rnp.take(x, i, axis=1, **promise), lambda: jnp.take(x, i, axis=1, **promise))  # both: ValueError


@pytest.mark.parametrize("name", ["fft", "ifft", "irfft", "fftn", "ifftn", "rfftn", "irfftn", "rfft"])
def test_fft_of_an_empty_axis_matches_jax_numpy(name):
    # The reference is jax.numpy on the CPU device: on a GPU, jax.numpy's irfftn raises a TypeError
    # at an empty axis where its CPU form returns the empty result, as ours does on both.
    cpu = jax.devices("cpu")[0]

    def theirs(x, **kw):
        with jax.default_device(cpu):
            return getattr(jnp.fft, name)(jax.device_put(x, cpu), **kw)

    for shape in ((0,), (0, 4), (3, 0)):
        x = jnp.zeros(shape)
        # jax.numpy's rfft of an empty last axis fails in XLA's verifier (a ValueError); ours names the op
        _same(lambda x=x: getattr(rnp.fft, name)(x), lambda x=x: theirs(x))
    kw = {"n": 0} if name[-1] == "t" else {"s": (0,)}
    _same(lambda: getattr(rnp.fft, name)(jnp.ones(4), **kw), lambda: theirs(jnp.ones(4), **kw))
    x = jnp.zeros((4, 0))  # derivatives of the empty result: empty (JAX's own irfft's divide by 0)
    out, pullback = jax.vjp(getattr(rnp.fft, name), x) if name not in ("rfft", "rfftn") else (None, None)
    if pullback is not None:
        assert pullback(jnp.ones_like(out))[0].shape == x.shape
        assert jax.jvp(getattr(rnp.fft, name), (x,), (x,))[1].shape == out.shape


@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft"])
def test_an_axis_list_in_a_one_axis_fft_raises_jax_numpys_error_type(name):
    x = jnp.ones((2, 4))
    for axis in ([1], (0,), [0, 1]):
        with pytest.raises(ValueError):
            getattr(jnp.fft, name)(x, axis=axis)
        with pytest.raises(ValueError, match=f"^{name}: axis must be a single int"):
            getattr(rnp.fft, name)(x, axis=axis)


@pytest.mark.parametrize("name", ["var", "std"])
def test_var_and_std_with_a_complex_dtype_match_jax_numpy(name):
    # jax.numpy: the statistic of the input cast to the complex dtype, returned in that dtype
    xs = (jnp.asarray([1.0, 2.0, 4.0]), jnp.asarray([1 + 1j, 2.0, 4 - 2j]), jnp.arange(3),
          jnp.asarray([1 + 1j, 2.0, 4 - 2j], jnp.complex64))
    for x in xs:
        for dtype in (jnp.complex64, jnp.complex128):
            for kw in ({}, {"axis": 0, "keepdims": True}, {"where": jnp.asarray([True, False, True])}, {"ddof": 1}):
                _same(lambda x=x, dtype=dtype, kw=kw: getattr(rnp, name)(x, dtype=dtype, **kw),
                      lambda x=x, dtype=dtype, kw=kw: getattr(jnp, name)(x, dtype=dtype, **kw))
    x = jnp.asarray([1 + 1j, 2.0, 4 - 2j])
    np.testing.assert_allclose(rnp.var(x, dtype=jnp.complex128), np.var(np.asarray(x)), rtol=1e-6)
    grad = jax.grad(lambda v: jnp.real(getattr(rnp, name)(v, dtype=jnp.complex128)))(x)
    expected = jax.grad(lambda v: jnp.real(getattr(jnp, name)(v, dtype=jnp.complex128)))(x)
    np.testing.assert_allclose(grad, expected, rtol=1e-6)


@pytest.mark.parametrize("x64", [False, True])
def test_python_scalar_operands_keep_jax_numpys_result_dtype(x64):
    """A Python int or float operand is weakly typed, as in jax.numpy: ``clip(h_bf16, -6, 6)``
    stays bfloat16 (a model's dtype and loss must not change with the import), integer arrays
    become jax.numpy's float; values equal jax.numpy's."""
    calls = [(rnp.clip, jnp.clip, (0, 6)), (rnp.clip, jnp.clip, (-1.5, None)), (rnp.clip, jnp.clip, (None, 2)),
             (rnp.arctan2, jnp.arctan2, (2,)), (rnp.arctan2, jnp.arctan2, (2.0,)),
             (rnp.copysign, jnp.copysign, (-2,))]
    with jax.enable_x64(x64):
        for dtype in (jnp.bfloat16, jnp.float16, jnp.float32, jnp.int32):
            x = jnp.arange(-3, 4).astype(dtype)
            for ours, theirs, rest in calls:
                got, want = ours(x, *rest), theirs(x, *rest)
                assert got.dtype == want.dtype, (ours.__name__, dtype, rest, got.dtype, want.dtype)
                np.testing.assert_array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64))
        with pytest.raises(ValueError, match="clip: complex"):
            rnp.clip(jnp.array([2 + 3j]), 0.0, 1.0)  # jax.numpy's clip refuses complex input too


def test_argument_forms_jax_numpy_accepts_are_accepted_alike():
    """Forms a jax.numpy program passes: ``tile`` with a concrete integer array (or 0-d arrays)
    as ``reps``, ``take`` with boolean indices (read as 0 and 1), ``vector_norm(ord=None)`` (the
    2-norm), ``cumsum``/``cumprod`` with a boolean ``dtype`` (jax.numpy's boolean result). Values,
    dtypes and gradients equal jax.numpy's; a traced ``reps`` is refused naming the argument."""
    x = jnp.arange(6.0).reshape(2, 3) - 2.5
    for reps in (jnp.array([2, 1]), np.array([3]), (jnp.int32(2), 1), np.int64(2), jnp.array(2)):
        _same(lambda reps=reps: rnp.tile(x, reps), lambda reps=reps: jnp.tile(x, reps))
        g = jax.grad(lambda v, reps=reps: jnp.sum(rnp.tile(v, reps) ** 2))(x)
        np.testing.assert_allclose(g, jax.grad(lambda v, reps=reps: jnp.sum(jnp.tile(v, reps) ** 2))(x))
    for bad in (-1, (1.5,), (True, 1), jnp.array([1.0])):
        with pytest.raises(ValueError, match="^tile: reps must be concrete non-negative integers"):
            rnp.tile(x, bad)
    with pytest.raises(ValueError, match="^tile: reps must be concrete"):
        jax.jit(lambda r: rnp.tile(x, r))(jnp.array([2, 1]))

    mask = jnp.array([True, False, True])
    _same(lambda: rnp.take(x, mask, axis=1), lambda: jnp.take(x, mask, axis=1))
    g = jax.grad(lambda v: jnp.sum(rnp.take(v, mask, axis=1) * jnp.arange(6.0).reshape(2, 3)))(x)
    # indices (1, 0, 1): column 1 gets the weights' columns 0 and 2, column 0 gets column 1
    np.testing.assert_array_equal(g, [[1.0, 0.0 + 2.0, 0.0], [4.0, 3.0 + 5.0, 0.0]])

    for v in (x, jnp.zeros(3)):
        _same(lambda v=v: rnp.linalg.vector_norm(v, ord=None), lambda v=v: jnp.linalg.vector_norm(v, ord=None))
    np.testing.assert_array_equal(jax.grad(lambda v: rnp.linalg.vector_norm(v, ord=None))(jnp.zeros(3)), 0.0)

    for a in (jnp.array([0, 2, 0, 1]), jnp.array([0.0, 2.0, 0.0, 1.5]), jnp.array([True, False, True])):
        for name in ("cumsum", "cumprod"):
            for dtype in (bool, jnp.int32, jnp.float32, None):
                _same(lambda a=a, name=name, dtype=dtype: getattr(rnp, name)(a, dtype=dtype),
                      lambda a=a, name=name, dtype=dtype: getattr(jnp, name)(a, dtype=dtype))
    assert rnp.cumsum(jnp.array([0, 2, 0, 1]), dtype=bool).tolist() == [False, True, True, True]
