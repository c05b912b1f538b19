"""Zero-size inputs: the harness's ``empty`` check over every registered record, the check itself
(it fails a broken op; its derivation of zero-size samples), and the conventions of zero-size
inputs pinned against torch and jax.numpy.

A CI run checks a quarter of the records (``EMPTY_SHARE``, a rotating subset chosen by the commit,
``tests/_rotation.py``; 186 records took 61 CPU s of CI's 2,290) and every record of
``EMPTY_OPEN``; ``JAXRULES_EMPTY_ALL=1`` checks every record, as ``python -m jaxrules check`` does.

``EMPTY_OPEN``: records whose ``empty`` check still fails, with why. Their tests assert that the
check still fails (a fixed op must leave the list) and are reported as xfail with the reason, never
skipped."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from _rotation import rotating_share

import jaxrules.nn as rnn
from jaxrules import OpRecord, Sample, define_op, records
from jaxrules.ops.losses import cross_entropy, kl_div, multilabel_soft_margin_loss
from jaxrules.ops.shape import block_diag
from jaxrules.registry import derive_empty_samples
from jaxrules.testing import run_check

RECORDS = records()

EMPTY_OPEN: dict[str, str] = {}  # every record passes; a record that fails again goes here with its reason
EMPTY_SHARE = 4
_SHARED = {r.name for r in rotating_share(RECORDS, EMPTY_SHARE, "empty", "JAXRULES_EMPTY_ALL")}
CHECKED = [r for r in RECORDS if r.name in _SHARED or r.name in EMPTY_OPEN]


def test_every_open_entry_is_a_registered_record():
    assert set(EMPTY_OPEN) <= {r.name for r in RECORDS}
    assert all(reason.startswith("open: ") for reason in EMPTY_OPEN.values())


@pytest.mark.parametrize("record", CHECKED, ids=[r.name for r in CHECKED])
def test_empty(record):
    result = run_check(record, "empty")
    if record.name in EMPTY_OPEN:
        assert not result.passed, f"{record.name} passes the empty check now: remove it from EMPTY_OPEN"
        pytest.xfail(f"{EMPTY_OPEN[record.name]} -- the check: {result.detail}")
    assert result.passed, result.detail
    if record.no_empty:  # reported with its reason (or the record's platform's, when it cannot run here)
        assert result.skipped and (record.no_empty in result.detail or result.detail.startswith("not applicable"))


# ----------------------------------------------------------------------------------------------
# The check fails what it should (toy records).


def _square_jvp(x, t):
    return 2 * x * t


def _square_vjp(x, ct):
    return (2 * x * ct,)


_SQUARE = define_op("test_empty_square", lambda x: x * x, _square_jvp, _square_vjp)


def _toy(name, fn=_SQUARE, torch_fn=lambda torch, x: x * x, **kw):
    kw.setdefault("samples", lambda rng, dt: [Sample((rng.standard_normal((2, 3)).astype(dt),))])
    return OpRecord(name=name, fn=fn, public=(name,), formula_ops=(name,), seed=("none",), torch_fn=torch_fn,
                    torch_name="x * x", **kw)


def _max_scaled(x):  # an op whose primal reduces without an identity: an internal error on empty input
    return define_op("test_empty_max", lambda x: x * jnp.max(x), lambda x, t: t, lambda x, ct: (ct,))(x)


def _refusing(x):
    if np.size(x) == 0:
        raise ValueError("test_empty_refuses: x must not be empty")
    return _SQUARE(x)


def _wrong_shape(x):  # right on non-empty input; an empty one gives (0,) whatever its shape
    return _SQUARE(x) if np.size(x) else jnp.zeros((0,), x.dtype)


def test_a_correct_op_passes():
    result = run_check(_toy("test_empty_good"), "empty")
    assert result.passed and not result.skipped, result.detail
    assert result.detail.startswith("2 zero-size samples")  # (0, 3) and (2, 0)


@pytest.mark.parametrize("broken, message", [
    (_toy("test_empty_max", fn=_max_scaled), "not naming the op"),
    (_toy("test_empty_refuses", fn=_refusing), "torch accepts it, jaxrules raises ValueError"),
    (_toy("test_empty_shape", fn=_wrong_shape), "but torch's"),
    # every axis of length 1 (broadcasting, never cut): none derived, none declared
    (_toy("test_empty_none_derived", samples=lambda rng, dt: [Sample((np.ones((1, 1), dt),))]),
     "no zero-size samples"),
], ids=["internal error", "refuses what torch takes", "wrong shape", "nothing derived"])
def test_the_check_fails_a_broken_op(broken, message):
    result = run_check(broken, "empty")
    assert not result.passed and message in result.detail, result.detail


def test_wrong_nonempty_value_from_empty_input_is_caught():
    """A zero-size input with a non-empty output (a sum over an empty axis): the value and the
    gradients are compared with torch's."""
    total = define_op("test_empty_sum", lambda x: jnp.sum(x, axis=1) + 1.0, lambda x, t: jnp.sum(t, axis=1),
                      lambda x, ct: (jnp.broadcast_to(ct[:, None], x.shape),))
    good = _toy("test_empty_sum", fn=total, torch_fn=lambda torch, x: x.sum(1) + 1.0)
    assert run_check(good, "empty").passed
    bad = dataclasses.replace(good, name="test_empty_sum_bad", torch_fn=lambda torch, x: x.sum(1))
    result = run_check(bad, "empty")
    assert not result.passed and "value vs torch" in result.detail, result.detail


def test_declared_samples_and_no_empty():
    declared = _toy("test_empty_declared", empty_samples=lambda rng, dt: [Sample((np.zeros((0, 0), dt),))])
    assert run_check(declared, "empty").detail.startswith("1 zero-size samples")
    refused = _toy("test_empty_none", no_empty="torch and jax.numpy refuse every zero-size input")
    result = run_check(refused, "empty")
    assert result.passed and result.skipped and "torch and jax.numpy refuse" in result.detail


