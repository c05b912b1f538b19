"""Normalization beyond the registry harness: double backward (spy + torch), functorch's
batching logic (every batched/unbatched combination, against a loop and torch.func.vmap),
running statistics, eval mode, cross-device statistics, bad input."""

import functools
import itertools
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _forced_devices import forced_devices_env

from jaxrules import batching, formula_spy
from jaxrules.nn import batch_norm, group_norm, instance_norm, layer_norm, rms_norm

RNG = np.random.default_rng(7)
X4 = RNG.standard_normal((4, 6, 3, 2))  # (N, C, H, W)
W6, B6 = RNG.standard_normal(6) + 1, RNG.standard_normal(6)
CT4 = RNG.standard_normal(X4.shape)
V4 = RNG.standard_normal(X4.shape)

OPS = {
    "layer_norm": (lambda x, w, b: layer_norm(x, (3, 2), w, b), lambda x, w, b: F.layer_norm(x, (3, 2), w, b),
                   (3, 2)),
    "group_norm": (lambda x, w, b: group_norm(x, 3, w, b), lambda x, w, b: F.group_norm(x, 3, w, b), (6,)),
    "batch_norm": (lambda x, w, b: batch_norm(x, None, None, w, b, training=True)[0],
                   lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (6,)),
    "instance_norm": (lambda x, w, b: instance_norm(x, None, None, w, b)[0],
                      lambda x, w, b: F.instance_norm(x, None, None, w, b), (6,)),
}


def _params(shape):
    return RNG.standard_normal(shape) + 1, RNG.standard_normal(shape)


def _close(a, b, tol=1e-10):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol, atol=tol)


# ----------------------------------------------------------------------------------------------
# Double backward


def _hvp_jax(f, args, v, mode):
    loss = lambda *a: jnp.sum(f(*a) * CT4)  # noqa: E731
    grad = jax.grad(loss, argnums=(0, 1, 2))
    if mode == "rev-over-rev":
        return jax.grad(lambda *a: sum(jnp.vdot(g, t) for g, t in zip(grad(*a), v)), argnums=(0, 1, 2))(*args)
    return jax.jvp(grad, args, v)[1]


def _hvp_torch(f, args, v):
    targs = [torch.tensor(a, requires_grad=True) for a in args]
    grads = torch.autograd.grad((f(*targs) * torch.tensor(CT4)).sum(), targs, create_graph=True)
    inner = sum((g * torch.tensor(t)).sum() for g, t in zip(grads, v))
    second = torch.autograd.grad(inner, targs, allow_unused=True)
    return [np.zeros(a.shape) if g is None else g.detach().numpy() for g, a in zip(second, args)]


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("mode", ["rev-over-rev", "fwd-over-rev"])
def test_hessian_vector_products_run_the_double_backward_formulas_and_match_torch(name, mode):
    ours, theirs, shape = OPS[name]
    w, b = _params(shape)
    args = (jnp.asarray(X4), jnp.asarray(w), jnp.asarray(b))
    v = (jnp.asarray(V4), jnp.asarray(RNG.standard_normal(shape)), jnp.asarray(RNG.standard_normal(shape)))
    with formula_spy() as calls:
        hvp = _hvp_jax(ours, args, v, mode)
    kind = "vjp" if mode == "rev-over-rev" else "jvp"
    assert (kind, "normalize_backward") in calls, calls
    _close(hvp, _hvp_torch(theirs, [np.asarray(a) for a in args], [np.asarray(t) for t in v]), 1e-9)


# ----------------------------------------------------------------------------------------------
# Batching (BatchRulesNorm.cpp)

B0 = 3


def _batched(a):
    return np.stack([a * (1 + 0.1 * k) + 0.05 * k for k in range(B0)])


