"""NestedTensor beyond the registry records (which check every op per component against torch):
the pytree contract (grad returns a NestedTensor, jit does not recompile for new lengths, jvp
tangents), converters and their derivatives, transforms (checkpoint, vmap over dense weights),
attention against padded dense attention, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _compiled import value_vjp_jvp

import jaxrules.nested as N
from jaxrules.testing import check_derivatives

RNG = np.random.default_rng(11)
LENGTHS = [3, 0, 5, 1]


def _nt(lengths=LENGTHS, inner=(4,)):
    return N.nested_tensor([RNG.standard_normal((n, *inner)) for n in lengths])


def _loss(nt):
    return jnp.sum(N.sum(N.softmax(nt * nt, 1), 1) ** 2) + jnp.sum(N.gelu(nt).values ** 3)


def test_constructors_agree_and_round_trip():
    comps = [RNG.standard_normal((n, 2)) for n in LENGTHS]
    a = N.nested_tensor(comps)
    b = N.from_jagged(a.values, np.r_[0, np.cumsum(LENGTHS)])
    c = N.from_lengths(a.values, LENGTHS)
    padded = a.to_padded(padding_value=-7.0)
    d = N.from_padded(padded, LENGTHS)
    assert padded.shape == (4, 5, 2) and np.all(padded[1] == -7.0) and np.all(padded[0, 3:] == -7.0)
    for nt in (a, b, c, d):
        np.testing.assert_array_equal(nt.values, a.values)
        np.testing.assert_array_equal(nt.offsets, [0, 3, 3, 8, 9])
        np.testing.assert_array_equal(nt.lengths(), LENGTHS)
        for got, want in zip(nt.unbind(), comps):
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(a.select(2), comps[2])
    np.testing.assert_array_equal(a.select(-1), comps[3])
    assert repr(a) == "NestedTensor(batch=4, lengths=[3, 0, 5, 1], inner_shape=(2,), dtype=float64)"
    assert a.shape == (4, None, 2) and a.ndim == 3


def test_split_with_sizes_keeps_offsets():
    nt = _nt(inner=(6,))
    parts = nt.split_with_sizes([1, 2, 3])
    assert [p.inner_shape for p in parts] == [(1,), (2,), (3,)]
    np.testing.assert_array_equal(jnp.concatenate([p.values for p in parts], -1), nt.values)
    assert all(np.array_equal(p.offsets, nt.offsets) for p in parts)


def test_grad_returns_a_nested_tensor_equal_to_per_component_grads():
    nt = _nt()
    grad = jax.grad(_loss)(nt)
    assert isinstance(grad, N.NestedTensor)
    np.testing.assert_array_equal(grad.offsets, nt.offsets)

    def per_component(values):
        comps = jnp.split(values, np.cumsum(LENGTHS)[:-1])
        total = 0.0
        for c in comps:
            total = total + jnp.sum(jnp.sum(jax.nn.softmax(c * c, axis=0), 0) ** 2) + jnp.sum(jax.nn.gelu(c) ** 3)
        return total

    np.testing.assert_allclose(grad.values, jax.grad(per_component)(nt.values), rtol=1e-12, atol=1e-12)
    value, grad2 = jax.value_and_grad(_loss)(nt)
    np.testing.assert_allclose(value, per_component(nt.values), rtol=1e-12)
    np.testing.assert_array_equal(grad2.values, grad.values)


def test_jit_does_not_recompile_when_only_lengths_change():
    traces = []

    @jax.jit
    def step(nt, w):
        traces.append(1)
        return N.sum(N.linear(nt, w), 1)

    w = RNG.standard_normal((3, 2))
    values = RNG.standard_normal((10, 2))
    for lengths in ([3, 3, 4], [1, 8, 1], [0, 10, 0]):
        out = step(N.from_lengths(values, lengths), w)
        pieces = np.split(values @ w.T, np.cumsum(lengths)[:-1])
        np.testing.assert_allclose(out, np.stack([p.sum(0) for p in pieces]), rtol=1e-12)
    assert len(traces) == 1


def test_jit_of_grad_returns_values_and_says_how_to_restore_offsets():
    nt = _nt()
    grad = jax.jit(jax.grad(_loss))(nt)
    np.testing.assert_allclose(grad.values, jax.grad(_loss)(nt).values, rtol=1e-12)
    with pytest.raises(ValueError, match="with_values"):
        grad.unbind()
    np.testing.assert_allclose(nt.with_values(grad.values).unbind()[2], jax.grad(_loss)(nt).unbind()[2])


def test_jvp_with_a_nested_tangent_matches_the_gradient():
    nt = _nt()
    t = RNG.standard_normal(nt.values.shape)
    value, tangent = jax.jvp(_loss, (nt,), (nt.with_values(t),))
    np.testing.assert_allclose(tangent, np.sum(jax.grad(_loss)(nt).values * t), rtol=1e-12)
    np.testing.assert_allclose(value, _loss(nt))


def test_checkpoint_and_hessian_vector_product():
    nt = _nt()
    f = lambda v: _loss(nt.with_values(v))  # noqa: E731
    g1 = jax.grad(jax.checkpoint(f))(nt.values)
    np.testing.assert_allclose(g1, jax.grad(f)(nt.values), rtol=1e-12)
    check_derivatives(f, (nt.values,))


def test_vmap_over_a_batch_of_weights_with_a_nested_input():
    nt = _nt(inner=(3,))
    weights = RNG.standard_normal((5, 2, 3))

    def f(w, x):
        return N.sum(N.silu(N.linear(x, w)), 1)

    batched = jax.vmap(f, in_axes=(0, None))(weights, nt)
    np.testing.assert_allclose(batched, np.stack([f(w, nt) for w in weights]), rtol=1e-12)
    grads = jax.vmap(jax.grad(lambda w, x: jnp.sum(f(w, x) ** 2)), in_axes=(0, None))(weights, nt)
    np.testing.assert_allclose(grads[3], jax.grad(lambda w: jnp.sum(f(w, nt) ** 2))(weights[3]), rtol=1e-12)


@pytest.mark.parametrize("heads, causal", [(None, False), (2, False), (2, True)])
def test_attention_equals_masked_padded_attention(heads, causal):
    lengths = [7, 1, 0, 12, 4]
    inner = (8,) if heads is None else (heads, 8)
    q, k, v = (_nt(lengths, inner) for _ in range(3))
    offsets = np.asarray(q.offsets)  # on the host: the reference pads under jit

    def padded_reference(qv, kv, vv):
        qp, kp, vp = (N.from_jagged(x, offsets).to_padded() for x in (qv, kv, vv))
        if heads is None:
            qp, kp, vp = qp[:, :, None], kp[:, :, None], vp[:, :, None]
        valid = np.arange(qp.shape[1])[None, :] < np.array(lengths)[:, None]
        s = jnp.einsum("bqhd,bkhd->bhqk", qp, kp) / np.sqrt(8)
        keys = valid[:, None, None, :] & (np.tri(qp.shape[1], dtype=bool) if causal else True)
        s = jnp.where(keys, s, -jnp.inf)
        p = jnp.where(valid[:, None, :, None], jax.nn.softmax(s, -1), 0)
        out = jnp.einsum("bhqk,bkhd->bqhd", p, vp)
        out = out if heads is not None else out[:, :, 0]
        return N.from_padded(out, lengths).values

    def ours(qv, kv, vv, block=None, steps=None):
        return N.scaled_dot_product_attention(
            q.with_values(qv), k.with_values(kv), v.with_values(vv), is_causal=causal, block=block,
            pairs_per_step=steps,
        ).values

    args = (q.values, k.values, v.values)
    ct = RNG.standard_normal(q.values.shape[:-1] + (8,))

    np.testing.assert_allclose(ours(*args), padded_reference(*args), atol=1e-12)  # eager
    # one block per sequence in one step; several blocks per sequence, the pairs in steps of 3
    for block, steps in ((None, None), (4, 3)):
        tangents = tuple(RNG.standard_normal(a.shape) for a in args)
        got = value_vjp_jvp(lambda *a, block=block, steps=steps: ours(*a, block, steps), args, ct, tangents)
        want = value_vjp_jvp(padded_reference, args, ct, tangents)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(g, w, atol=1e-12)


def test_causal_attention_visits_only_the_lower_triangle_of_block_pairs():
    """is_causal: sum_i b_i (b_i + 1) / 2 real pairs (b_i blocks of sequence i), each with its
    key block at or before its query block in the same sequence; the static bound holds it."""
    from jaxrules.nested import blocks as K

    lengths, block = np.array([9, 0, 4, 17, 1]), 4
    offsets = jnp.asarray(np.concatenate([[0], np.cumsum(lengths)]), jnp.int32)
    plan = K.attention_plan(offsets, int(lengths.sum()), block, 17, 1, causal=True)
    full = K.attention_plan(offsets, int(lengths.sum()), block, 17, 1)
    num_blocks = K.num_blocks_of(plan.slot_token, block) - 1
    pq, pk = np.asarray(plan.pair_q), np.asarray(plan.pair_k)
    real = pq < num_blocks
    b = -(-lengths // block)
    assert real.sum() == (b * (b + 1) // 2).sum() == 6 + 0 + 1 + 15 + 1  # 3, 0, 1, 5, 1 blocks
    assert np.all(pk[real] <= pq[real])
    assert (np.asarray(full.pair_q) < num_blocks).sum() == (b * b).sum()
    assert len(pq) < len(np.asarray(full.pair_q))
    q = _nt([3, 2], (4,))
    with pytest.raises(TypeError, match="is_causal must be a bool"):
        N.scaled_dot_product_attention(q, q, q, is_causal=1)


def test_attention_log_sum_exp_and_its_gradient():
    q, k, v = (_nt([4, 2], (2, 3)) for _ in range(3))
    out, lse = N.scaled_dot_product_attention(q, k, v, with_lse=True)
    s = jnp.einsum("qhd,khd->hqk", q.select(0), k.select(0)) / np.sqrt(3)
    np.testing.assert_allclose(lse.select(0), jax.nn.logsumexp(s, -1).T, rtol=1e-12)

    def f(qv):
        return jnp.sum(jnp.sin(N.scaled_dot_product_attention(q.with_values(qv), k, v, with_lse=True)[1].values))

    check_derivatives(f, (q.values,))
    g = lambda qv: N.scaled_dot_product_attention(q.with_values(qv), k, v, block=2, pairs_per_step=2).values  # noqa: E731
    check_derivatives(g, (q.values,))


def test_attention_rejects_a_sequence_longer_than_max_seqlen():
    """Offsets known on the host: a ValueError at once. Traced offsets (under jit): the result and
    its gradients NaN, for every implementation (no host callback: it would stall the GPU's queue
    every step), and finite within the bound."""
    q = _nt([3, 9], (4,))
    with pytest.raises(ValueError, match="longer than max_seqlen=4 \\(its length: 9\\)"):
        N.scaled_dot_product_attention(q, q, q, max_seqlen=4)

    def loss(values, offsets, bound, impl):
        t = N.from_jagged(values, offsets)
        return jnp.sum(N.scaled_dot_product_attention(t, t, t, max_seqlen=bound, impl=impl, block=4).values)

    for impl in ("xla", "pallas_interpret"):
        value, grad = jax.jit(jax.value_and_grad(loss), static_argnums=(2, 3))(q.values, q.offsets, 4, impl)
        assert np.isnan(value) and np.isnan(grad).all()
        value, grad = jax.jit(jax.value_and_grad(loss), static_argnums=(2, 3))(q.values, q.offsets, 12, impl)
        assert np.isfinite(value) and np.isfinite(grad).all()


@pytest.mark.parametrize("impl", ["xla", "pallas_interpret"])
def test_attention_with_zero_size_heads_averages_the_values(impl):
    """Head dim 0: every score is 0, so each query gets its sequence's mean value (torch: the
    same); the kernels hand zero-size heads to the XLA formulas."""
    offsets = np.array([0, 3, 3, 5])
    q = N.from_jagged(np.ones((5, 2, 0)), offsets)
    v = np.random.default_rng(1).standard_normal((5, 2, 3))
    f = lambda values: N.scaled_dot_product_attention(q, q, N.from_jagged(values, offsets), impl=impl).values  # noqa: E731
    expected = np.concatenate([np.broadcast_to(v[:3].mean(0), (3, 2, 3)), np.broadcast_to(v[3:].mean(0), (2, 2, 3))])
    np.testing.assert_allclose(f(v), expected, atol=1e-15)
    grad = jax.grad(lambda values: jnp.sum(f(values)))(v)  # each value enters its sequence's n means with 1/n
    np.testing.assert_allclose(grad, np.ones_like(v), atol=1e-15)


def test_attention_kernels_refuse_values_of_another_head_dim():
    q = N.from_jagged(np.ones((5, 16)), np.array([0, 3, 5]))
    v = q.with_values(np.ones((5, 1)))
    with pytest.raises(ValueError, match="nested.scaled_dot_product_attention: impl='pallas_interpret' needs v's head"):
        N.scaled_dot_product_attention(q, q, v, impl="pallas_interpret")
    np.testing.assert_allclose(N.scaled_dot_product_attention(q, q, v, impl="xla").values, np.ones((5, 1)))


def test_select_and_to_padded_gradients_are_the_seed_backward():
    nt = _nt()
    g = jax.grad(lambda x: jnp.sum(x.select(2) ** 2))(nt)
    expected = np.zeros_like(nt.values)
    expected[3:8] = 2 * nt.values[3:8]  # seed _nested_select_backward: zeros, g copied into component 2
    np.testing.assert_allclose(g.values, expected)
    ct = RNG.standard_normal((4, 5, 4))
    g = jax.grad(lambda x: jnp.sum(ct * x.to_padded()))(nt)
    np.testing.assert_allclose(g.values, N.from_padded(ct, LENGTHS).values)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: N.from_jagged(np.zeros((5, 2)), [0, 3, 2, 5]), "non-decreasing"),
        (lambda: N.from_jagged(np.zeros((5, 2)), [0, 2, 4]), "end at the number of rows"),
        (lambda: N.from_jagged(np.zeros((5, 2)), [1, 2, 5]), "start at 0"),
        (lambda: N.from_lengths(np.zeros((5, 2)), [3, -1, 3]), "lengths must be >= 0"),
        (lambda: N.from_jagged(np.zeros((5, 2)), np.array([[0, 5]])), "1-d"),
        (lambda: N.nested_tensor([np.zeros((2, 3)), np.zeros((2, 4))]), "inner shape"),
        (lambda: N.from_padded(np.zeros((2, 3, 1)), [4, 1]), r"lie in \[0, 3\]"),
        (lambda: _nt() + N.from_lengths(np.zeros((9, 4)), [4, 0, 4, 1]), "different offsets"),
        (lambda: _nt() * np.ones((3, 4)), "dense operand"),
        (lambda: N.softmax(_nt(), 0), "axis 0"),
        (lambda: N.sum(_nt(), 0), "axis 0"),
        (lambda: N.sum(_nt(), 3), "out of range"),
        (lambda: N.layer_norm(_nt(), (5, 4)), "ragged axis"),
        (lambda: N.matmul(_nt(), N.nested_tensor([np.zeros((n, 4)) for n in LENGTHS])), "two inner axes"),
        (lambda: N.matmul(_nt(), np.ones((4, 4, 2, 3))), "rank 1 to 2"),
        (lambda: _nt().split_with_sizes([1, 2]), "must sum"),
        (lambda: _nt().select(4), "out of range"),
        (lambda: N.scaled_dot_product_attention(_nt(), _nt(), _nt([1, 1, 1, 1])), "different offsets"),
        (lambda: N.log_softmax(_nt(), 0), "axis 0"),
        (lambda: N.mean(_nt(), 0), "axis 0"),
        (lambda: N.mean(_nt(), (1, 3)), "out of range"),
        (lambda: N.matmul(_nt(inner=(2, 4)), _nt(inner=(2, 4)), transpose_a=True), "one inner axis each"),
        (lambda: N.matmul(_nt(), _nt([1, 1, 1, 6]), transpose_a=True), "different offsets"),
        (lambda: N.dropout(_nt(), 1.5, key=jax.random.key(0)), "probability"),
        (lambda: N.dropout(_nt(), 0.5), "key"),
    ],
)
def test_bad_input_raises_a_clear_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_type_errors_name_the_argument():
    with pytest.raises(TypeError, match="argument 'x' must be a NestedTensor"):
        N.gelu(np.ones((3, 2)))
    for op in (N.log_softmax, N.mean):
        with pytest.raises(TypeError, match=f"nested.{op.__name__}: argument 'x' must be a NestedTensor"):
            op(np.ones((3, 2)), 1)
    with pytest.raises(TypeError, match="nested.matmul: argument 'b' must be a NestedTensor"):
        N.matmul(_nt(), np.ones((9, 4)), transpose_a=True)
    with pytest.raises(TypeError, match="nested.dropout: argument 'x'"):
        N.dropout(np.ones((3, 2)), 0.5, key=jax.random.key(0))
    with pytest.raises(TypeError, match="expected a list of arrays"):
        N.nested_tensor(np.ones((3, 2)))
    with pytest.raises(TypeError, match="offsets must be integers"):
        N.from_jagged(np.zeros((3, 1)), np.array([0.0, 1.5, 3.0]))


def test_traced_offsets_need_static_sizes_for_host_operations():
    @jax.jit
    def f(values, offsets):
        return N.from_jagged(values, offsets).to_padded()

    with pytest.raises(ValueError, match="traced"):
        f(np.zeros((4, 2)), np.array([0, 1, 4]))
    g = jax.jit(lambda v, o: N.from_jagged(v, o).to_padded(max_len=3))
    np.testing.assert_array_equal(g(np.ones((4, 1)), np.array([0, 1, 4])).sum((1, 2)), [1, 3])


def test_mismatched_offsets_under_jit_raise_at_run_time():
    f = jax.jit(lambda a, oa, b, ob: (N.from_jagged(a, oa) + N.from_jagged(b, ob)).values)
    values = np.ones((5, 2))
    np.testing.assert_array_equal(f(values, np.array([0, 2, 5]), values, np.array([0, 2, 5])), 2 * values)
    with pytest.raises(Exception, match="different offsets"):
        jax.block_until_ready(f(values, np.array([0, 2, 5]), values, np.array([0, 3, 5])))


def test_fused_kernels_match_the_xla_formulas_with_both_cotangents():
    lengths = [19, 0, 3, 33, 16]
    q, k, v = (_nt(lengths, (2, 16)) for _ in range(3))

    def attend(impl):
        def f(qv, kv, vv):
            out, lse = N.scaled_dot_product_attention(
                q.with_values(qv), k.with_values(kv), v.with_values(vv), impl=impl, with_lse=True
            )
            return out.values, lse.values

        return f

    args = (q.values, k.values, v.values)
    want, pull_want = jax.vjp(attend("xla"), *args)
    got, pull_got = jax.vjp(attend("pallas_interpret"), *args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, atol=1e-12)
    ct = (RNG.standard_normal(want[0].shape), RNG.standard_normal(want[1].shape))
    for a, b in zip(pull_got(ct), pull_want(ct)):
        np.testing.assert_allclose(a, b, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# log_softmax, mean, dropout and the ragged-contracting matmul: zero-length components (offsets
# with repeats), torch's jagged layout where it supports the op, traced offsets


ZERO_LENGTHS = [3, 0, 0, 2, 0]


def _njt(torch, nt, grad=False):
    values = torch.tensor(np.asarray(nt.values), requires_grad=grad)
    offsets = torch.tensor(np.asarray(nt.offsets), dtype=torch.int64)
    return torch.nested.nested_tensor_from_jagged(values, offsets), values


def _weights(nt):
    """Per-component weights ``1 + arange`` (a non-trivial cotangent), packed like ``nt``."""
    return np.concatenate([1.0 + np.arange(c.size).reshape(c.shape) for c in nt.unbind()])


def _per_component_grad(nt, fn):
    """The gradient of ``sum_i sum(w_i fn(component_i))`` on the packed values, one dense call
    per component (jax.numpy: an independent reference)."""
    def loss(values):
        pieces = jnp.split(values, np.cumsum(np.diff(np.asarray(nt.offsets)))[:-1])
        return sum(jnp.sum(fn(c) * (1.0 + jnp.arange(c.size).reshape(c.shape))) for c in pieces if c.shape[0])

    return jax.grad(loss)(nt.values)


def test_log_softmax_over_the_ragged_axis_with_empty_components():
    nt = _nt(ZERO_LENGTHS, (2,))
    out = N.log_softmax(nt, 1)
    for got, comp in zip(out.unbind(), nt.unbind()):
        np.testing.assert_allclose(got, jax.scipy.special.log_softmax(np.asarray(comp), axis=0) if comp.shape[0]
                                   else np.zeros((0, 2)), rtol=1e-12)
    weights = _weights(nt)

    def loss(v):
        return jnp.sum(N.log_softmax(nt.with_values(v), 1).values * weights)

    want = _per_component_grad(nt, lambda c: jax.nn.log_softmax(c, axis=0))
    np.testing.assert_allclose(jax.grad(loss)(nt.values), want, rtol=1e-12)
    np.testing.assert_allclose(N.log_softmax(nt, -1).values, jax.nn.log_softmax(nt.values, -1), rtol=1e-12)
    assert N.log_softmax(N.from_lengths(np.zeros((0, 2)), [0, 0]), 1).values.shape == (0, 2)


def test_log_softmax_over_the_ragged_axis_with_infinite_logits_is_torchs_dense_log_softmax():
    torch = pytest.importorskip("torch")
    comps = [np.array([[np.inf], [0.0]]), np.array([[-np.inf], [-np.inf]]), np.array([[-np.inf], [1.0], [2.0]])]
    nt = N.nested_tensor(comps)
    for got, c in zip(N.log_softmax(nt, 1).unbind(), comps):
        np.testing.assert_array_equal(got, torch.log_softmax(torch.tensor(c), 0).numpy())
    g = jax.grad(lambda v: jnp.sum(N.log_softmax(nt.with_values(v), 1).values[4:]))(nt.values)
    np.testing.assert_allclose(g[4:], [[1.0], [1 - 3 / (1 + np.e)], [1 - 3 * np.e / (1 + np.e)]], rtol=1e-12)


def test_log_softmax_and_mean_over_an_inner_axis_match_torch_jagged_values():
    torch = pytest.importorskip("torch")
    nt = _nt([2, 0, 3], (3,))
    tnt, _ = _njt(torch, nt)
    np.testing.assert_allclose(N.log_softmax(nt, -1).values, torch.log_softmax(tnt, -1).values().numpy(), rtol=1e-12)
    np.testing.assert_allclose(N.mean(nt, -1).values, tnt.mean(-1).values().numpy(), rtol=1e-12)
    # over the ragged axis torch's jagged mean agrees, NaN for the empty component included
    np.testing.assert_allclose(N.mean(nt, 1), tnt.mean(1).numpy(), rtol=1e-12)
    np.testing.assert_allclose(N.softmax(nt, 1).values, torch.softmax(tnt, 1).values().numpy(), rtol=1e-12)


def test_mean_over_the_ragged_axis_empty_component_is_nan_and_others_get_g_over_n():
    nt = _nt(ZERO_LENGTHS, (2,))
    out = np.asarray(N.mean(nt, 1))
    assert out.shape == (5, 2)
    assert np.all(np.isnan(out[[1, 2, 4]]))
    np.testing.assert_allclose(out[0], nt.values[:3].mean(0), rtol=1e-12)
    np.testing.assert_allclose(out[3], nt.values[3:].mean(0), rtol=1e-12)
    ct = RNG.standard_normal((5, 2))
    valid = ~np.isnan(out)
    g = jax.grad(lambda v: jnp.sum(jnp.where(valid, N.mean(nt.with_values(v), 1) * ct, 0)))(nt.values)
    expected = np.concatenate([np.broadcast_to(ct[0] / 3, (3, 2)), np.broadcast_to(ct[3] / 2, (2, 2))])
    np.testing.assert_allclose(g, expected, rtol=1e-12)
    assert np.all(np.isfinite(g))
    # mixed ragged and inner axes: the mean of every entry of each component
    two = _nt([2, 3], (4,))
    np.testing.assert_allclose(N.mean(two, (1, 2)), [c.mean() for c in two.unbind()], rtol=1e-12)


def test_new_ops_run_under_jit_with_traced_offsets_without_recompiling():
    traces = []

    @jax.jit
    def f(values, offsets):
        traces.append(1)
        nt = N.from_jagged(values, offsets)
        return N.mean(N.log_softmax(nt, 1), 1), N.matmul(nt, nt, transpose_a=True)

    values = RNG.standard_normal((6, 2))
    for lengths in ([2, 0, 4], [0, 6, 0], [3, 3, 0]):
        offsets = np.r_[0, np.cumsum(lengths)]
        mean, gram = f(values, offsets)
        for i, c in enumerate(np.split(values, offsets[1:-1])):
            np.testing.assert_allclose(gram[i], c.T @ c, atol=1e-12)
            if len(c):
                np.testing.assert_allclose(mean[i], jax.nn.log_softmax(c, axis=0).mean(0), rtol=1e-12)
    assert len(traces) == 1


def test_ragged_contracting_matmul_matches_torch_jagged_value_and_gradients():
    torch = pytest.importorskip("torch")
    a, b = _nt([2, 0, 3], (3,)), _nt([2, 0, 3], (4,))
    ct = RNG.standard_normal((3, 3, 4))
    out, pull = jax.vjp(lambda x, y: N.matmul(a.with_values(x), b.with_values(y), transpose_a=True), a.values, b.values)
    ta, va = _njt(torch, a, True)
    vb = torch.tensor(np.asarray(b.values), requires_grad=True)
    tb = torch.nested.nested_tensor_from_jagged(vb, ta.offsets())  # the same offsets object: same raggedness
    want = ta.transpose(1, 2) @ tb
    np.testing.assert_allclose(out, want.detach().numpy(), rtol=1e-12)
    np.testing.assert_array_equal(out[1], np.zeros((3, 4)))  # the empty component
    ga, gb = torch.autograd.grad((want * torch.tensor(ct)).sum(), (va, vb))
    got_a, got_b = pull(ct)
    np.testing.assert_allclose(got_a, ga.numpy(), rtol=1e-12)
    np.testing.assert_allclose(got_b, gb.numpy(), rtol=1e-12)
    _, tangent = jax.jvp(lambda x: N.matmul(a.with_values(x), b, transpose_a=True), (a.values,), (a.values,))
    np.testing.assert_allclose(tangent, out, rtol=1e-12)  # linear in a


def test_dropout_is_the_dense_dropout_of_the_values():
    from jaxrules import nn as dense_nn

    nt = _nt(ZERO_LENGTHS, (4,))
    key = jax.random.key(3)
    out = N.dropout(nt, 0.25, key=key)
    np.testing.assert_array_equal(out.values, dense_nn.dropout(nt.values, 0.25, key=key))
    np.testing.assert_array_equal(out.offsets, nt.offsets)
    mask = np.asarray(jax.random.bernoulli(key, 0.75, nt.values.shape))
    np.testing.assert_allclose(out.values, nt.values * mask / 0.75, rtol=1e-12)
    g = jax.grad(lambda v: jnp.sum(N.dropout(nt.with_values(v), 0.25, key=key).values))(nt.values)
    np.testing.assert_allclose(g, mask / 0.75, rtol=1e-12)  # seed: g mask / (1 - p)
    assert N.dropout(nt, 0.5, training=False) is nt or np.array_equal(N.dropout(nt, 0.5, training=False).values,
                                                                     nt.values)
    np.testing.assert_array_equal(N.dropout(nt, 1.0, key=key).values, np.zeros_like(nt.values))
    traced = jax.jit(lambda v, p: N.dropout(nt.with_values(v), p, key=key).values)(nt.values, 0.25)
    np.testing.assert_allclose(traced, out.values, rtol=1e-12)


def test_ragged_reductions_accumulate_bfloat16_in_float32():
    # a scatter-add in bfloat16 stops counting at 256 (256 + 1 rounds to 256)
    nt = N.from_lengths(jnp.ones((1000, 1), jnp.bfloat16), [0, 1000])
    assert N.sum(nt, 1)[1, 0] == 1000 and N.mean(nt, 1)[1, 0] == 1
    assert N.mean(nt, 1).dtype == jnp.bfloat16
    np.testing.assert_allclose(np.float32(N.softmax(nt, 1).values[0, 0]), 1e-3, rtol=1e-2)
    np.testing.assert_allclose(np.float32(N.log_softmax(nt, 1).values[0, 0]), -np.log(1000), rtol=1e-2)
    g = jax.grad(lambda v: N.mean(nt.with_values(v), 1).astype(jnp.float32).sum())(nt.values)
    np.testing.assert_allclose(np.float32(g), 1e-3, rtol=1e-2)