def test_derived_samples_cut_each_shared_length():
    """Every axis of one length cut together: (3, 4) @ (4, 2) gives an empty batch, an empty
    contraction and an empty output axis; an index array keeps no elements or the cut is dropped;
    a PRNG key (unsigned) is never cut; size 1 (broadcasting) is not cut."""
    a, b = np.ones((3, 4)), np.ones((4, 2))
    shapes = [[x.shape for x in s.args] for s in derive_empty_samples([Sample((a, b))])]
    assert shapes == [[(0, 4), (4, 2)], [(3, 0), (0, 2)], [(3, 4), (4, 0)]]
    indices = np.array([0, 2, 1, 1])
    derived = derive_empty_samples([Sample((np.ones((3, 2)), indices, np.ones((4, 2))))])
    assert [[x.shape for x in s.args] for s in derived] == [[(3, 2), (0,), (0, 2)]]
    key = np.array([0, 7], np.uint32)
    derived = derive_empty_samples([Sample((np.ones((2, 1, 5)), key), {"p": 0.5})])
    assert [(s.args[0].shape, s.args[1].shape, s.kwargs) for s in derived] == [
        ((0, 1, 5), (2,), {"p": 0.5}), ((2, 1, 0), (2,), {"p": 0.5})]


# ----------------------------------------------------------------------------------------------
# Conventions of zero-size inputs.


def test_block_diag_with_an_empty_1d_block_takes_jax_scipys_gradients_not_torchs():
    """An empty 1-d block is a 1 x 0 block (a row): torch 2.13's value says so, its backward does
    not (the later blocks' gradients come from one row too high). jaxrules: JAX's."""
    blocks = [np.zeros((2, 0)), np.ones((1, 1)), np.zeros((0,)), np.arange(4.0).reshape(2, 2)]
    ct = np.arange(18.0).reshape(6, 3)
    ours = jax.vjp(block_diag, *blocks)[1](ct)
    expected = jax.vjp(jax.scipy.linalg.block_diag, *blocks)[1](ct)
    for g, e in zip(ours, expected):
        np.testing.assert_array_equal(g, e)
    np.testing.assert_array_equal(ours[3], [[13.0, 14.0], [16.0, 17.0]])  # rows 4-5, columns 1-2 of ct
    tblocks = [torch.tensor(b, requires_grad=True) for b in blocks]
    theirs = torch.autograd.grad(torch.block_diag(*tblocks), tblocks, torch.tensor(ct))
    assert not np.array_equal(theirs[3].numpy(), ours[3])  # torch's bug (if it is fixed, drop this line)


@pytest.mark.parametrize("loss, args", [
    (lambda x: kl_div(x, np.zeros((0, 4)), reduction="batchmean"), (np.zeros((0, 4)),)),
    (lambda x: multilabel_soft_margin_loss(x, np.zeros(0)), (np.zeros(0),)),
    (lambda x: cross_entropy(x, np.zeros((0, 3), np.int64)), (np.zeros((0, 5, 3)),)),
], ids=["kl_div batchmean", "multilabel_soft_margin_loss", "cross_entropy"])
def test_a_mean_over_no_elements_is_nan_with_zero_derivatives(loss, args):
    """The value is torch's NaN (0 / 0); the JVP is 0, as for every zero-size input (the map from
    an empty space), not the NaN of differentiating 0 / 0."""
    value, tangent = jax.jvp(loss, args, tuple(np.ones_like(a) for a in args))
    assert np.isnan(value) and tangent == 0.0
    grads = jax.grad(loss)(*args)
    assert grads.shape == args[0].shape


def test_batch_norm_of_an_empty_batch_keeps_the_running_statistics_as_torch():
    x, mean, var = np.zeros((0, 3, 5)), np.array([0.5, 1.0, -1.0]), np.array([2.0, 1.0, 3.0])
    y, new_mean, new_var = rnn.batch_norm(x, mean, var, training=True)
    tm, tv = torch.tensor(mean), torch.tensor(var)
    ty = torch.nn.functional.batch_norm(torch.tensor(x), tm, tv, training=True)
    assert y.shape == tuple(ty.shape) == (0, 3, 5)
    np.testing.assert_array_equal(new_mean, tm.numpy())
    np.testing.assert_array_equal(new_var, tv.numpy())
    with pytest.raises(ValueError, match="batch_norm: expected more than 1 value"):
        rnn.batch_norm(np.zeros((1, 3)), mean, var, training=True)


@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_median_of_no_elements_is_nan_as_torch(name):
    """torch and numpy: NaN (numpy warns); the result has the reduction's shape, the gradient is 0."""
    import jax
    import numpy as np
    import torch

    import jaxrules.numpy as rnp

    fn = getattr(rnp, name)
    x = np.zeros((0, 5))
    assert np.isnan(fn(x)) and np.isnan(getattr(torch.zeros(0, 5, dtype=torch.float64), name)().item())
    np.testing.assert_array_equal(fn(x, axis=0), np.full(5, np.nan))
    assert fn(x, axis=1).shape == (0,) and fn(x, axis=0, keepdims=True).shape == (1, 5)
    assert jax.grad(fn)(x).shape == (0, 5)


def test_minimum_norm_of_an_empty_axis_is_refused_as_torch():
    import numpy as np

    from jaxrules import linalg

    with pytest.raises(ValueError, match="vector_norm: the -inf norm"):
        linalg.vector_norm(np.zeros((0, 4)), ord=-np.inf)
    assert linalg.vector_norm(np.zeros((0, 4)), ord=-np.inf, axis=1).shape == (0,)
