"""scaled_dot_product_attention and bilinear beyond the registry harness: torch 2.13 parity in
float64 (values and gradients, masks of both kinds, causal with L != S, GQA, broadcasting),
fully masked rows (output 0, zero gradients: torch 2.13's CPU kernels agree), zero-size
inputs, bad input naming the op and the argument, and NaN/inf inputs through the kernel impl."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxrules.ops.attention import bilinear, scaled_dot_product_attention
from jaxrules.testing import check_derivatives

F = torch.nn.functional
RNG = np.random.default_rng(17)


def _normal(*shape):
    return RNG.standard_normal(shape)


def _parity(q, k, v, mask=None, **kwargs):
    """Our value and gradients (of <ct, out> with respect to q, k, v and a float mask) against
    torch's."""
    floats = [q, k, v] + ([mask] if mask is not None and mask.dtype != bool else [])
    ours = scaled_dot_product_attention(q, k, v, mask, **kwargs)
    ct = _normal(*ours.shape)

    def loss(*a):
        m = a[3] if len(a) > 3 else mask
        return jnp.sum(ct * scaled_dot_product_attention(a[0], a[1], a[2], m, **kwargs))

    grads = jax.grad(loss, argnums=tuple(range(len(floats))))(*floats)
    tf = [torch.tensor(a, requires_grad=True) for a in floats]
    tmask = tf[3] if len(tf) > 3 else (None if mask is None else torch.tensor(mask))
    theirs = F.scaled_dot_product_attention(tf[0], tf[1], tf[2], tmask, **kwargs)
    (torch.tensor(ct) * theirs).sum().backward()
    np.testing.assert_allclose(ours, theirs.detach().numpy(), atol=1e-12)
    for g, t in zip(grads, tf):
        np.testing.assert_allclose(g, t.grad.numpy(), atol=1e-12)
    return ours, grads


BOOL_MASK = np.array([[True, False, True, True, False], [False, False, True, True, True],
                      [True, True, True, False, True]])


@pytest.mark.parametrize("case", ["plain", "bool mask", "float mask", "scale", "broadcast batch", "unbatched"])
def test_values_and_gradients_match_torch(case):
    q, k, v = _normal(2, 3, 4), _normal(2, 5, 4), _normal(2, 5, 3)
    if case == "plain":
        _parity(q, k, v)
    elif case == "bool mask":
        _parity(q, k, v, BOOL_MASK)
    elif case == "float mask":
        _parity(q, k, v, _normal(2, 1, 5))
    elif case == "scale":
        _parity(q, k, v, BOOL_MASK[None], scale=0.3)
    elif case == "broadcast batch":
        _parity(_normal(2, 1, 3, 2), _normal(1, 2, 4, 2), _normal(2, 2, 4, 3), _normal(3, 4))
    else:
        _parity(_normal(3, 4), _normal(5, 4), _normal(5, 2))


@pytest.mark.parametrize("length, keys", [(2, 5), (5, 2), (3, 3)])
def test_causal_is_top_left_aligned_like_torch(length, keys):
    q, k, v = _normal(2, length, 3), _normal(2, keys, 3), _normal(2, keys, 2)
    ours, _ = _parity(q, k, v, is_causal=True)
    explicit = scaled_dot_product_attention(q, k, v, np.tri(length, keys, dtype=bool))
    np.testing.assert_allclose(ours, explicit, atol=1e-15)
    # query 0 attends key 0 only
    np.testing.assert_allclose(ours[:, 0], v[:, 0], atol=1e-15)


def test_grouped_query_attention_matches_torch_and_repeated_heads():
    q, k, v = _normal(2, 6, 3, 4), _normal(2, 2, 5, 4), _normal(2, 2, 5, 3)
    mask = _normal(6, 1, 5)
    ours, _ = _parity(q, k, v, mask, enable_gqa=True)
    repeated = scaled_dot_product_attention(q, np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1), mask)
    np.testing.assert_allclose(ours, repeated, atol=1e-14)


