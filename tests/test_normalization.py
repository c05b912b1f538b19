"""Normalization beyond the registry harness: double backward (spy + torch), functorch's
batching logic (every batched/unbatched combination, against a loop and torch.func.vmap),
running statistics, eval mode, cross-device statistics, bad input."""

import itertools
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from jaxrules import batching, formula_spy
from jaxrules.nn import batch_norm, group_norm, layer_norm

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
    got = jax.vmap(ours, in_axes=in_axes)(*map(jnp.asarray, args))
    _close(got, _loop(ours, list(map(jnp.asarray, args)), in_axes))
    expected = torch.func.vmap(theirs, in_dims=in_axes)(*map(torch.tensor, args))
    _close(got, expected.numpy())
    assert bool(folds) == (in_axes[0] == 0), "the fold rule runs exactly when the input is batched"
    # Gradients under vmap: per-example gradients of every argument.
    loss = lambda *a: jnp.sum(ours(*a) ** 2)  # noqa: E731
    grads = jax.vmap(jax.grad(loss, argnums=(0, 1, 2)), in_axes=in_axes)(*map(jnp.asarray, args))
    _close(grads, _loop(jax.grad(loss, argnums=(0, 1, 2)), list(map(jnp.asarray, args)), in_axes))


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


@pytest.mark.parametrize("name", sorted(OPS))
def test_float32_backward_does_not_cancel_under_a_large_offset(name):
    """The backward's sum of ``g x_hat`` runs over shifted data (``partials.norm_projection``):
    with values near 4096 on a grid of 1/4 (x and its statistics exact in float32), the float32
    dx stays within 1e-6 of float64, where summing ``g x`` unshifted (torch's kernels) is off by
    ~1e-5."""
    x = 4096 + RNG.integers(-8, 9, (8, 8, 8, 8)) / 4  # 256 or 512 values per group: exact means
    ct = RNG.standard_normal(x.shape)
    ours = {"layer_norm": lambda v: layer_norm(v, (8, 8, 8), impl="xla"),
            "group_norm": lambda v: group_norm(v, 2, impl="xla"),
            "batch_norm": lambda v: batch_norm(v, None, None, training=True, impl="xla")[0]}[name]
    dx = {dt: np.asarray(jax.vjp(ours, jnp.asarray(x, dt))[1](jnp.asarray(ct, dt))[0], np.float64)
          for dt in (jnp.float32, jnp.float64)}
    assert np.max(np.abs(dx[jnp.float32] - dx[jnp.float64])) <= 1e-6 * np.max(np.abs(dx[jnp.float64]))


def test_cross_device_statistics_match_the_global_batch():
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "cross_device_batch_norm.py"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               PYTHONPATH=str(script.parents[1]))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
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
