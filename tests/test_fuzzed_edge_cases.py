"""Edge cases of the fuzz tests (tests/test_fuzz_records.py, whose ``FUZZ_OPEN`` and
tests/test_nonfinite.py's ``OPEN`` list the open ones), pinned: each an input, its value and
gradients against torch 2.13, or the library's clear error where torch refuses."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrules.nn as nn
import jaxrules.numpy

POCKETFFT_NONFINITE = pytest.mark.skipif(
    jax.default_backend() != "cpu",
    reason=("a GPU's FFT is cuFFT, whose inverse real FFT of a non-finite spectrum puts NaN at other outputs "
            "than numpy's pocketfft and XLA's CPU FFT (docs/compatibility.md)"))

torch = pytest.importorskip("torch")


# ----------------------------------------------------------------------------------------------
# layer_norm / rms_norm: a 0-d input (an empty normalized_shape) is refused


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


# ----------------------------------------------------------------------------------------------
# nll_loss / cross_entropy: an empty class axis


@pytest.mark.parametrize("op", ["nll_loss", "cross_entropy"])
@pytest.mark.parametrize("shape, target", [((0,), 1), ((4, 0, 3), [[0, 1, -100]] * 4)])
def test_class_loss_no_classes(op, shape, target):
    with pytest.raises((IndexError, RuntimeError)):  # torch: "Target 1 is out of bounds" (1-d), "size mismatch"
        getattr(torch.nn.functional, op)(torch.zeros(shape, dtype=torch.float64), torch.tensor(target))
    with pytest.raises(ValueError, match=f"{op}: input has an empty class axis"):
        getattr(nn, op)(jnp.zeros(shape), jnp.asarray(target))


@pytest.mark.parametrize("op", ["nll_loss", "cross_entropy"])
def test_class_loss_no_classes_no_targets(op):
    """No target at all: nothing is out of range; the mean of nothing is NaN, as torch's."""
    x, t = np.zeros((0, 0)), np.zeros(0, np.int64)
    expected = getattr(torch.nn.functional, op)(torch.tensor(x), torch.tensor(t))
    value, grad = jax.value_and_grad(lambda x: getattr(nn, op)(x, jnp.asarray(t)))(jnp.asarray(x))
    np.testing.assert_equal(np.asarray(value), expected.numpy())
    assert grad.shape == (0, 0)


# ----------------------------------------------------------------------------------------------
# embedding / embedding_bag: an empty (0, d) table


def test_embedding_empty_table():
    w = np.zeros((0, 3))
    with pytest.raises(RuntimeError):  # torch: "index_select(): self indexing axis dim should be positive"
        torch.nn.functional.embedding(torch.tensor([[0, 1]]), torch.tensor(w))
    with pytest.raises(ValueError, match="embedding: weight has no rows"):
        nn.embedding(jnp.array([[0, 1]]), jnp.asarray(w))
    # no index: an empty lookup, as torch
    none = np.zeros((2, 0), np.int64)
    expected = torch.nn.functional.embedding(torch.tensor(none), torch.tensor(w))
    out, grad = jax.value_and_grad(lambda w: nn.embedding(jnp.asarray(none), w).sum())(jnp.asarray(w))
    assert nn.embedding(jnp.asarray(none), jnp.asarray(w)).shape == tuple(expected.shape) == (2, 0, 3)
    assert grad.shape == (0, 3)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_empty_table(mode):
    w = np.zeros((0, 2))
    with pytest.raises(RuntimeError):  # torch: "Expected idx >= 0 && idx < num_embeddings"
        torch.nn.functional.embedding_bag(torch.tensor([[0, 1]]), torch.tensor(w), mode=mode)
    with pytest.raises(ValueError, match="embedding_bag: weight has no rows"):
        jax.jit(lambda w: nn.embedding_bag(jnp.array([[0, 1]]), w, mode=mode))(jnp.asarray(w))
    # no index: every bag empty, zeros, as torch
    none, offsets = np.zeros(0, np.int64), np.array([0, 0])
    expected = torch.nn.functional.embedding_bag(torch.tensor(none), torch.tensor(w), torch.tensor(offsets), mode=mode)
    out = nn.embedding_bag(jnp.asarray(none), jnp.asarray(w), jnp.asarray(offsets), mode=mode)
    np.testing.assert_array_equal(np.asarray(out), expected.numpy())
    grad = jax.grad(lambda w: nn.embedding_bag(jnp.asarray(none), w, jnp.asarray(offsets), mode=mode).sum())
    assert grad(jnp.asarray(w)).shape == (0, 2)