def test_fully_masked_rows_give_zero_output_and_zero_gradients_as_torch():
    q, k, v = _normal(2, 3, 4), _normal(2, 5, 4), _normal(2, 5, 3)
    mask = BOOL_MASK.copy()
    mask[1] = False
    ours, (gq, gk, gv) = _parity(q, k, v, mask)  # torch 2.13 CPU: the same zeros
    assert np.all(ours[:, 1] == 0) and np.all(gq[:, 1] == 0)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):  # torch's math backend too
        math = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v, mask)))
    np.testing.assert_allclose(ours, math.numpy(), atol=1e-12)
    # the other rows are unaffected: as attention over rows 0 and 2 alone
    np.testing.assert_allclose(ours[:, [0, 2]], scaled_dot_product_attention(q[:, [0, 2]], k, v, mask[[0, 2]]),
                               atol=1e-15)
    # a float mask with a -inf row, and its gradient: 0 at -inf entries
    fmask = np.where(BOOL_MASK, 0.0, -np.inf)
    fmask[2] = -np.inf
    ours, grads = _parity(q, k, v, fmask)
    assert np.all(ours[:, 2] == 0) and np.all(np.isfinite(grads[3])) and np.all(grads[3][~BOOL_MASK] == 0)
    # forward mode: a finite tangent, 0 on the masked row
    tangent = jax.jvp(lambda a: scaled_dot_product_attention(a, k, v, mask), (q,), (np.ones_like(q),))[1]
    assert np.all(np.isfinite(tangent)) and np.all(tangent[:, 1] == 0)
    # a NaN key: the rows it reaches are NaN, with NaN gradients, as torch's
    nan_k = k.copy()
    nan_k[0, 1, 0] = np.nan
    _, nan_grads = _parity(q, nan_k, v)
    assert np.all(np.isnan(nan_grads[2][0])) and np.all(np.isfinite(nan_grads[2][1]))
    # second order stays finite
    hess = jax.hessian(lambda a: jnp.sum(scaled_dot_product_attention(a, k[0], v[0], mask) ** 2))(q[0])
    assert np.all(np.isfinite(hess))


@pytest.mark.parametrize("shapes", [((0, 3, 4), (0, 5, 4), (0, 5, 3)), ((2, 0, 4), (2, 5, 4), (2, 5, 3)),
                                    ((2, 3, 4), (2, 0, 4), (2, 0, 3)), ((2, 3, 0), (2, 5, 0), (2, 5, 3))])
def test_zero_size_inputs_match_torch(shapes):
    q, k, v = (_normal(*s) for s in shapes)
    ours = scaled_dot_product_attention(q, k, v)
    theirs = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)))
    np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-15)
    assert ours.shape == tuple(theirs.shape)
    grads = jax.grad(lambda *a: jnp.sum(scaled_dot_product_attention(*a)), argnums=(0, 1, 2))(q, k, v)
    assert all(np.all(np.isfinite(g)) for g in grads)


@pytest.mark.parametrize("queries, values", [(0, 3), (1, 0), (0, 0)])
def test_empty_attention_with_broadcast_batch_axes_has_the_broadcast_shape(queries, values):
    """Batch axes (1, 2) and (2, 1) broadcast to (2, 2) whatever the sizes of L and Ev, as torch's
    non-empty output does; torch 2.13 returns the query's batch shape (1, 2) when L or Ev is 0."""
    q, k, v = _normal(1, 2, queries, 2), _normal(2, 1, 4, 2), _normal(2, 1, 4, values)
    ours = scaled_dot_product_attention(q, k, v)
    assert ours.shape == (2, 2, queries, values)
    full = F.scaled_dot_product_attention(torch.tensor(_normal(1, 2, 1, 2)), torch.tensor(k),
                                          torch.tensor(_normal(2, 1, 4, 3)))
    assert tuple(full.shape[:2]) == (2, 2)  # torch broadcasts a non-empty one
    empty = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)))
    if torch.__version__.startswith("2.13."):  # the reference version; torch 2.11 broadcasts, as we do
        assert tuple(empty.shape[:2]) == (1, 2)  # the deviation: torch keeps the query's batch shape
    grads = jax.grad(lambda *a: jnp.sum(scaled_dot_product_attention(*a)), argnums=(0, 1, 2))(q, k, v)
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    assert all(np.all(g == 0) for g in grads)


