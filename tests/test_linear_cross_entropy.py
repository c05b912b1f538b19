"""``jaxrules.nn.linear_cross_entropy``, the fused language-model head, beyond its record: torch
parity of the value and the gradients (float64, and bfloat16 inputs with float32 accumulation),
the z-loss against a plain-jnp reference, ignored and out-of-range targets, bad arguments, and
the compiled training step's temporary memory against plain JAX's unfused head."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _compiled import value_vjp_jvp
from _repo_files import subprocess_env

import jaxrules
import jaxrules.nn as nn
from jaxrules.ops.losses import _linear_cross_entropy

torch = pytest.importorskip("torch")
F = torch.nn.functional

V, D = 37, 6


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _data(seed=0, lead=(3, 5), dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(*lead, D)).astype(dtype)
    w = (rng.normal(size=(V, D)) / 2).astype(dtype)
    b = rng.normal(size=V).astype(dtype)
    t = rng.integers(0, V, lead)
    t.flat[1] = -100
    return x, w, b, t, rng.uniform(0.5, 2.0, V)


def _torch_loss_and_grads(x, w, b, t, **kw):
    """torch's cross_entropy of linear, flattened over the leading axes; value and the gradients
    of ``sum(loss)`` for x, w, b (float64)."""
    tx, tw, tb = (torch.tensor(np.asarray(a, np.float64), requires_grad=True) for a in (x, w, b))
    cw = kw.pop("class_weight", None)
    logits = F.linear(tx, tw, tb).reshape(-1, w.shape[0])
    loss = F.cross_entropy(logits, torch.tensor(t).reshape(-1), weight=None if cw is None else torch.tensor(cw), **kw)
    loss.sum().backward()
    return loss.detach().numpy(), [a.grad.numpy() for a in (tx, tw, tb)]


CASES = [
    {},
    {"reduction": "sum"},
    {"reduction": "none"},
    {"label_smoothing": 0.15},
    {"class_weight": True, "reduction": "mean"},
    {"class_weight": True, "label_smoothing": 0.3, "reduction": "sum", "ignore_index": 4},
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
@pytest.mark.parametrize("chunk_size", [None, 5, 16])
def test_float64_matches_torch(case, chunk_size):
    """Value and gradients of input, weight and bias equal torch's to float64 rounding, for one
    chunk, chunks that do not divide the vocabulary (a tail) and a scan of several."""
    x, w, b, t, cw = _data()
    case = dict(case)
    if case.pop("class_weight", False):
        case["class_weight"] = cw
    if case.get("ignore_index") == 4:
        t.flat[1:3] = 4  # -100 would be out of range
    expected, grads = _torch_loss_and_grads(x, w, b, t, **case)

    def f(x, w, b):
        return nn.linear_cross_entropy(x, w, t, b, chunk_size=chunk_size, **case)

    value = f(x, w, b)
    assert value.shape == (() if case.get("reduction", "mean") != "none" else t.shape)
    np.testing.assert_allclose(np.ravel(value), np.ravel(expected), rtol=1e-12, atol=1e-12)
    ours = jax.grad(lambda *a: jnp.sum(f(*a)), argnums=(0, 1, 2))(x, w, b)
    for g, e in zip(ours, grads):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_bfloat16_inputs_accumulate_in_float32():
    """bfloat16 input and weight: the loss is bfloat16 and within bfloat16 rounding of torch's
    float64 result on the same (bfloat16-rounded) values; the gradients within a few bfloat16
    ulps of the largest entry (their matmuls run in bfloat16, accumulating in float32)."""
    x, w, b, t, _ = _data(1, lead=(64,))
    x16, w16 = jnp.asarray(x, jnp.bfloat16), jnp.asarray(w, jnp.bfloat16)
    expected, (gx, gw, _) = _torch_loss_and_grads(np.asarray(x16, np.float64), np.asarray(w16, np.float64), 0 * b, t)
    fn = jax.jit(jax.value_and_grad(lambda x, w: nn.linear_cross_entropy(x, w, t, chunk_size=8), argnums=(0, 1)))
    value, (dx, dw) = fn(x16, w16)
    assert value.dtype == dx.dtype == dw.dtype == jnp.bfloat16
    np.testing.assert_allclose(float(value), expected, rtol=2 ** -7)
    for ours, ref in ((dx, gx), (dw, gw)):
        err = np.max(np.abs(np.asarray(ours, np.float64) - ref)) / np.max(np.abs(ref))
        assert err < 2 ** -6, err
    hlo = fn.lower(x16, w16).as_text()
    assert any("dot_general" in line and "bf16" in line and "-> tensor<" in line and "xf32>" in line.split("->")[-1]
               for line in hlo.splitlines())  # dots of bfloat16 operands with float32 results


def _reference_z_loss(x, w, b, t, z, reduction, class_weight=None, label_smoothing=0.0, ignore_index=-100):
    """Plain jnp, written from the formula: per kept token torch's cross-entropy terms plus
    ``z lse^2``; mean over torch's weighted denominator."""
    logits = x.reshape(-1, x.shape[-1]) @ w.T + b
    t = t.reshape(-1)
    lse = jax.nn.logsumexp(logits, axis=-1)
    logp = logits - lse[:, None]
    cw = jnp.ones(w.shape[0]) if class_weight is None else jnp.asarray(class_weight)
    kept = t != ignore_index
    safe = jnp.where(kept, t, 0)
    nll = -cw[safe] * jnp.take_along_axis(logp, safe[:, None], axis=1)[:, 0]
    smooth = -jnp.sum(cw * logp, axis=1)
    per = (1 - label_smoothing) * nll + label_smoothing / w.shape[0] * smooth + z * lse ** 2
    per = jnp.where(kept, per, 0)
    if reduction == "none":
        return per
    if reduction == "sum":
        return jnp.sum(per)
    return jnp.sum(per) / jnp.sum(jnp.where(kept, cw[safe], 0))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_z_loss_matches_a_plain_jnp_reference(reduction):
    x, w, b, t, cw = _data(2)
    kw = {"class_weight": cw, "label_smoothing": 0.1} if reduction == "mean" else {}

    def ours(x, w, b):
        return nn.linear_cross_entropy(x, w, t, b, z_loss=1e-2, reduction=reduction, chunk_size=8, **kw)

    def ref(x, w, b):
        return _reference_z_loss(x, w, b, t, 1e-2, reduction, **kw)

    t_in = [np.ones_like(a) for a in (x, w, b)]

    def derivatives(f):  # the VJP of ones: the gradient of the sum (the two shape "none" apart)
        return value_vjp_jvp(f, (x, w, b), np.ones(jax.eval_shape(f, x, w, b).shape), t_in)

    (value, grads, jvp), (want, want_grads, want_jvp) = derivatives(ours), derivatives(ref)
    np.testing.assert_allclose(np.ravel(ours(x, w, b)), np.ravel(want), rtol=1e-12)  # eager
    np.testing.assert_allclose(np.ravel(value), np.ravel(want), rtol=1e-12)
    # the z-term matters: without it the value differs
    assert not np.allclose(np.ravel(value), np.ravel(_reference_z_loss(x, w, b, t, 0.0, reduction, **kw)))
    for g, e in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.ravel(jvp), np.ravel(want_jvp), rtol=1e-10)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_every_target_ignored_gives_zero_gradients(reduction):
    """torch's value (mean: 0 / 0 = NaN; sum: 0) and zero gradients, not NaN (torch's too)."""
    x, w, b, t, cw = _data(3)
    t[:] = -100
    expected, grads = _torch_loss_and_grads(x, w, b, t, reduction=reduction)
    fn = jax.jit(jax.value_and_grad(lambda x, w, b: nn.linear_cross_entropy(x, w, t, b, reduction=reduction,
                                                                             class_weight=cw, chunk_size=8), (0, 1, 2)))
    value, ours = fn(x, w, b)
    np.testing.assert_array_equal(value, expected)  # NaN == NaN for assert_array_equal
    for g, e in zip(ours, grads):
        assert np.all(e == 0)
        np.testing.assert_array_equal(g, 0.0)


