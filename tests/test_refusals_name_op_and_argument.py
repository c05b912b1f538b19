"""Refusals that name the op and the argument, where torch refuses too."""

import numpy as np
import pytest

import jaxrules.linalg as jrl
import jaxrules.numpy as rnp

torch = pytest.importorskip("torch")
X = np.arange(12.0).reshape(3, 4) / 7 - 0.5


@pytest.mark.parametrize("maxnorm", [np.nan, np.float64(np.nan)])
def test_renorm_refuses_nan_maxnorm(maxnorm):
    with pytest.raises(RuntimeError, match="maxnorm"):
        torch.renorm(torch.tensor(X), 2, 0, float(maxnorm))
    with pytest.raises(ValueError, match="renorm: maxnorm must be a non-negative number, got .*nan"):
        jrl.renorm(X, 2, 0, maxnorm)


@pytest.mark.parametrize("p", [-1.0, -0.5, -np.inf])
def test_cdist_refuses_negative_p(p):
    with pytest.raises(RuntimeError, match="non-negative p"):
        torch.cdist(torch.tensor(X), torch.tensor(X), p=p)
    with pytest.raises(ValueError, match=r"cdist: p must be non-negative .* got -"):
        jrl.cdist(X, X, p=p)


@pytest.mark.parametrize("p", [0, 0.5, 2, np.inf])
def test_cdist_takes_non_negative_p(p):
    np.testing.assert_allclose(jrl.cdist(X, X[:2], p=p), torch.cdist(torch.tensor(X), torch.tensor(X[:2]), p=p),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call", [lambda z: rnp.median(z), lambda z: rnp.median(z, axis=0),
                                  lambda z: rnp.median(z, 0, return_indices=True)],
                         ids=["all", "axis", "return_indices"])
def test_complex_median_error_names_median(call):
    with pytest.raises(RuntimeError):  # torch: "median() not implemented for 'ComplexDouble'"
        torch.median(torch.tensor(X + 1j))
    with pytest.raises(TypeError, match=r"^median: argument 'a' must be real \(complex numbers have no order\)"):
        call(X + 1j)