def test_dropout_applies_the_documented_mask_and_formulas_agree():
    q, k, v, mask = _normal(2, 3, 4), _normal(2, 5, 4), _normal(2, 5, 3), _normal(3, 5)
    key = jax.random.key(3)
    ours = scaled_dot_product_attention(q, k, v, mask, 0.4, dropout_key=key)
    # by hand: softmax weights times Z = bernoulli(key, 0.6, (..., L, S)) / 0.6
    weights = jax.nn.softmax(q @ np.swapaxes(k, -1, -2) / 2 + mask, axis=-1)
    z = np.asarray(jax.random.bernoulli(key, 0.6, (2, 3, 5))) / 0.6
    np.testing.assert_allclose(ours, (weights * z) @ v, atol=1e-14)
    check_derivatives(lambda *a: scaled_dot_product_attention(*a, 0.4, dropout_key=key), (q, k, v, mask))
    # GQA: the mask has the output's shape (query heads)
    q4, k4, v4 = _normal(1, 4, 2, 2), _normal(1, 2, 3, 2), _normal(1, 2, 3, 2)
    dropped = scaled_dot_product_attention(q4, k4, v4, dropout_p=0.5, enable_gqa=True, dropout_key=key)
    weights = jax.nn.softmax(q4 @ np.swapaxes(np.repeat(k4, 2, axis=1), -1, -2) / np.sqrt(2), axis=-1)
    z = np.asarray(jax.random.bernoulli(key, 0.5, (1, 4, 2, 3))) / 0.5
    np.testing.assert_allclose(dropped, (weights * z) @ np.repeat(v4, 2, axis=1), atol=1e-14)
    assert np.all(scaled_dot_product_attention(q, k, v, dropout_p=1.0, dropout_key=key) == 0)


def test_low_precision_and_jit():
    q, k, v = _normal(2, 3, 4), _normal(2, 5, 4), _normal(2, 5, 3)
    ref = scaled_dot_product_attention(q, k, v, BOOL_MASK)
    low = scaled_dot_product_attention(*(jnp.asarray(a, jnp.bfloat16) for a in (q, k, v)), BOOL_MASK)
    assert low.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(low, np.float64), ref, atol=0.05)
    np.testing.assert_allclose(jax.jit(scaled_dot_product_attention)(q, k, v, BOOL_MASK), ref, atol=1e-15)


_Q, _K, _V = np.ones((2, 3, 4)), np.ones((2, 5, 4)), np.ones((2, 5, 3))