def _loop(f, args, in_axes):
    outs = [f(*[a if d is None else a[k] for a, d in zip(args, in_axes)]) for k in range(B0)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("in_axes", [d for d in itertools.product([0, None], repeat=3) if any(a == 0 for a in d)])
def test_vmap_matches_loop_and_torch_func_vmap(name, in_axes, monkeypatch):
    ours, theirs, shape = OPS[name]
    w, b = _params(shape)
    args = [_batched(a) if d == 0 else a for a, d in zip((X4, w, b), in_axes)]
    folds = []
    fold = batching.fold_batch
    monkeypatch.setattr(batching, "fold_batch", lambda *a, **k: folds.append(1) or fold(*a, **k))
    value, grad = _unbatched_programs(name)
    got = jax.jit(jax.vmap(ours, in_axes=in_axes))(*args)
    _close(got, _loop(value, args, in_axes))
    expected = torch.func.vmap(theirs, in_dims=in_axes)(*map(torch.tensor, args))
    _close(got, expected.numpy())
    assert bool(folds) == (in_axes[0] == 0), "the fold rule runs exactly when the input is batched"
    # Gradients under vmap: per-example gradients of every argument.
    grads = jax.jit(jax.vmap(grad, in_axes=in_axes))(*args)
    _close(grads, _loop(grad, args, in_axes))


@functools.cache
def _unbatched_programs(name):
    """The op's value and the gradient of ``sum(value ** 2)`` (every argument), each jitted once
    for the loops over the batch."""
    ours = OPS[name][0]
    return jax.jit(ours), jax.jit(jax.grad(lambda *a: jnp.sum(ours(*a) ** 2), argnums=(0, 1, 2)))


_BN_AXES = [d for d in itertools.product([0, None], repeat=5) if any(a == 0 for a in d) and d[1] == d[2]]


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("in_axes", _BN_AXES, ids=str)
def test_batch_norm_every_batched_combination(training, in_axes):
    """Input, running stats (together), weight and bias each batched or not, in training and
    eval, against a loop and torch.func.vmap. functorch refuses a batched input with unbatched
    running stats in training (it would update them in place); functionally the new statistics
    are outputs, so the case is well defined: they come back batched, one per example."""
    rm, rv = RNG.standard_normal(6), RNG.uniform(0.5, 2, 6)
    plain = (X4, rm, rv, W6, B6)
    args = [jnp.asarray(_batched(a) if d == 0 else a) for a, d in zip(plain, in_axes)]
    f = lambda x, m, v, w, b: batch_norm(x, m, v, w, b, training=training, momentum=0.3)  # noqa: E731
    got = jax.vmap(f, in_axes=in_axes)(*args)
    _close(got, _loop(f, args, in_axes))
    tf = lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=training, momentum=0.3)  # noqa: E731
    targs = [torch.tensor(np.asarray(a)) for a in args]
    if training and in_axes[0] == 0 and in_axes[1] is None:
        with pytest.raises(RuntimeError, match="running_mean or running_var, which will be updated in place"):
            torch.func.vmap(tf, in_dims=in_axes)(*targs)
        assert got[1].shape == (B0, 6) and got[2].shape == (B0, 6)
        return
    expected = torch.func.vmap(tf, in_dims=in_axes)(*targs)
    _close(got[0], expected.numpy())
    if training:  # torch updated its running stats in place (once, when they are unbatched)
        for ours, theirs in zip(got[1:], (targs[1], targs[2])):
            _close(ours, np.broadcast_to(theirs.numpy(), ours.shape))


def test_running_stats_follow_torch():
    rm, rv = RNG.standard_normal(6), RNG.uniform(0.5, 2, 6)
    y, new_m, new_v = batch_norm(X4, rm, rv, W6, B6, training=True, momentum=0.2, eps=1e-3)
    tm, tv = torch.tensor(rm), torch.tensor(rv)
    ty = F.batch_norm(torch.tensor(X4), tm, tv, torch.tensor(W6), torch.tensor(B6), training=True, momentum=0.2,
                      eps=1e-3)
    _close((y, new_m, new_v), (ty.numpy(), tm.numpy(), tv.numpy()))
    # The running statistics carry no gradient (torch updates them under no_grad).
    g = jax.grad(lambda x: jnp.sum(batch_norm(x, rm, rv, training=True)[1]))(jnp.asarray(X4))
    assert not np.any(np.asarray(g))


def test_eval_mode_matches_torch():
    rm, rv = RNG.standard_normal(6), RNG.uniform(0.5, 2, 6)
    args = [X4, rm, rv, W6, B6]
    f = lambda *a: jnp.sum(batch_norm(*a, training=False)[0] * CT4)  # noqa: E731
    grads = jax.grad(f, argnums=(0, 3, 4))(*map(jnp.asarray, args))
    targs = [torch.tensor(a, requires_grad=i in (0, 3, 4)) for i, a in enumerate(args)]
    tloss = (F.batch_norm(*targs, training=False) * torch.tensor(CT4)).sum()
    tgrads = torch.autograd.grad(tloss, [targs[0], targs[3], targs[4]])
    _close(grads, [g.numpy() for g in tgrads])
    _close(f(*map(jnp.asarray, args)), tloss.detach().numpy())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_accumulates_statistics_in_float32(dtype):
    """A large common offset: statistics accumulated in half precision would be far off (the sum
    of 64 values near 1000 has a bf16 step of 512); torch accumulates in float32, as we do."""
    x = (1000.0 + 4 * RNG.standard_normal((8, 64))).astype(np.float32)
    tx = torch.tensor(x).to(getattr(torch, dtype))
    y = layer_norm(jnp.asarray(tx.float().numpy(), dtype), 64)
    assert y.dtype == jnp.dtype(dtype)
    expected = F.layer_norm(tx, (64,)).float().numpy()
    _close(np.asarray(y, np.float32), expected, 2e-2)


