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