# ----------------------------------------------------------------------------------------------
# block_diag: an empty 1-d block is a 1 x 0 row (REFERENCE_DIFFERS: torch's backward skips it)


def test_block_diag_empty_row_vjp():
    from jaxrules.scipy.linalg import block_diag

    rng = np.random.default_rng(0)
    shapes = [(2, 0), (1, 1), (0,), (2, 2)]  # rows 0-1, row 2, row 3 (1 x 0), rows 4-5
    xs = [rng.normal(size=s) + 1j * rng.normal(size=s) for s in shapes]
    value, pullback = jax.vjp(block_diag, *map(jnp.asarray, xs))
    expected = torch.block_diag(*map(torch.tensor, xs)).numpy()
    np.testing.assert_array_equal(np.asarray(value), expected)
    assert expected.shape == (6, 3)
    ct = rng.normal(size=(6, 3)) + 1j * rng.normal(size=(6, 3))
    grads = pullback(jnp.asarray(ct))
    # each block's diagonal block of the cotangent (the derivative of a placement)
    np.testing.assert_array_equal(np.asarray(grads[1]), ct[2:3, 0:1])
    np.testing.assert_array_equal(np.asarray(grads[3]), ct[4:6, 1:3])
    assert grads[0].shape == (2, 0) and grads[2].shape == (0,)
    # torch 2.13 reads the last block one row too high (rows 3-4): the documented difference
    txs = [torch.tensor(x, requires_grad=True) for x in xs]
    (torch.block_diag(*txs) * torch.tensor(np.conj(ct))).real.sum().backward()
    np.testing.assert_array_equal(txs[3].grad.numpy(), ct[3:5, 1:3])


# ----------------------------------------------------------------------------------------------
# grid_sample: non-finite sampling coordinates in 3-d follow torch's 2-d kernel (REFERENCE_DIFFERS)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_3d_nonfinite_coordinates_as_2d(mode, padding_mode):
    """A 3-d input of depth 1 sampled at depth coordinate 0 (pixel 0 exactly) is the 2-d sample:
    with NaN and +-inf x/y coordinates, ours equals torch's 2-d kernel (torch's own 3-d kernel
    clamps NaN to the last index instead)."""
    from jaxrules.nn import grid_sample

    x2 = np.arange(12.0).reshape(1, 1, 3, 4)
    xy = np.array([[[[np.nan, 0.2], [0.1, np.nan], [np.inf, 0.0], [-np.inf, 0.3], [0.5, 0.5], [0.3, np.inf]]]])
    kwargs = {"mode": mode, "padding_mode": padding_mode, "align_corners": False}
    expected = torch.nn.functional.grid_sample(torch.tensor(x2), torch.tensor(xy), **kwargs).numpy()
    grid3 = np.concatenate([xy, np.zeros(xy.shape[:-1] + (1,))], axis=-1)[:, None]  # (1, 1, 1, 6, 3)
    ours = np.asarray(grid_sample(x2[:, :, None], grid3, **kwargs))[:, :, 0]
    np.testing.assert_allclose(ours, expected, rtol=1e-12, equal_nan=True)


# ----------------------------------------------------------------------------------------------
# irfft / irfftn: NaN in the imaginary parts a real inverse FFT discards does not spread; an
# infinite entry meeting an exactly-zero coefficient gives NaN, as jax.numpy.fft and numpy.fft
# (test_fuzz_records.REFERENCE_DIFFERS, _FFT_ZERO)


@POCKETFFT_NONFINITE
@pytest.mark.parametrize("name", ["irfft", "irfftn"])
def test_irfft_of_nonfinite_spectra_equals_jax_numpy_and_numpy(name):
    """The fuzz cases where torch's MKL FFT stays finite: ours equals jax.numpy.fft's and
    numpy.fft's values, NaN pattern included (the entries are REFERENCE_DIFFERS, not bugs)."""
    from test_fuzz_records import REFERENCE_DIFFERS, build

    from jaxrules import registry
    from jaxrules.numpy import fft

    case, _ = REFERENCE_DIFFERS[f"{name}/nonfinite/silent nan"]
    sample, _, _ = build(registry.get(name), case)
    ours = np.asarray(getattr(fft, name)(*sample.args, **sample.kwargs))
    assert np.isnan(ours).any()  # the case still shows the difference from torch
    for reference in (getattr(jnp.fft, name), getattr(np.fft, name)):
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(np.asarray(reference(*sample.args, **sample.kwargs))))
        np.testing.assert_allclose(ours, np.asarray(reference(*sample.args, **sample.kwargs)), rtol=1e-10,
                                   atol=1e-10, equal_nan=True)


