"""NestedTensor beyond the registry records (which check every op per component against torch):
the pytree contract (grad returns a NestedTensor, jit does not recompile for new lengths, jvp
tangents), converters and their derivatives, transforms (checkpoint, vmap over dense weights),
attention against padded dense attention, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jaxrules.nested as N

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
    check_grads(f, (nt.values,), order=2, modes=("fwd", "rev"))


def test_vmap_over_a_batch_of_weights_with_a_nested_input():
    nt = _nt(inner=(3,))
    weights = RNG.standard_normal((5, 2, 3))

    def f(w, x):
        return N.sum(N.silu(N.linear(x, w)), 1)

    batched = jax.vmap(f, in_axes=(0, None))(weights, nt)
    np.testing.assert_allclose(batched, np.stack([f(w, nt) for w in weights]), rtol=1e-12)
    grads = jax.vmap(jax.grad(lambda w, x: jnp.sum(f(w, x) ** 2)), in_axes=(0, None))(weights, nt)
    np.testing.assert_allclose(grads[3], jax.grad(lambda w: jnp.sum(f(w, nt) ** 2))(weights[3]), rtol=1e-12)


@pytest.mark.parametrize("heads", [None, 2])
def test_attention_equals_masked_padded_attention(heads):
    lengths = [7, 1, 0, 12, 4]
    inner = (8,) if heads is None else (heads, 8)
    q, k, v = (_nt(lengths, inner) for _ in range(3))

    def padded_reference(qv, kv, vv):
        qp, kp, vp = (N.from_jagged(x, q.offsets).to_padded() for x in (qv, kv, vv))
        if heads is None:
            qp, kp, vp = qp[:, :, None], kp[:, :, None], vp[:, :, None]
        valid = np.arange(qp.shape[1])[None, :] < np.array(lengths)[:, None]
        s = jnp.einsum("bqhd,bkhd->bhqk", qp, kp) / np.sqrt(8)
        s = jnp.where(valid[:, None, None, :], s, -jnp.inf)
        p = jnp.where(valid[:, None, :, None], jax.nn.softmax(s, -1), 0)
        out = jnp.einsum("bhqk,bkhd->bqhd", p, vp)
        out = out if heads is not None else out[:, :, 0]
        return N.from_padded(out, lengths).values

    def ours(qv, kv, vv, block=None, steps=None):
        return N.scaled_dot_product_attention(
            q.with_values(qv), k.with_values(kv), v.with_values(vv), block=block, pairs_per_step=steps
        ).values

    args = (q.values, k.values, v.values)
    ct = RNG.standard_normal(q.values.shape[:-1] + (8,))
    want = jax.vjp(padded_reference, *args)
    # one block per sequence in one step; several blocks per sequence, the pairs in steps of 3
    for block, steps in ((None, None), (4, 3)):
        got = jax.vjp(lambda *a, block=block, steps=steps: ours(*a, block, steps), *args)
        tangents = tuple(RNG.standard_normal(a.shape) for a in args)
        np.testing.assert_allclose(
            jax.jvp(lambda *a: ours(*a, block, steps), args, tangents)[1],
            jax.jvp(padded_reference, args, tangents)[1], atol=1e-12,
        )
        np.testing.assert_allclose(got[0], want[0], atol=1e-12)
        for a, b in zip(got[1](ct), want[1](ct)):
            np.testing.assert_allclose(a, b, atol=1e-12)


def test_attention_log_sum_exp_and_its_gradient():
    q, k, v = (_nt([4, 2], (2, 3)) for _ in range(3))
    out, lse = N.scaled_dot_product_attention(q, k, v, with_lse=True)
    s = jnp.einsum("qhd,khd->hqk", q.select(0), k.select(0)) / np.sqrt(3)
    np.testing.assert_allclose(lse.select(0), jax.nn.logsumexp(s, -1).T, rtol=1e-12)

    def f(qv):
        return jnp.sum(jnp.sin(N.scaled_dot_product_attention(q.with_values(qv), k, v, with_lse=True)[1].values))

    check_grads(jax.jit(f), (q.values,), order=2, modes=("fwd", "rev"))  # compiled: eager dispatch is slow
    g = lambda qv: N.scaled_dot_product_attention(q.with_values(qv), k, v, block=2, pairs_per_step=2).values  # noqa: E731
    check_grads(jax.jit(g), (q.values,), order=2, modes=("fwd", "rev"))


def test_attention_rejects_a_sequence_longer_than_max_seqlen():
    q = _nt([3, 9], (4,))
    with pytest.raises(Exception, match="longer than max_seqlen=4"):
        jax.block_until_ready(N.scaled_dot_product_attention(q, q, q, max_seqlen=4).values)


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
    ],
)
def test_bad_input_raises_a_clear_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_type_errors_name_the_argument():
    with pytest.raises(TypeError, match="argument 'x' must be a NestedTensor"):
        N.gelu(np.ones((3, 2)))
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
