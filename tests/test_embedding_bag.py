"""embedding_bag beyond the registry harness: torch 2.13 parity in float64 (values and gradients
for every mode with 2-d input, 1-d input and offsets, padding_idx, include_last_offset,
per_sample_weights, empty bags), torch's max tie and NaN rules, scale_grad_by_freq (the
documented 1/count, where torch's CPU embedding_bag differs), jit with traced offsets, zero-size
input and bad input naming the op and the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxrules.ops.indexing import embedding_bag

F = torch.nn.functional
RNG = np.random.default_rng(23)
WEIGHT = RNG.standard_normal((6, 3))
INPUT = np.array([1, 2, 4, 4, 0, 5, 2])
OFFSETS = np.array([0, 2, 2, 5])  # bag 1 is empty


def _parity(indices, offsets=None, psw=None, weight=WEIGHT, **kwargs):
    ours = embedding_bag(indices, weight, offsets, per_sample_weights=psw, **kwargs)
    ct = RNG.standard_normal(ours.shape)
    floats = (weight,) if psw is None else (weight, psw)

    def loss(w, *p):
        return jnp.sum(ct * embedding_bag(indices, w, offsets, per_sample_weights=p[0] if p else None, **kwargs))

    grads = jax.grad(loss, argnums=tuple(range(len(floats))))(*floats)
    tf = [torch.tensor(a, requires_grad=True) for a in floats]
    theirs = F.embedding_bag(torch.tensor(indices), tf[0], None if offsets is None else torch.tensor(offsets),
                             per_sample_weights=tf[1] if psw is not None else None, **kwargs)
    (torch.tensor(ct) * theirs).sum().backward()
    np.testing.assert_allclose(ours, theirs.detach().numpy(), atol=1e-13)
    for g, t in zip(grads, tf):
        np.testing.assert_allclose(g, t.grad.numpy(), atol=1e-13)
    return ours, grads


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("layout", ["offsets", "padding", "last offset", "2-d", "2-d padding"])
def test_values_and_gradients_match_torch(mode, layout):
    if layout == "offsets":
        ours, _ = _parity(INPUT, OFFSETS, mode=mode)
        assert np.all(ours[1] == 0)  # the empty bag
    elif layout == "padding":
        _parity(INPUT, OFFSETS, mode=mode, padding_idx=4)
    elif layout == "last offset":
        _parity(INPUT, np.array([0, 2, 2, 5, 7]), mode=mode, include_last_offset=True, padding_idx=-1)
    elif layout == "2-d":
        _parity(INPUT[:6].reshape(2, 3), mode=mode)
    else:  # the second bag is all padding: 0
        ours, _ = _parity(np.array([[1, 2, 2], [2, 2, 2]]), mode=mode, padding_idx=2)
        assert np.all(ours[1] == 0)


def test_per_sample_weights_gradient_matches_torch():
    _parity(INPUT, OFFSETS, RNG.standard_normal(7), mode="sum", padding_idx=2)
    _parity(INPUT[:6].reshape(3, 2), None, RNG.standard_normal((3, 2)), mode="sum")


def test_max_ties_and_nan_follow_torch():
    # ties: the first maximum in bag order gets the gradient; a repeated index gets it once
    weight = np.array([[1.0, 5.0], [3.0, 5.0], [3.0, 0.0], [0.0, 0.0]])
    _, (grad,) = _parity(np.array([[0, 1, 2], [2, 1, 0], [0, 0, 3]]), weight=weight, mode="max")
    np.testing.assert_array_equal(grad[:, 1] != 0, [True, True, False, False])
    # NaN: a NaN first entry stays the maximum; later NaNs are skipped (torch's strict > scan)
    nan_weight = np.array([[np.nan, 1.0], [2.0, 3.0], [-1.0, np.nan]])
    indices = np.array([[1, 0, 2], [0, 1, 2], [2, 1, 0]])
    ours = embedding_bag(indices, nan_weight, mode="max")
    theirs = F.embedding_bag(torch.tensor(indices), torch.tensor(nan_weight), mode="max")
    np.testing.assert_array_equal(ours, theirs.numpy())


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_scale_grad_by_freq_divides_by_the_index_count(mode):
    indices = np.array([[1, 1, 2], [1, 3, 0]])
    ours = jax.grad(lambda w: jnp.sum(embedding_bag(indices, w, mode=mode, scale_grad_by_freq=True, padding_idx=0)))
    grad = ours(WEIGHT)
    # hand-derived: each entry's coefficient (1, or 1/|bag| for mean, padding not counted) over
    # its index's count (row 1: 3 times, rows 2 and 3 once)
    per_bag = [1 / 3, 1 / 2] if mode == "mean" else [1, 1]
    expected = np.zeros(6)
    expected[1] = (2 * per_bag[0] + per_bag[1]) / 3
    expected[2] = per_bag[0]
    expected[3] = per_bag[1]
    np.testing.assert_allclose(grad, np.tile(expected[:, None], (1, 3)), atol=1e-15)
    # as torch's embedding does for a single-entry bag layout (torch.nn.functional.embedding)
    single = jax.grad(lambda w: jnp.sum(embedding_bag(indices.reshape(-1, 1), w, mode="sum",
                                                      scale_grad_by_freq=True)))(WEIGHT)
    tw = torch.tensor(WEIGHT, requires_grad=True)
    F.embedding(torch.tensor(indices), tw, scale_grad_by_freq=True).sum().backward()
    np.testing.assert_allclose(single, tw.grad.numpy(), atol=1e-15)
    # torch 2.13's CPU embedding_bag differs (row 2 gets 1/3 from row 1's count): pinned
    tw = torch.tensor(WEIGHT, requires_grad=True)
    F.embedding_bag(torch.tensor(indices), tw, mode=mode, scale_grad_by_freq=True, padding_idx=0).sum().backward()
    assert not np.allclose(tw.grad.numpy()[2], expected[2])


def test_jit_with_traced_offsets_and_vmap_over_weights():
    f = jax.jit(lambda w, o: embedding_bag(INPUT, w, o, mode="max"))
    np.testing.assert_allclose(f(WEIGHT, OFFSETS), embedding_bag(INPUT, WEIGHT, OFFSETS, mode="max"))
    batched = jax.vmap(lambda w: embedding_bag(INPUT, w, OFFSETS))(np.stack([WEIGHT, 2 * WEIGHT]))
    np.testing.assert_allclose(batched[1], 2 * embedding_bag(INPUT, WEIGHT, OFFSETS), atol=1e-15)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_zero_size_input_matches_torch(mode):
    _parity(np.zeros(0, int), np.array([0, 0]), mode=mode)
    out = embedding_bag(np.zeros((0, 3), int), WEIGHT, mode=mode)
    assert out.shape == tuple(F.embedding_bag(torch.zeros((0, 3), dtype=torch.long), torch.tensor(WEIGHT)).shape)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_offsets_that_make_no_bag_give_no_row(mode):
    """include_last_offset with one offset makes no bag: a (0, D) output and a zero gradient
    (eagerly for an empty input; for a traced one the offsets' check runs only inside
    ``jaxrules.checked``). torch 2.13 crashes on such offsets (a segfault)."""
    out = embedding_bag(np.zeros(0, int), WEIGHT, np.array([0]), mode=mode, include_last_offset=True)
    assert out.shape == (0, 3)
    f = jax.jit(lambda w, o: embedding_bag(INPUT, w, o, mode=mode, include_last_offset=True))
    assert f(WEIGHT, np.array([0])).shape == (0, 3)
    grad = jax.grad(lambda w: jnp.sum(f(w, np.array([0]))))(WEIGHT)
    np.testing.assert_array_equal(grad, np.zeros_like(WEIGHT))
    assert jax.jvp(lambda w: f(w, np.array([0])), (WEIGHT,), (WEIGHT,))[1].shape == (0, 3)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"max_norm": 1.0}, ValueError, "max_norm"),
    ({"mode": "prod"}, ValueError, "mode"),
    ({"offsets": np.array([0])}, ValueError, "offsets"),  # with a 2-d input
    ({"input": INPUT}, ValueError, "offsets"),  # 1-d without offsets
    ({"input": INPUT, "offsets": np.array([1, 3])}, ValueError, "offsets"),
    ({"input": INPUT, "offsets": np.array([0, 3, 2])}, ValueError, "offsets"),
    ({"input": INPUT, "offsets": np.array([0, 3, 5]), "include_last_offset": True}, ValueError, "offsets"),
    # empty offsets: torch 2.13 crashes (a segfault, found by the fuzz test); no bags is a (0, N) input
    ({"input": INPUT, "offsets": np.array([], int)}, ValueError, "offsets must be 1-d and non-empty"),
    ({"input": np.array([[0, 6]])}, ValueError, "input"),
    ({"input": np.array([[0.0, 1.0]])}, TypeError, "input"),
    ({"input": np.zeros((1, 1, 1), int)}, ValueError, "input"),
    ({"padding_idx": 6}, ValueError, "padding_idx"),
    ({"mode": "max", "scale_grad_by_freq": True}, ValueError, "scale_grad_by_freq"),
    ({"mode": "mean", "per_sample_weights": np.ones((2, 2))}, ValueError, "per_sample_weights"),
    ({"mode": "max", "per_sample_weights": np.ones((2, 2))}, ValueError, "per_sample_weights"),
    ({"mode": "sum", "per_sample_weights": np.ones(4)}, ValueError, "per_sample_weights"),
    ({"weight": np.ones(6)}, ValueError, "weight"),
    ({"sparse": "yes"}, TypeError, "sparse"),
])
def test_bad_input_names_the_op_and_argument(kwargs, error, match):
    args = {"input": np.array([[0, 1], [2, 3]]), "weight": WEIGHT, **kwargs}
    with pytest.raises(error, match=f"embedding_bag.*{match}"):
        embedding_bag(**args)