@POCKETFFT_NONFINITE
@pytest.mark.parametrize("n", [12, 13])
def test_irfft_discarded_imaginary_nan(n):
    from jaxrules.numpy import fft

    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 7)) + 1j * rng.normal(size=(2, 7))
    x[0, 0] = complex(x[0, 0].real, np.nan)  # DC
    if n % 2 == 0:
        x[1, 6] = complex(x[1, 6].real, np.nan)  # Nyquist
    ct = rng.normal(size=(2, n))
    value, pullback = jax.vjp(lambda a: fft.irfft(a, n), jnp.asarray(x))
    tx = torch.tensor(x, requires_grad=True)
    expected = torch.fft.irfft(tx, n)
    (expected * torch.tensor(ct)).sum().backward()
    assert np.isfinite(np.asarray(value)).all()
    np.testing.assert_allclose(np.asarray(value), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.conj(np.asarray(pullback(jnp.asarray(ct))[0])), tx.grad.numpy(), rtol=1e-12)


@POCKETFFT_NONFINITE
def test_irfftn_self_conjugate_imaginary_nan():
    from jaxrules.numpy import fft

    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 6)) + 1j * rng.normal(size=(4, 6))
    for k in [(0, 0), (2, 0), (0, 5), (2, 5)]:  # every index 0 or n_i / 2: the imaginary part is discarded
        x[k] = complex(x[k].real, np.nan)
    ct = rng.normal(size=(4, 10))
    value, pullback = jax.vjp(fft.irfftn, jnp.asarray(x))
    tx = torch.tensor(x, requires_grad=True)
    expected = torch.fft.irfftn(tx)
    (expected * torch.tensor(ct)).sum().backward()
    np.testing.assert_allclose(np.asarray(value), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.conj(np.asarray(pullback(jnp.asarray(ct))[0])), tx.grad.numpy(), rtol=1e-12)


# ----------------------------------------------------------------------------------------------
# norm of an empty matrix: torch's value where torch gives one, else an error naming norm and ord


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (0, 0), (2, 3, 0)])
@pytest.mark.parametrize("ord", [1, -1, np.inf, -np.inf, 2, -2])
def test_norm_empty_matrix(shape, ord):
    from jaxrules.numpy.linalg import norm

    axis = (-2, -1)
    x = np.zeros(shape)
    try:
        expected = torch.linalg.norm(torch.tensor(x), ord, dim=axis).numpy()
    except (IndexError, RuntimeError):  # torch: "amin(): Expected reduction dim ... to have non-zero size"
        with pytest.raises(ValueError, match=f"norm: ord={ord!r} of an empty matrix"):
            norm(jnp.asarray(x), ord, axis=axis)
        assert ord < 0
        return
    value, grad = jax.value_and_grad(lambda a: norm(a, ord, axis=axis).sum())(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(norm(jnp.asarray(x), ord, axis=axis)), expected)
    assert grad.shape == shape


# ----------------------------------------------------------------------------------------------
# Non-finite inputs (tests/test_nonfinite.py's cases): values and gradients against
# torch on the record's first sample with one entry poisoned, through that test's own comparison


def _nonfinite_differences(name, argnum, poison):
    from test_nonfinite import POISONS, _differences, _first_sample, _poisoned, _program

    from jaxrules import registry
    from jaxrules.testing import _torch_grads

    record = registry.get(name)
    sample = _first_sample(record)
    program, ct = _program(record, sample)
    case = _poisoned(sample, argnum, POISONS[poison])
    diff = sample.diff_argnums()
    out, grads = program([np.asarray(case.args[i]) for i in diff], ct)
    t_out, t_grads = _torch_grads(torch, record, case, ct)
    found = _differences("value", out, t_out)
    for i, g, tg in zip(diff, grads, t_grads):
        found += _differences(f"gradient of arg{i}", g, np.zeros_like(np.asarray(g)) if tg is None else tg)
    nan = np.isnan(np.asarray(out)).any() or any(np.isnan(np.asarray(g)).any() for g in grads)
    return found, nan


