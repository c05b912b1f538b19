"""cumsum, cumprod and logcumsumexp of a 0-d array along axis 0 or -1: a 0-d result, values and
first and second derivatives as torch 2.13's (which accepts dim 0 and -1 on a 0-d tensor)."""

import jax
import numpy as np
import pytest

import jaxrules.numpy as rnp

torch = pytest.importorskip("torch")

OPS = {"cumsum": (rnp.cumsum, torch.cumsum), "cumprod": (rnp.cumprod, torch.cumprod),
       "logcumsumexp": (rnp.logcumsumexp, torch.logcumsumexp)}


@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("name", sorted(OPS))
def test_scalar_scan_matches_torch(name, axis):
    ours, theirs = OPS[name]
    x = np.float64(-0.7)
    f = lambda v: ours(v, axis)  # noqa: E731
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ty = theirs(tx, axis)
    (tg,) = torch.autograd.grad(ty, tx, create_graph=True)
    tgg = torch.autograd.grad(tg, tx)[0] if tg.requires_grad else torch.zeros(())  # cumsum: tg constant
    y = f(x)
    assert y.shape == () and tuple(ty.shape) == ()
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(jax.grad(f)(x), tg.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(jax.jvp(f, (x,), (np.float64(1.0),))[1], tg.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(jax.hessian(f)(x), tgg.numpy(), atol=1e-14)
    np.testing.assert_allclose(jax.jit(jax.vmap(f))(np.array([x, 2.0])), [theirs(torch.tensor(v), axis).item()
                                                                           for v in (x, 2.0)], rtol=1e-14)


@pytest.mark.parametrize("name", sorted(OPS))
def test_scalar_scan_refuses_other_axes(name):
    ours, theirs = OPS[name]
    with pytest.raises(IndexError):  # torch: "Dimension out of range"
        theirs(torch.tensor(1.0), 1)
    with pytest.raises(ValueError, match=f"{name}: axis=1 is out of range"):
        ours(np.float64(1.0), 1)
    with pytest.raises(TypeError, match=f"{name}: axis must be a single int"):
        ours(np.float64(1.0), (0,))