@pytest.mark.parametrize("call, error, match", [
    (lambda: scaled_dot_product_attention(_Q, _K, _V, dropout_p=0.1), ValueError, "dropout_key"),
    (lambda: scaled_dot_product_attention(_Q, _K, _V, dropout_p=1.5), ValueError, "dropout_p"),
    (lambda: scaled_dot_product_attention(_Q, _K, _V, BOOL_MASK, is_causal=True), ValueError, "attn_mask"),
    (lambda: scaled_dot_product_attention(_Q, np.ones((2, 5, 3)), _V), ValueError, "query .* key"),
    (lambda: scaled_dot_product_attention(_Q, _K, np.ones((2, 4, 3))), ValueError, "key .* value"),
    (lambda: scaled_dot_product_attention(_Q, _K, _V, np.ones((4, 5), bool)), ValueError, "attn_mask"),
    (lambda: scaled_dot_product_attention(_Q, _K, _V, np.ones((3, 5), int)), TypeError, "attn_mask"),
    (lambda: scaled_dot_product_attention(np.ones(4), np.ones(4), np.ones(3)), ValueError, "query"),
    (lambda: scaled_dot_product_attention(_Q * 1j, _K, _V), TypeError, "query"),
    (lambda: scaled_dot_product_attention(_Q, _K, _V, is_causal=1), TypeError, "is_causal"),
    (lambda: scaled_dot_product_attention(_Q, _K, _V, scale="a"), TypeError, "scale"),
    (lambda: scaled_dot_product_attention(np.ones((1, 4, 3, 2)), np.ones((1, 3, 5, 2)), np.ones((1, 3, 5, 2)),
                                          enable_gqa=True), ValueError, "enable_gqa"),
    (lambda: scaled_dot_product_attention(np.ones((1, 4, 3, 2)), np.ones((1, 2, 5, 2)), np.ones((1, 2, 5, 2))),
     ValueError, "enable_gqa"),
    (lambda: scaled_dot_product_attention(None, _K, _V), TypeError, "query"),
    (lambda: scaled_dot_product_attention(_Q, _K, _V, impl="cudnn"), ValueError, "impl"),
    # the kernels take no mask, L == S and a power-of-two head dim >= 16
    (lambda: scaled_dot_product_attention(_Q, _K, _V, impl="pallas_interpret"), ValueError, "impl='pallas_interpret'"),
    (lambda: scaled_dot_product_attention(*(np.ones((1, 3, 16)),) * 3, BOOL_MASK[:, :3], impl="pallas"),
     ValueError, "impl='pallas'"),
    (lambda: scaled_dot_product_attention(*(np.ones((1, 3, 16)),) * 2, np.ones((1, 3, 1)), impl="pallas"),
     ValueError, r"E == Ev"),
])
def test_bad_input_names_the_op_and_argument(call, error, match):
    with pytest.raises(error, match=f"scaled_dot_product_attention.*{match}"):
        call()


def test_kernel_impl_with_zero_size_inputs_gives_the_formulas_empty_result():
    for shape in ((2, 0, 16), (0, 3, 16)):
        q = np.ones(shape)
        out = scaled_dot_product_attention(q, q, q, impl="pallas_interpret")
        assert out.shape == shape
        grad = jax.grad(lambda a: jnp.sum(scaled_dot_product_attention(a, a, a, impl="pallas_interpret")))(q)
        assert grad.shape == shape