@pytest.fixture
def forms(request, monkeypatch):
    """``"direct"`` (the library's choice: small arrays take ``partials.direct_forms``) or
    ``"shifted"`` (``direct_forms`` replaced by False: every array the one-pass forms of many
    rows); JAX's trace caches are cleared around the change (a traced program does not see it)."""
    from jaxrules.partials import normalization

    if request.param == "direct":
        yield request.param
        return
    jax.clear_caches()
    monkeypatch.setattr(normalization, "direct_forms", lambda x, axes: False)
    yield request.param
    monkeypatch.undo()
    jax.clear_caches()


@pytest.mark.parametrize("forms", ["direct", "shifted"], indirect=True)
@pytest.mark.parametrize("name", sorted(OPS))
def test_float32_backward_does_not_cancel_under_a_large_offset(name, forms):
    """The backward's sum of ``g x_hat``, centered on the mean (``direct``) or over data shifted
    by each group's first element (``shifted``): with values near 4096 on a grid of 1/4 (x and its
    statistics exact in float32), the float32 dx stays within 1e-6 of float64, where summing
    ``g x`` unshifted (torch's kernels) is off by ~1e-5. The shift is the one slice of x in the
    backward's program."""
    x = 4096 + RNG.integers(-8, 9, (8, 8, 8, 8)) / 4  # 256 or 512 values per group: exact means
    ct = RNG.standard_normal(x.shape)
    ours = {"layer_norm": lambda v: layer_norm(v, (8, 8, 8), impl="xla"),
            "group_norm": lambda v: group_norm(v, 2, impl="xla"),
            "batch_norm": lambda v: batch_norm(v, None, None, training=True, impl="xla")[0],
            "instance_norm": lambda v: instance_norm(v)[0]}[name]
    program = str(jax.make_jaxpr(lambda v: jax.vjp(ours, v)[1](v)[0])(jnp.asarray(x, jnp.float32)))
    assert ("slice[" in program) == (forms == "shifted")
    dx = {dt: np.asarray(jax.vjp(ours, jnp.asarray(x, dt))[1](jnp.asarray(ct, dt))[0], np.float64)
          for dt in (jnp.float32, jnp.float64)}
    assert np.max(np.abs(dx[jnp.float32] - dx[jnp.float64])) <= 1e-6 * np.max(np.abs(dx[jnp.float64]))


def test_cross_device_statistics_match_the_global_batch():
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "cross_device_batch_norm.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=forced_devices_env(8),
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"devices": 8' in done.stdout


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: layer_norm(X4, (3, 3)), ["layer_norm", "normalized_shape"]),
        (lambda: layer_norm(X4, (2,), np.ones(3)), ["layer_norm", "weight"]),
        (lambda: group_norm(X4, 4), ["group_norm", "num_groups"]),
        (lambda: group_norm(X4, 3, None, np.ones(5)), ["group_norm", "bias"]),
        (lambda: batch_norm(X4, np.zeros(5), np.ones(6), training=True), ["batch_norm", "running_mean"]),
        (lambda: batch_norm(X4, None, None), ["batch_norm", "training=False"]),
        (lambda: batch_norm(np.ones((1, 3)), None, None, training=True), ["batch_norm", "more than 1 value"]),
        (lambda: batch_norm(X4, None, None, training=True, eps=-1), ["batch_norm", "eps"]),
        (lambda: batch_norm(X4, None, None, training=True, eps=0.0), ["batch_norm", "eps", "positive"]),
    ],
)
def test_bad_input(call, words):
    with pytest.raises(ValueError) as info:
        call()
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("uses", ["y", "mean", "rstd", "all"])
def test_affine_normalize_statistics_outputs_have_their_derivatives(uses):
    """The XLA path's op returns the statistics too (batch norm's running statistics read them);
    a loss through any subset of its outputs gets the gradient of the same math written in plain
    jnp (JAX's autodiff), including the VJP's branch for unused (symbolic zero) outputs."""
    from jaxrules.ops.normalization import affine_normalize_op

    x, w, b = jnp.asarray(X4), jnp.asarray(W6).reshape(1, 6, 1, 1), jnp.asarray(B6).reshape(1, 6, 1, 1)
    axes = (0, 2, 3)

    def reference(x, w, b):
        mean = x.mean(axes, keepdims=True)
        rstd = jax.lax.rsqrt(jnp.square(x - mean).mean(axes, keepdims=True) + 1e-5)
        return (x - mean) * rstd * w + b, mean, rstd

    def loss(fn):
        def f(x, w, b):
            y, mean, rstd = fn(x, w, b)
            parts = {"y": jnp.sum(y * CT4), "mean": jnp.sum(jnp.sin(mean)), "rstd": jnp.sum(rstd ** 2)}
            return parts[uses] if uses != "all" else sum(parts.values())
        return f

    ours = loss(lambda x, w, b: affine_normalize_op(x, w, b, axes=axes, eps=1e-5, axis_name=None))
    _close(jax.grad(ours, (0, 1, 2))(x, w, b), jax.grad(loss(reference), (0, 1, 2))(x, w, b))