@pytest.mark.parametrize("poison", ["+inf", "-inf", "nan"])
def test_nested_softmax_nonfinite_as_torch(poison):
    """A +inf logit makes its component NaN (inf - inf), as torch and the dense softmax (was: 0 at
    the other entries)."""
    found, nan = _nonfinite_differences("nested.softmax", 0, poison)
    assert not found and nan == (poison != "-inf")  # (a -inf logit: weight 0, all finite)


@pytest.mark.parametrize("argnum", [0, 1, 2])
@pytest.mark.parametrize("poison", ["+inf", "-inf", "nan"])
def test_nested_attention_nonfinite_as_torch(argnum, poison):
    """Non-finite q, k or v: NaN rows (and gradients) where torch's softmax meets inf - inf or a
    row of -inf scores (was: 0 values, finite gradients)."""
    found, nan = _nonfinite_differences("nested.scaled_dot_product_attention", argnum, poison)
    assert not found and nan


@pytest.mark.parametrize("op", ["batch_norm", "instance_norm"])
@pytest.mark.parametrize("w_inf", [np.inf, -np.inf])
def test_per_channel_infinite_weight(op, w_inf):
    """An infinite weight of one channel (one weight per normalized group): y = w x_hat + b is
    +-inf there (numpy's; torch: NaN from its fused scale-shift), and for a generic cotangent the
    input gradient w B(g) is +-inf on that channel, as torch's (not NaN, as B(g w) would give: inf - inf)."""
    rng = np.random.default_rng(3)
    x, w, b = rng.normal(size=(4, 3, 5)), rng.normal(size=3) + 1, rng.normal(size=3)
    w[1] = w_inf
    ct = rng.normal(size=x.shape)
    fn = {"batch_norm": lambda x, w, b: nn.batch_norm(x, None, None, w, b, training=True)[0],
          "instance_norm": lambda x, w, b: nn.instance_norm(x, weight=w, bias=b)[0]}[op]
    value, pullback = jax.vjp(fn, jnp.asarray(x), jnp.asarray(w), jnp.asarray(b))
    axes = (0, 2) if op == "batch_norm" else (2,)
    xhat = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-5)
    np.testing.assert_allclose(np.asarray(value), w[:, None] * xhat + b[:, None], rtol=1e-12)
    assert np.isinf(np.asarray(value)[:, 1]).all()
    t = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    t_fn = getattr(torch.nn.functional, op)
    (t_fn(t[0], None, None, t[1], t[2], **({"training": True} if op == "batch_norm" else {}))
     * torch.tensor(ct)).sum().backward()
    for ours, theirs in zip(pullback(jnp.asarray(ct)), t):
        np.testing.assert_allclose(np.asarray(ours), theirs.grad.numpy(), rtol=1e-9)
    assert np.isinf(np.asarray(pullback(jnp.asarray(ct))[0])[:, 1]).all()


# ----------------------------------------------------------------------------------------------
# nested attention with no heads (the chunk plan divides by the heads; the kernels run in
# Pallas): values and VJP against torch through the fuzz test's case


@pytest.mark.parametrize("name", ["nested.scaled_dot_product_attention", "nested.scaled_dot_product_attention[pallas]"])
@pytest.mark.parametrize("index", [0, 1])  # (not causal, causal)
def test_nested_attention_zero_heads(name, index):
    from test_fuzz_records import Case, build, run_case

    from jaxrules import registry

    record, case = registry.get(name), Case("float64", index, "size", size=2, to=0)
    assert build(record, case)[0].args[0].shape[1] == 0  # (total, heads = 0, dim)
    assert run_case(record, case) == ("ok", "values and vjp")


def test_group_norm_empty_group_weight_gradient():
    """An empty spatial axis: the weight's and bias's gradients are empty sums, 0 (REFERENCE_DIFFERS:
    torch's weight gradient is NaN, from its rstd of an empty group)."""
    x, w, b = jnp.zeros((2, 6, 0, 2)), jnp.ones(6), jnp.zeros(6)
    grads = jax.grad(lambda x, w, b: nn.group_norm(x, 3, w, b).sum(), argnums=(0, 1, 2))(x, w, b)
    assert grads[0].shape == x.shape
    np.testing.assert_array_equal(np.asarray(grads[1]), np.zeros(6))
    np.testing.assert_array_equal(np.asarray(grads[2]), np.zeros(6))
    t = [torch.zeros(2, 6, 0, 2, dtype=torch.float64, requires_grad=True)] + [
        torch.tensor(np.asarray(a), requires_grad=True) for a in (w, b)]
    torch.nn.functional.group_norm(t[0], 3, t[1], t[2]).sum().backward()
    assert np.isnan(t[1].grad.numpy()).all()  # torch's (the documented difference)


