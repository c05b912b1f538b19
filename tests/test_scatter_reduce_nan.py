"""scatter_reduce / index_reduce amax and amin at a NaN output (a NaN member): every member's
derivative is NaN (x's entry where it takes part, every src entry scattered there), as torch's
``scatter_reduce_backward`` and forward-mode derivative; the other outputs' derivatives unchanged."""

import jax
import numpy as np
import pytest

import jaxrules.numpy as rnp

torch = pytest.importorskip("torch")

X = np.array([[1.0, 5.0, np.nan, -2.0], [0.5, 3.0, 4.0, 1.5]])
INDEX = np.array([[0, 0, 1], [2, 3, 3]])
SRC = np.array([[np.nan, 2.0, 3.0], [7.0, 1.0, -1.0]])
CT = np.arange(1.0, 9.0).reshape(2, 4)


def _torch(x, src, reduce, include_self, tx, tsrc):
    import torch.autograd.forward_ad as fwad

    tx_, tsrc_ = (torch.tensor(v, requires_grad=True) for v in (x, src))
    out = tx_.scatter_reduce(1, torch.tensor(INDEX), tsrc_, reduce, include_self=include_self)
    gx, gsrc = torch.autograd.grad(out, (tx_, tsrc_), torch.tensor(CT))
    with fwad.dual_level():
        dual = fwad.make_dual(torch.tensor(x), torch.tensor(tx)).scatter_reduce(
            1, torch.tensor(INDEX), fwad.make_dual(torch.tensor(src), torch.tensor(tsrc)), reduce,
            include_self=include_self)
        jvp = fwad.unpack_dual(dual).tangent.numpy()
    return out.detach().numpy(), gx.numpy(), gsrc.numpy(), jvp


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_nan_member_gives_nan_derivatives_as_torch(reduce, include_self):
    rng = np.random.default_rng(0)
    tx, tsrc = rng.normal(size=X.shape), rng.normal(size=SRC.shape)
    f = lambda x, src: rnp.scatter_reduce(x, 1, INDEX, src, reduce, include_self)  # noqa: E731
    out, vjp = jax.vjp(f, X, SRC)
    gx, gsrc = vjp(CT)
    jvp = jax.jvp(f, (X, SRC), (tx, tsrc))[1]
    t_out, t_gx, t_gsrc, t_jvp = _torch(X, SRC, reduce, include_self, tx, tsrc)
    for ours, theirs in ((out, t_out), (gx, t_gx), (gsrc, t_gsrc), (jvp, t_jvp)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-14)  # NaN at the same places
    # The NaN outputs: row 0's slot 0 (src NaN) and slot 2 (x's NaN; x kept where nothing lands).
    assert np.isnan(out[0, 0]) and np.isnan(out[0, 2]) and np.isnan(gsrc[0, :2]).all()
    assert np.isnan(gx[0, 0]) == include_self and np.isnan(gx[0, 2]) and np.isfinite(gx[1]).all()


def test_index_reduce_nan_member():
    x, src = np.array([[1.0, np.nan], [2.0, 3.0], [0.0, 1.0]]), np.array([[4.0, -1.0], [np.nan, 0.5]])
    index = np.array([0, 2])
    ct = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    f = lambda x, s: rnp.index_reduce(x, 0, index, s, "amax")  # noqa: E731
    out, vjp = jax.vjp(f, x, src)
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
    t_out = tx.index_reduce(0, torch.tensor(index), ts, "amax")
    t_grads = torch.autograd.grad(t_out, (tx, ts), torch.tensor(ct))
    np.testing.assert_allclose(out, t_out.detach().numpy(), rtol=1e-14)
    for ours, theirs in zip(vjp(ct), t_grads):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-14)
    assert np.isnan(t_grads[0].numpy()[0, 1]) and np.isnan(t_grads[1].numpy()[1, 0])  # the case is a NaN one