@pytest.mark.parametrize("name", ["layer_norm", "group_norm"])
def test_any_real_eps_that_torch_accepts(name):
    """torch's own tests pass eps=-0.5 to layer and group norm; values and gradients follow torch
    (NaN where var < 0.5). Batch norm in training refuses eps <= 0, as torch does (test_bad_input)."""
    x = X4 * 2
    ours = {"layer_norm": lambda x: layer_norm(x, (3, 2), eps=-0.5),
            "group_norm": lambda x: group_norm(x, 3, eps=-0.5)}[name]
    theirs = {"layer_norm": lambda x: F.layer_norm(x, (3, 2), eps=-0.5),
              "group_norm": lambda x: F.group_norm(x, 3, eps=-0.5)}[name]
    y, pullback = jax.vjp(ours, jnp.asarray(x))
    tx = torch.tensor(x, requires_grad=True)
    ty = theirs(tx)
    (tg,) = torch.autograd.grad(ty, tx, torch.tensor(CT4))
    np.testing.assert_allclose(np.asarray(y), ty.detach().numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(np.asarray(pullback(jnp.asarray(CT4))[0]), tg.numpy(), rtol=1e-8, atol=1e-8)


# ----------------------------------------------------------------------------------------------
# instance_norm: running statistics, use_input_stats=False, zero-size input, bad input


def test_instance_norm_running_stats_follow_torch():
    """torch updates each (sample, channel) with its unbiased spatial variance, then averages the
    updated statistics over the samples."""
    rm, rv = RNG.standard_normal(6), RNG.uniform(0.5, 2, 6)
    y, new_m, new_v = instance_norm(X4, rm, rv, W6, B6, momentum=0.2, eps=1e-3)
    tm, tv = torch.tensor(rm), torch.tensor(rv)
    ty = F.instance_norm(torch.tensor(X4), tm, tv, torch.tensor(W6), torch.tensor(B6), momentum=0.2, eps=1e-3)
    _close((y, new_m, new_v), (ty.numpy(), tm.numpy(), tv.numpy()))
    # By hand: the unbiased variance over H*W = 6 values, averaged over N.
    flat = X4.reshape(4, 6, -1)
    _close(new_v, 0.8 * rv + 0.2 * flat.var(-1, ddof=1).mean(0))
    g = jax.grad(lambda x: sum(jnp.sum(s) for s in instance_norm(x, rm, rv)[1:]))(jnp.asarray(X4))
    assert not np.any(np.asarray(g)), "the running statistics carry no gradient (torch: in place, no_grad)"


def test_instance_norm_without_input_stats_matches_torch():
    rm, rv = RNG.standard_normal(6), RNG.uniform(0.5, 2, 6)
    args = [X4, rm, rv, W6, B6]
    f = lambda *a: instance_norm(*a, use_input_stats=False, eps=1e-3)  # noqa: E731
    y, new_m, new_v = f(*map(jnp.asarray, args))
    _close((new_m, new_v), (rm, rv))  # unchanged
    loss = lambda *a: jnp.sum(f(*a)[0] * CT4)  # noqa: E731
    grads = jax.grad(loss, argnums=(0, 3, 4))(*map(jnp.asarray, args))
    targs = [torch.tensor(a, requires_grad=i in (0, 3, 4)) for i, a in enumerate(args)]
    ty = F.instance_norm(targs[0], targs[1], targs[2], targs[3], targs[4], use_input_stats=False, eps=1e-3)
    tgrads = torch.autograd.grad((ty * torch.tensor(CT4)).sum(), [targs[0], targs[3], targs[4]])
    _close(y, ty.detach().numpy())
    _close(grads, [t.numpy() for t in tgrads])
    assert targs[1].detach().numpy().tolist() == rm.tolist()


def test_instance_norm_vmap_with_running_stats_matches_a_loop():
    """A batched input with unbatched running statistics: the new statistics come back batched
    (one update per example), as for batch_norm."""
    rm, rv = RNG.standard_normal(6), RNG.uniform(0.5, 2, 6)
    f = lambda x, m, v: instance_norm(x, m, v, W6, B6, momentum=0.3)  # noqa: E731
    for in_axes in [(0, None, None), (0, 0, 0), (None, 0, 0)]:
        args = [jnp.asarray(_batched(a) if d == 0 else a) for a, d in zip((X4, rm, rv), in_axes)]
        got = jax.vmap(f, in_axes=in_axes)(*args)
        _close(got, _loop(f, args, in_axes))
        assert got[1].shape == (B0, 6)


@pytest.mark.parametrize("shape", [(3, 2, 0), (3, 0, 5), (0, 2, 5)])
def test_instance_norm_zero_size_input(shape):
    """Empty output and gradient as torch; running statistics unchanged, as torch for (3, 2, 0)
    and (3, 0, 5). For N = 0 torch returns NaN statistics (the mean of no per-sample updates):
    we keep them (the record's deviation)."""
    channels = shape[1]
    rm, rv = RNG.standard_normal(channels), RNG.uniform(0.5, 2, channels)
    x = np.zeros(shape)
    y, new_m, new_v = instance_norm(x, rm, rv)
    tm, tv = torch.tensor(rm), torch.tensor(rv)
    tx = torch.tensor(x, requires_grad=True)
    ty = F.instance_norm(tx, tm, tv)
    assert y.shape == ty.shape == shape
    _close((new_m, new_v), (rm, rv))
    if shape[0] == 0:
        assert channels == 0 or np.all(np.isnan(tm.numpy())), "torch's NaN for N = 0 (a deviation)"
    else:
        _close((new_m, new_v), (tm.numpy(), tv.numpy()))
    g = jax.grad(lambda x: jnp.sum(instance_norm(x)[0]))(jnp.asarray(x))
    assert g.shape == torch.autograd.grad(ty.sum(), tx)[0].shape == shape


# ----------------------------------------------------------------------------------------------
# rms_norm

XR = RNG.standard_normal((4, 3, 5))
WR = RNG.standard_normal(5) + 1
CTR = RNG.standard_normal(XR.shape)


@pytest.mark.parametrize("mode", ["rev-over-rev", "fwd-over-rev"])
def test_rms_norm_hessian_vector_products_run_its_backward_op_and_match_torch(mode):
    args = (jnp.asarray(XR), jnp.asarray(WR))
    v = (jnp.asarray(RNG.standard_normal(XR.shape)), jnp.asarray(RNG.standard_normal(5)))
    loss = lambda x, w: jnp.sum(rms_norm(x, 5, w, eps=1e-3) * CTR)  # noqa: E731
    grad = jax.grad(loss, argnums=(0, 1))
    jax.clear_caches()
    with formula_spy() as calls:
        if mode == "rev-over-rev":
            hvp = jax.grad(lambda *a: sum(jnp.vdot(g, t) for g, t in zip(grad(*a), v)), argnums=(0, 1))(*args)
        else:
            hvp = jax.jvp(grad, args, v)[1]
    kind = "vjp" if mode == "rev-over-rev" else "jvp"
    assert (kind, "rms_norm_backward") in calls, calls
    targs = [torch.tensor(np.asarray(a), requires_grad=True) for a in args]
    tgrads = torch.autograd.grad((F.rms_norm(targs[0], (5,), targs[1], 1e-3) * torch.tensor(CTR)).sum(), targs,
                                 create_graph=True)
    second = torch.autograd.grad(sum((g * torch.tensor(np.asarray(t))).sum() for g, t in zip(tgrads, v)), targs)
    _close(hvp, [s.numpy() for s in second], 1e-9)


def test_rms_norm_full_hessian_matches_torch():
    x, w = RNG.standard_normal((2, 4)), RNG.standard_normal(4) + 1
    ct = RNG.standard_normal((2, 4))
    hess = jax.hessian(lambda x, w: jnp.sum(rms_norm(x, 4, w, eps=0.1) * ct), argnums=(0, 1))(x, w)
    thess = torch.autograd.functional.hessian(
        lambda x, w: (F.rms_norm(x, (4,), w, 0.1) * torch.tensor(ct)).sum(), (torch.tensor(x), torch.tensor(w)))
    _close(hess, [[b.numpy() for b in row] for row in thess], 1e-9)


@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0), (1, None)])
def test_rms_norm_vmap_matches_loop_and_torch_func_vmap(in_axes):
    f = lambda x, w: rms_norm(x, (3, 5), w)  # noqa: E731
    w = RNG.standard_normal((3, 5)) + 1
    batched = lambda a, d: np.moveaxis(_batched(a), 0, d)  # noqa: E731
    args = [jnp.asarray(batched(a, d) if d is not None else a) for a, d in zip((XR, w), in_axes)]
    got = jax.vmap(f, in_axes=in_axes)(*args)
    looped = [f(*[a if d is None else jnp.take(a, k, axis=d) for a, d in zip(args, in_axes)]) for k in range(B0)]
    _close(got, jnp.stack(looped))
    tf = lambda x, w: F.rms_norm(x, (3, 5), w)  # noqa: E731
    _close(got, torch.func.vmap(tf, in_dims=in_axes)(*[torch.tensor(np.asarray(a)) for a in args]).numpy())
    loss = lambda x, w: jnp.sum(f(x, w) ** 3)  # noqa: E731
    grads = jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=in_axes)(*args)
    expected = [jax.grad(loss, argnums=(0, 1))(*[a if d is None else jnp.take(a, k, axis=d)
                                                  for a, d in zip(args, in_axes)]) for k in range(B0)]
    _close(grads, jax.tree.map(lambda *g: jnp.stack(g), *expected))


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
def test_rms_norm_default_eps_is_that_of_the_computation_dtype_as_torch(dtype):
    """torch 2.13 takes the epsilon of its computation (opmath) type: float32's for bfloat16 and
    float16 input, not ``finfo(x.dtype).eps``. A row of 1e-4 tells them apart: bf16's eps
    (0.0078) swamps its mean square (1e-8) and gives ~0.0011, float32's gives ~0.28."""
    tx = torch.full((2, 4), 1e-4, dtype=getattr(torch, dtype))
    y = rms_norm(jnp.asarray(tx.double().numpy(), dtype), 4)
    assert y.dtype == jnp.dtype(dtype)
    expected = F.rms_norm(tx, (4,)).double().numpy()
    _close(np.asarray(y, np.float64), expected, 1e-2 * np.max(np.abs(expected)))
    eps = np.finfo(np.float64 if dtype == "float64" else np.float32).eps
    by_hand = 1e-4 / np.sqrt(1e-8 + eps)  # 1.0 for float64, 0.278 for float32 and the half types
    assert abs(float(y[0, 0]) - by_hand) <= 1e-2 * by_hand