def test_kernel_impl_matches_the_xla_formulas_with_a_batch_axis_and_under_vmap_and_jit():
    """``impl="pallas_interpret"`` (the ragged flash kernels, jaxrules.nested.dense) against the
    default XLA formulas: (B, L, E) without a head axis (the record's samples have one), causal,
    under jit and vmap; values and gradients."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((3, 2, 9, 16)) for _ in range(3))

    def loss(impl):
        return lambda *a: jnp.sum(jnp.sin(scaled_dot_product_attention(*a, is_causal=True, impl=impl)))

    np.testing.assert_allclose(jax.jit(loss("pallas_interpret"))(q[0], k[0], v[0]), loss(None)(q[0], k[0], v[0]),
                               atol=1e-12)
    ours = jax.vmap(jax.grad(loss("pallas_interpret"), argnums=(0, 1, 2)))(q, k, v)
    reference = jax.vmap(jax.grad(loss("xla"), argnums=(0, 1, 2)))(q, k, v)
    for a, b in zip(ours, reference):
        np.testing.assert_allclose(a, b, atol=1e-12)


def _poisoned_qkv(where, value):
    rng = np.random.default_rng(5)
    q, k, v, ct = (rng.standard_normal((2, 9, 16)) for _ in range(4))
    if where == "all keys":  # every score of query row 4 is -inf
        k[..., 0] = np.abs(k[..., 0]) + 0.1
        q[1, 4, 0] = value
    else:
        (q if where == "q" else k)[1, 4, 3] = value
    return q, k, v, ct


def _value_and_grads(impl, q, k, v, ct, is_causal):
    f = lambda *a: scaled_dot_product_attention(*a, is_causal=is_causal, impl=impl)  # noqa: E731
    return [f(q, k, v), *jax.grad(lambda *a: jnp.sum(ct * f(*a)), argnums=(0, 1, 2))(q, k, v)]


def _assert_same(ours, expected):
    for a, b in zip(ours, expected):
        np.testing.assert_allclose(a, b, atol=1e-12, equal_nan=True)


POISONS = [("q", np.nan), ("q", np.inf), ("q", -np.inf), ("k", np.nan), ("k", np.inf)]


@pytest.mark.parametrize("where, value", POISONS)
def test_kernel_impl_propagates_nonfinite_inputs_as_torch(where, value):
    """A NaN or infinite q or k entry: the kernels' value and gradients (NaN pattern, infinities,
    finite entries) are torch's and the XLA formulas'."""
    q, k, v, ct = _poisoned_qkv(where, value)
    tf = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    theirs = F.scaled_dot_product_attention(*tf)
    (torch.tensor(ct) * theirs).sum().backward()
    expected = [theirs.detach().numpy()] + [t.grad.numpy() for t in tf]
    assert np.isnan(expected[0][1]).any() and np.isfinite(expected[0][0]).all()  # the poison reaches the output
    _assert_same(_value_and_grads("pallas_interpret", q, k, v, ct, False), expected)
    _assert_same(_value_and_grads("xla", q, k, v, ct, False), expected)


@pytest.mark.parametrize("where, value", POISONS)
def test_causal_kernel_impl_propagates_nonfinite_inputs_within_the_lower_triangle(where, value):
    """Causal: the value is numpy's softmax over the keys at or before each query (a poisoned
    key reaches the later queries only), as the XLA formulas'; dq and dk are the XLA formulas'.
    dv_j = sum_(i >= j) P_ij dO_i is numpy's too: finite for the keys after a NaN query row,
    which that row does not see. torch 2.13's causal kernel (and the XLA formulas' dv) give NaN
    there as well: not compared."""
    q, k, v, ct = _poisoned_qkv(where, value)
    with np.errstate(invalid="ignore"):
        s = np.where(np.tri(9, dtype=bool), q @ k.swapaxes(1, 2) / 4, -np.inf)  # scale 1/sqrt(16)
        e = np.exp(s - s.max(-1, keepdims=True))
        p = np.where(np.tri(9, dtype=bool), e / e.sum(-1, keepdims=True), 0)
    ours = _value_and_grads("pallas_interpret", q, k, v, ct, True)
    _assert_same([ours[0], ours[3]], [p @ v, p.swapaxes(1, 2) @ ct])
    _assert_same(ours[:3], _value_and_grads("xla", q, k, v, ct, True)[:3])
    assert np.isnan(ours[0][1]).any() and np.isfinite(ours[0][0]).all()


@pytest.mark.parametrize("is_causal", [False, True])
def test_kernel_impl_gives_nan_where_every_score_is_minus_inf(is_causal):
    """Query row 4's scores are all -inf (q[4, 0] = -inf, every k[:, 0] > 0): its softmax is
    0 / 0 = NaN in the kernels, as in the nested and the dense XLA formulas (the softmax of a row of
    -inf logits is undefined); the masked keys of its block (9 rows in a block of 16; causal: the
    later keys) take no weight. torch 2.13's CPU kernel gives 0 there (its ``_safe_softmax``, the
    fully masked rows' convention, which costs a pass over the logits: a documented deviation)."""
    q, k, v, ct = _poisoned_qkv("all keys", -np.inf)
    ours = _value_and_grads("pallas_interpret", q, k, v, ct, is_causal)[0]
    assert np.isnan(ours[1, 4]).all() and not np.isnan(np.delete(ours, 4, 1)).any()
    xla = _value_and_grads("xla", q, k, v, ct, is_causal)[0]
    assert np.isnan(xla[1, 4]).all() and not np.isnan(np.delete(xla, 4, 1)).any()
    theirs = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), is_causal=is_causal)
    assert np.all(theirs[1, 4].numpy() == 0)
    np.testing.assert_allclose(np.delete(ours, 4, 1), np.delete(theirs.numpy(), 4, 1), atol=1e-12)


# ----------------------------------------------------------------------------------------------
# bilinear