@pytest.mark.parametrize("name", ["max", "min", "median", "nanmedian"])
@pytest.mark.parametrize("keepdims", [True, False])
def test_value_selection_of_a_0d_input_stays_0d_as_torch(name, keepdims):
    """torch.max/min/median/nanmedian(x, dim=0, keepdim=...) of a 0-d x: 0-d values and indices
    (its axis 0 has length 1), the gradient 1, with or without keepdims."""
    fn = getattr(jaxrules.numpy, name)
    out = fn(jnp.array(2.5), axis=0, keepdims=keepdims, return_indices=True)
    theirs = getattr(torch, name)(torch.tensor(2.5), dim=0, keepdim=keepdims)
    assert out.values.shape == tuple(theirs.values.shape) == () and out.indices.shape == ()
    assert float(out.values) == float(theirs.values) and int(out.indices) == int(theirs.indices) == 0
    assert float(jax.grad(lambda x: fn(x, axis=0, keepdims=keepdims, return_indices=True).values)(2.5)) == 1.0


def test_complex_logcumsumexp_with_minus_infinite_real_parts_is_torchs():
    """exp(-inf + iy) = 0: such a term adds nothing, and a prefix of them is -inf + 0j, as torch's
    (JAX's cumlogsumexp gives NaN from there on). The gradient at the
    finite terms is torch's, conjugated (JAX's convention for complex inputs)."""
    x = np.array([complex(-np.inf, 0.3), 1 + 2j, complex(-np.inf, 1.0), 0.5 - 1j, complex(-np.inf, -2.0)])
    ours = np.asarray(jaxrules.numpy.logcumsumexp(x, 0))
    theirs = torch.logcumsumexp(torch.tensor(x), 0).numpy()
    wrapped = theirs.real + 1j * (np.remainder(theirs.imag + np.pi, 2 * np.pi) - np.pi)  # the principal branch
    np.testing.assert_allclose(ours, wrapped, rtol=1e-12)
    g = np.array([0.5 + 1j, -1.0, 2.0 - 0.5j, 0.25j, 1.0])
    xt = torch.tensor(x, requires_grad=True)
    (torch.logcumsumexp(xt, 0) * torch.tensor(g).conj()).real.sum().backward()
    grad = jax.grad(lambda v: jnp.real(jnp.sum(jaxrules.numpy.logcumsumexp(v, 0) * jnp.conj(g))))(jnp.asarray(x))
    finite = np.isfinite(x.real)
    np.testing.assert_allclose(np.asarray(grad)[finite], np.conj(xt.grad.resolve_conj().numpy()[finite]), rtol=1e-12)


@pytest.mark.parametrize("shape, axis", [((0, 2), 0), ((0, 2), 1), ((2, 0), 0), ((0,), 0)])
@pytest.mark.parametrize("dtype", [np.complex128, np.float64])
def test_logcumsumexp_of_an_empty_axis_is_empty_as_torch(shape, axis, dtype):
    """An empty input scans to an empty output, and both derivatives are empty (the complex
    branch shifts by one entry, which an empty axis does not have)."""
    x = np.zeros(shape, dtype)
    theirs = torch.logcumsumexp(torch.tensor(x), axis)
    fn = lambda v: jaxrules.numpy.logcumsumexp(v, axis)  # noqa: E731
    assert fn(x).shape == tuple(theirs.shape) == shape and fn(x).dtype == dtype
    assert jax.jvp(fn, (x,), (x,))[1].shape == shape
    assert jax.vjp(fn, x)[1](x)[0].shape == shape
    assert jax.jit(fn)(x).shape == shape


@pytest.mark.parametrize("keepdims", [True, False])
def test_median_of_a_0d_input_stays_0d(keepdims):
    """median(x, axis=0, keepdims=...) of a 0-d x: x itself, 0-d (torch.median(x, 0, keepdim) keeps
    0-d, keepdims too), the gradient 1 (its VJP broadcasts back to 0-d)."""
    out = jaxrules.numpy.median(jnp.array(2.5), axis=0, keepdims=keepdims)
    assert out.shape == tuple(torch.median(torch.tensor(2.5), dim=0, keepdim=keepdims).values.shape) == ()
    assert float(out) == 2.5
    assert float(jax.grad(lambda x: jaxrules.numpy.median(x, axis=0, keepdims=keepdims))(2.5)) == 1.0