def test_rms_norm_float16_squares_in_float32():
    """Values near 300: x^2 overflows float16 (max 65504); torch and we square in float32."""
    x = (300 + 10 * RNG.standard_normal((4, 8))).astype(np.float16)
    w = np.ones(8, np.float16)
    y, pullback = jax.vjp(lambda x: rms_norm(x, 8, w), jnp.asarray(x))
    (g,) = pullback(jnp.ones_like(y))
    tx = torch.tensor(x, requires_grad=True)
    ty = F.rms_norm(tx, (8,), torch.tensor(w))
    (tg,) = torch.autograd.grad(ty.sum(), tx)
    assert np.all(np.isfinite(np.asarray(y, np.float32))) and np.all(np.isfinite(np.asarray(g, np.float32)))
    _close(np.asarray(y, np.float32), ty.detach().float().numpy(), 2e-3)
    _close(np.asarray(g, np.float32), tg.float().numpy(), 2e-3)


def test_rms_norm_mixed_precision_weight_keeps_the_input_dtype_as_torch():
    x = torch.randn(2, 4, dtype=torch.bfloat16)
    w = torch.randn(4) + 1
    y = rms_norm(jnp.asarray(x.float().numpy(), jnp.bfloat16), 4, w.numpy())
    ty = F.rms_norm(x, (4,), w)
    assert y.dtype == jnp.bfloat16 and ty.dtype == torch.bfloat16
    _close(np.asarray(y, np.float32), ty.float().numpy(), 2e-2)