@pytest.mark.parametrize("shapes, with_bias", [
    (((3, 2), (3, 4), (5, 2, 4)), True), (((2, 2, 3), (2, 2, 2), (2, 3, 2)), False), (((3,), (2,), (4, 3, 2)), True),
    (((0, 2), (0, 3), (4, 2, 3)), True), (((3, 2), (3, 3), (0, 2, 3)), False),  # zero-size, as torch takes them
])
def test_bilinear_matches_torch(shapes, with_bias):
    x1, x2, w = (_normal(*s) for s in shapes)
    b = _normal(w.shape[0]) if with_bias else None
    args = [x1, x2, w] + ([b] if with_bias else [])
    ours = bilinear(*args)
    ct = _normal(*ours.shape)
    grads = jax.grad(lambda *a: jnp.sum(ct * bilinear(*a)), argnums=tuple(range(len(args))))(*args)
    targs = [torch.tensor(a, requires_grad=True) for a in args]
    theirs = F.bilinear(*targs)
    (torch.tensor(ct) * theirs).sum().backward()
    np.testing.assert_allclose(ours, theirs.detach().numpy(), atol=1e-12)
    for g, t in zip(grads, targs):
        np.testing.assert_allclose(g, t.grad.numpy(), atol=1e-12)


def test_bilinear_with_empty_features_is_the_bias():
    # H1 = 0: the empty sum is 0, so y = b (torch 2.13 fails to reshape there); gradients finite
    b = _normal(4)
    np.testing.assert_allclose(bilinear(np.ones((3, 0)), _normal(3, 2), np.ones((4, 0, 2)), b), np.tile(b, (3, 1)))
    empty_x1, empty_w = np.ones((3, 0)), np.ones((4, 0, 2))
    grads = jax.grad(lambda x2, b: jnp.sum(bilinear(empty_x1, x2, empty_w, b)), (0, 1))(_normal(3, 2), b)
    np.testing.assert_allclose(grads[0], 0)
    np.testing.assert_allclose(grads[1], 3)


def test_bilinear_with_an_infinite_input_entry_has_the_exact_infinite_gradient():
    # y_o = x1 W_o x2, so dy/dx1_i summed over o is sum_j c_ij x2_j with c_ij = sum_o W_oij: one
    # infinite x2_k gives sign(c_ik) inf exactly (torch 2.13's _trilinear: NaN); the value is
    # torch's (x1 W contracted first)
    x1, x2, w = _normal(2, 3), _normal(2, 4), _normal(5, 3, 4)
    x2[1, 2] = np.inf
    grad = jax.grad(lambda a: jnp.sum(bilinear(a, x2, w)))(x1)
    np.testing.assert_array_equal(grad[1], np.sign(w.sum(0)[:, 2]) * np.inf)
    np.testing.assert_allclose(grad[0], w.sum(0) @ x2[0], rtol=1e-12)
    theirs = F.bilinear(torch.tensor(x1), torch.tensor(x2), torch.tensor(w))
    np.testing.assert_allclose(bilinear(x1, x2, w), theirs.numpy(), rtol=1e-13)  # the infinities equal


@pytest.mark.parametrize("args, error, match", [
    ((np.ones((3, 2)), np.ones((2, 4)), np.ones((5, 2, 4))), ValueError, "input1 .* input2"),
    ((np.ones((3, 2)), np.ones((3, 4)), np.ones((5, 4, 2))), ValueError, "weight"),
    ((np.ones((3, 2)), np.ones((3, 4)), np.ones((5, 2, 4)), np.ones(4)), ValueError, "bias"),
    ((np.ones((3, 2)) * 1j, np.ones((3, 4)), np.ones((5, 2, 4))), TypeError, "input1"),
    ((np.ones(()), np.ones(()), np.ones((5, 1, 1))), ValueError, "input1"),
    (("x", np.ones((3, 4)), np.ones((5, 2, 4))), TypeError, "input1"),
])
def test_bilinear_bad_input(args, error, match):
    with pytest.raises(error, match=f"bilinear.*{match}"):
        bilinear(*args)