def test_an_out_of_range_target_is_an_error_eagerly_and_under_checked():
    x, w, b, t, _ = _data(4)
    for bad in (V, -1):
        t_bad = t.copy()
        t_bad.flat[3] = bad
        with pytest.raises(ValueError, match=rf"linear_cross_entropy: target must lie in \[0, {V}\) .*got \[{bad}\]"):
            nn.linear_cross_entropy(x, w, t_bad)
        jitted = jax.jit(lambda x, w, t: nn.linear_cross_entropy(x, w, t, chunk_size=8))
        traced = rf"linear_cross_entropy: target must lie in \[0, {V}\), got an index out of range"
        with pytest.raises(ValueError, match=traced):
            jaxrules.checked(jitted)(x, w, t_bad)
        assert np.isnan(jitted(x, w, t_bad))  # plain jit: no check runs, the loss is NaN
        assert np.isfinite(jaxrules.checked(jitted)(x, w, t))  # in range: no error


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_without_the_check_an_out_of_range_target_gives_nan(reduction):
    """The op itself (what runs when no check does): NaN for that token's loss, the reduced loss
    and the gradients, never a finite wrong value; the other tokens' losses are unchanged."""
    x, w, b, t, _ = _data(5, lead=(12,))
    t_bad = t.copy()
    t_bad[3] = V + 2
    static = {"reduction": reduction, "ignore_index": -100, "label_smoothing": 0.0, "z_loss": 0.0, "chunk": 8,
              "has_bias": False, "has_class_weight": False}

    @jax.jit
    def run(x, w, t):
        return jax.value_and_grad(lambda x, w: jnp.sum(_linear_cross_entropy(x, w, t, **static)[0]), (0, 1))(x, w)

    (value, (dx, dw)), (good, _) = run(x, w, t_bad), run(x, w, t)
    assert np.isnan(value) and np.isfinite(good)
    assert np.all(np.isnan(dx[3])) and np.all(np.isnan(dw))
    if reduction == "none":
        losses = jax.jit(lambda x, w, t: _linear_cross_entropy(x, w, t, **static)[0])
        bad_losses, good_losses = losses(x, w, t_bad), losses(x, w, t)
        assert np.isnan(bad_losses[3]) and np.sum(np.isnan(bad_losses)) == 1
        np.testing.assert_array_equal(np.delete(bad_losses, 3), np.delete(good_losses, 3))


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"weight": np.ones((V, D + 1))}, ValueError, "weight must have shape"),
    ({"target": np.zeros((3, 4), np.int64)}, ValueError, "target must have shape"),
    ({"target": np.zeros((3, 5))}, TypeError, "target must be integer"),
    ({"input": np.ones((3, 5, D), np.complex64)}, TypeError, "input must be real floating"),
    ({"bias": np.ones(V + 1)}, ValueError, "bias must have shape"),
    ({"class_weight": np.ones(V - 1)}, ValueError, "class_weight must have shape"),
    ({"reduction": "avg"}, ValueError, "reduction must be one of"),
    ({"label_smoothing": 1.5}, ValueError, "label_smoothing must be in"),
    ({"label_smoothing": "0.1"}, TypeError, "label_smoothing must be a static number"),
    ({"z_loss": -1.0}, ValueError, "z_loss must be"),
    ({"chunk_size": 0}, ValueError, "chunk_size must be"),
    ({"ignore_index": 1.0}, TypeError, "ignore_index must be an int"),
    ({"weight": np.ones((0, D))}, ValueError, "weight has an empty vocabulary"),
])
def test_bad_arguments_name_the_op_and_the_argument(kwargs, error, match):
    x, w, b, t, _ = _data(6)
    args = {"input": x, "weight": w, "target": t, **kwargs}
    with pytest.raises(error, match=f"linear_cross_entropy: {match}"):
        nn.linear_cross_entropy(**args)