@pytest.mark.parametrize("shape, normalized", [((0, 5), (5,)), ((3, 0), (0,))])
def test_rms_norm_zero_size_input(shape, normalized):
    x, w = np.zeros(shape), RNG.standard_normal(normalized)
    y, pullback = jax.vjp(lambda x, w: rms_norm(x, normalized, w), jnp.asarray(x), jnp.asarray(w))
    gx, gw = pullback(jnp.ones_like(y))
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = F.rms_norm(tx, normalized, tw)
    tgx, tgw = torch.autograd.grad(ty.sum(), [tx, tw])
    assert y.shape == ty.shape == shape and gx.shape == tgx.shape == shape
    _close(gw, tgw.numpy())
    assert not np.any(np.asarray(gw))


@pytest.mark.parametrize("uses", ["y", "rstd", "all"])
def test_rms_norm_op_statistics_output_has_its_derivatives(uses):
    """The op returns rstd too (what reverse mode saves); a loss through any subset of its outputs
    gets the gradient of the same math in plain jnp (JAX's autodiff)."""
    from jaxrules.ops.normalization import rms_norm_op

    x, w = jnp.asarray(XR), jnp.asarray(WR)

    def reference(x, w):
        rstd = jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-3)
        return x * rstd * w, rstd

    def loss(fn):
        def f(x, w):
            y, rstd = fn(x, w)
            parts = {"y": jnp.sum(y * CTR), "rstd": jnp.sum(jnp.sin(rstd))}
            return parts[uses] if uses != "all" else sum(parts.values())
        return f

    ours = loss(lambda x, w: rms_norm_op(x, w, axes=(2,), eps=1e-3))
    _close(jax.grad(ours, (0, 1))(x, w), jax.grad(loss(reference), (0, 1))(x, w))
    t = (jnp.asarray(RNG.standard_normal(XR.shape)), jnp.asarray(RNG.standard_normal(5)))
    _close(jax.jvp(ours, (x, w), t), jax.jvp(loss(reference), (x, w), t))


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: instance_norm(X4, np.zeros(5), np.ones(6)), ValueError, ["instance_norm", "running_mean"]),
        (lambda: instance_norm(X4, np.zeros(6), None), ValueError, ["instance_norm", "running_var"]),
        (lambda: instance_norm(X4, use_input_stats=False), ValueError, ["instance_norm", "use_input_stats"]),
        (lambda: instance_norm(X4, None, None, np.ones(5)), ValueError, ["instance_norm", "weight"]),
        (lambda: instance_norm(X4, None, None, None, np.ones(4)), ValueError, ["instance_norm", "bias"]),
        (lambda: instance_norm(np.ones((3, 2, 1))), ValueError, ["instance_norm", "spatial"]),
        (lambda: instance_norm(np.ones((3, 2))), ValueError, ["instance_norm", "spatial"]),
        (lambda: instance_norm(np.ones(3)), ValueError, ["instance_norm", "x"]),
        (lambda: instance_norm(X4, eps="1e-5"), TypeError, ["instance_norm", "eps"]),
        (lambda: instance_norm(X4, momentum=None), TypeError, ["instance_norm", "momentum"]),
        (lambda: rms_norm(X4, (3, 3)), ValueError, ["rms_norm", "normalized_shape"]),
        (lambda: rms_norm(X4, ()), ValueError, ["rms_norm", "normalized_shape"]),
        (lambda: rms_norm(X4, (2,), np.ones(3)), ValueError, ["rms_norm", "weight"]),
        (lambda: rms_norm(X4, 2, eps=float("nan")), TypeError, ["rms_norm", "eps"]),
        (lambda: rms_norm(X4 + 1j, 2, impl="pallas_interpret"), TypeError, ["rms_norm", "impl"]),
        (lambda: rms_norm("x", 2), TypeError, ["rms_norm", "x"]),
    ],
)
def test_bad_input_instance_and_rms_norm(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value)


def test_instance_norm_and_rms_norm_accept_what_torch_accepts():
    """eps of any sign in training (torch's instance norm does not refuse eps <= 0, unlike batch
    norm's check), 2-d input without input statistics, and rms_norm's negative eps."""
    y = instance_norm(X4, eps=0.0)[0]
    _close(y, F.instance_norm(torch.tensor(X4), eps=0.0).numpy(), 1e-8)
    x2, rm, rv = RNG.standard_normal((3, 2)), RNG.standard_normal(2), RNG.uniform(0.5, 2, 2)
    y = instance_norm(x2, rm, rv, use_input_stats=False)[0]
    _close(y, F.instance_norm(torch.tensor(x2), torch.tensor(rm), torch.tensor(rv), use_input_stats=False).numpy())
    x = 2 * XR
    _close(rms_norm(x, 5, eps=-0.5), F.rms_norm(torch.tensor(x), (5,), eps=-0.5).numpy())


@pytest.mark.parametrize("name", ["layer_norm", "layer_norm_many_rows", "rms_norm", "group_norm"])
def test_weight_gradient_multiplies_x_hat_by_the_cotangent_in_that_order(name):
    """``dw = sum x_hat g`` with x_hat the product's first operand: XLA's GPU fusion of the
    product (which recomputes the statistics from x) ran 3-8% faster that way than as ``g x_hat``
    at 3072-4096 rows of 2304-7168 in half precision on an H200 (``benchmarks/README.md``).
    The cotangent (converted to float32, reshaped, passed through layer norm's weight sums'
    ``optimization_barrier``) is the second operand of every product that the weight gradient
    sums (``reduce_sum``, or layer norm's variadic ``reduce`` of ``(x_hat g, g)``)."""
    shape = {"group_norm": (4, 8, 3, 3), "layer_norm_many_rows": (8192, 16)}.get(name, (8, 16))
    name = name.removesuffix("_many_rows")
    x = jnp.ones(shape, jnp.float16)
    w = jnp.ones(shape[1] if name == "group_norm" else shape[-1], jnp.float16)
    ours = {"layer_norm": lambda w: layer_norm(x, 16, w, w),
            "rms_norm": lambda w: rms_norm(x, 16, w),
            "group_norm": lambda w: group_norm(x, 2, w, w)}[name]
    jaxpr = jax.make_jaxpr(lambda ct: jax.vjp(ours, w)[1](ct))(x).jaxpr
    cotangent = set(jaxpr.invars)  # ct and its views: reshaped, converted, through the barrier
    for e in jaxpr.eqns:
        if e.primitive.name in ("reshape", "convert_element_type") and e.invars[0] in cotangent:
            cotangent.add(e.outvars[0])
        if e.primitive.name == "optimization_barrier":
            cotangent.update(o for i, o in zip(e.invars, e.outvars) if i in cotangent)
    made_by = {out: eqn for eqn in jaxpr.eqns for out in eqn.outvars}
    sums = [e for e in jaxpr.eqns if e.primitive.name == "reduce_sum" or (  # or the variadic reduce, in a custom JVP
        e.primitive.name == "custom_jvp_call" and [q.primitive.name for q in e.params["call_jaxpr"].jaxpr.eqns
                                                   if q.primitive.name == "reduce"])]
    summed = [made_by.get(v) for e in sums for v in e.invars if not hasattr(v, "val")]
    products = [p for p in summed if p is not None and p.primitive.name == "mul"]
    with_ct = [p for p in products if cotangent & set(p.invars)]
    assert with_ct, jaxpr
    assert all(p.invars[1] in cotangent and p.invars[0] not in cotangent for p in with_ct), jaxpr