@pytest.mark.parametrize(("vocab", "width", "chunk_size", "fraction"),
                         [(32768, 64, 1024, 0.2), (262144, 16, None, 0.25)])
def test_the_training_step_holds_no_tokens_by_vocabulary_temporary(vocab, width, chunk_size, fraction):
    """The compiled gradient of a 2048-token head (float32): jaxrules' temporaries are a small
    fraction of the logits' (256 MiB for 32768 classes, in chunks of 1024 classes: 8 MiB of
    logits each, 0.157x of the logits on an H200; 2 GiB for 262144 classes, in the default chunks
    of 16384 classes), plain JAX's unfused head's are more than the logits."""
    tokens = 2048
    specs = (jax.ShapeDtypeStruct((tokens, width), jnp.float32), jax.ShapeDtypeStruct((vocab, width), jnp.float32),
             jax.ShapeDtypeStruct((tokens,), jnp.int32))
    logits_bytes = tokens * vocab * 4

    def temp(head):
        return jax.jit(jax.grad(head, argnums=(0, 1))).lower(*specs).compile().memory_analysis().temp_size_in_bytes

    def unfused(x, w, t):
        logits = x @ w.T
        lse = jax.nn.logsumexp(logits, axis=-1)
        return jnp.mean(lse - jnp.take_along_axis(logits, t[:, None], axis=-1)[:, 0])

    plain = temp(unfused)
    chunked = temp(lambda x, w, t: nn.linear_cross_entropy(x, w, t, chunk_size=chunk_size))
    assert plain > logits_bytes, plain
    assert chunked < fraction * logits_bytes, chunked


def test_the_benchmark_runs_quick():
    """``benchmarks/lm_head.py --quick``: the three heads compile, run and agree on the loss."""
    root = pathlib.Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "lm_head.py"), "--quick", "--repeats", "1",
                          "--warmup", "1", "--workers", "2"], cwd=root, capture_output=True, text=True, timeout=300,
                         env=subprocess_env(JAX_PLATFORMS="cpu"))
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 512 | 64 | 16 |")]
    assert rows, out.stdout
    diff = float(rows[-1].split("|")[9])
    assert diff < 1e-2