@pytest.mark.parametrize("rows", [8192, 16384, 8191, 4096])
def test_a_layer_norms_weight_gradients_from_8192_rows_are_one_reduction_behind_a_barrier(rows):
    """The weight and bias gradients of a layer norm, lowered for CUDA: from
    ``WEIGHT_SUMS_MIN_ROWS`` rows, one variadic reduce of two values over the rows (dimension 0)
    whose inputs pass an ``optimization_barrier`` (``partials.weight_sums``); below, two sums and
    no barrier."""
    x = jax.ShapeDtypeStruct((rows, 768), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((768,), jnp.bfloat16)
    grads = jax.jit(lambda x, w, b, ct: jax.vjp(lambda w, b: layer_norm(x, 768, w, b), w, b)[1](ct))
    text = grads.trace(x, w, w, x).lower(lowering_platforms=("cuda",)).as_text()
    over_rows = [line for line in text.splitlines() if "stablehlo.reduce(" in line and "dimensions = [0]" in line]
    if rows >= 8192:
        assert len(over_rows) == 1 and over_rows[0].count(" init: ") == 2, over_rows
        assert "stablehlo.optimization_barrier %arg0, %arg3" in text
    else:
        assert len(over_rows) == 2 and all(line.count(" init: ") == 1 for line in over_rows), over_rows
        assert "optimization_barrier" not in text
