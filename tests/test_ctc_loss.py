"""``jaxrules.torch.nn.functional.ctc_loss`` against torch 2.13 (float64, CPU): values for every
target form and reduction, the logits' gradients through ``log_softmax``, the derivative with
respect to the log-probabilities (finite differences; torch's differs by ``exp(log_probs)``),
JVP against VJP, transforms, sequences without an alignment, and refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jaxrules.torch.nn.functional as JF

RNG = np.random.default_rng(11)
T, N, C = 8, 4, 5
# repeats (a blank between them), an empty target, one sequence shorter than T, blank = 0
TARGETS = np.array([[1, 2, 2], [3, 1, 0], [4, 4, 4], [0, 0, 0]])
INPUT_LENGTHS = np.array([8, 5, 7, 3])
TARGET_LENGTHS = np.array([3, 2, 3, 0])


def _logits(shape=(T, N, C)):
    return RNG.standard_normal(shape)


def _ours(lp, targets=TARGETS, il=INPUT_LENGTHS, tl=TARGET_LENGTHS, **kw):
    return JF.ctc_loss(jnp.asarray(lp), jnp.asarray(targets), jnp.asarray(il), jnp.asarray(tl), **kw)


def _theirs(lp, targets=TARGETS, il=INPUT_LENGTHS, tl=TARGET_LENGTHS, **kw):
    return TF.ctc_loss(lp, torch.tensor(targets), torch.tensor(il), torch.tensor(tl), **kw)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("blank", [0, 3])
def test_values_and_logits_gradients_match_torch(reduction, blank):
    z = _logits()
    targets = np.where(TARGETS == blank, (blank + 1) % C, TARGETS)  # no blank among the labels
    tz = torch.tensor(z, requires_grad=True)
    theirs = _theirs(torch.log_softmax(tz, -1), targets, blank=blank, reduction=reduction)
    ct = RNG.standard_normal(theirs.shape)
    (g_theirs,) = torch.autograd.grad(theirs, tz, torch.tensor(ct))

    def loss(v):
        return _ours(jax.nn.log_softmax(v, -1), targets, blank=blank, reduction=reduction)

    ours, pullback = jax.vjp(loss, jnp.asarray(z))
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(pullback(jnp.asarray(ct))[0], g_theirs.numpy(), rtol=1e-9, atol=1e-12)


def test_the_log_probabilities_derivative_is_finite_differences_and_torchs_minus_exp():
    """Unnormalized log-probabilities: our gradient is the function's (central differences);
    torch's is it plus ``exp(lp)`` at the steps inside each sequence (pinned: a change in torch
    shows here)."""
    lp = _logits() - 1.0
    grad = np.asarray(jax.grad(lambda v: _ours(v, reduction="sum"))(jnp.asarray(lp)))
    eps, fd = 1e-6, np.zeros_like(lp)
    for index in np.ndindex(lp.shape):
        step = np.zeros_like(lp)
        step[index] = eps
        fd[index] = (float(_ours(lp + step, reduction="sum")) - float(_ours(lp - step, reduction="sum"))) / (2 * eps)
    np.testing.assert_allclose(grad, fd, atol=1e-7)
    tlp = torch.tensor(lp, requires_grad=True)
    (g_torch,) = torch.autograd.grad(_theirs(tlp, reduction="sum"), tlp)
    inside = np.arange(T)[:, None, None] < INPUT_LENGTHS[None, :, None]
    np.testing.assert_allclose(g_torch.numpy(), grad + np.where(inside, np.exp(lp), 0), atol=1e-12)


def test_jvp_is_the_transpose_of_the_vjp_under_jit_and_vmap():
    """The JVP formula against central differences along a direction, the VJP its transpose."""
    lp, tangent, ct = _logits(), _logits(), RNG.standard_normal(N)
    f = jax.jit(lambda v: _ours(v, reduction="none"))
    out, jvp = jax.jvp(f, (jnp.asarray(lp),), (jnp.asarray(tangent),))
    eps = 1e-6
    difference = (f(jnp.asarray(lp + eps * tangent)) - f(jnp.asarray(lp - eps * tangent))) / (2 * eps)
    np.testing.assert_allclose(jvp, difference, atol=1e-7)
    _, pullback = jax.vjp(f, jnp.asarray(lp))
    np.testing.assert_allclose(np.dot(np.asarray(jvp), ct), np.sum(np.asarray(pullback(jnp.asarray(ct))[0]) * tangent),
                               rtol=1e-12)
    batched = jax.vmap(lambda v: _ours(v, reduction="sum"))(jnp.stack([jnp.asarray(lp), jnp.asarray(lp) - 1]))
    np.testing.assert_allclose(batched, [float(_ours(lp, reduction="sum")), float(_ours(lp - 1, reduction="sum"))])
    grads = jax.vmap(jax.grad(lambda v: _ours(v, reduction="mean")))(jnp.stack([jnp.asarray(lp)] * 2))
    np.testing.assert_allclose(grads[1], jax.grad(lambda v: _ours(v, reduction="mean"))(jnp.asarray(lp)))


def test_concatenated_and_unbatched_targets_and_float32():
    lp = np.asarray(torch.log_softmax(torch.tensor(_logits()), -1))
    flat = np.concatenate([TARGETS[n, :TARGET_LENGTHS[n]] for n in range(N)])
    np.testing.assert_allclose(_ours(lp, flat, reduction="none"), _theirs(torch.tensor(lp), flat, reduction="none"),
                               rtol=1e-12)
    np.testing.assert_allclose(_ours(lp, flat, reduction="none"), _ours(lp, reduction="none"))
    one = JF.ctc_loss(jnp.asarray(lp[:, 0]), jnp.asarray(TARGETS[0]), 8, 3, reduction="none")
    assert one.shape == ()
    np.testing.assert_allclose(one, TF.ctc_loss(torch.tensor(lp[:, 0]), torch.tensor(TARGETS[0]), (8,), (3,),
                                                reduction="none"), rtol=1e-12)
    low = _ours(lp.astype(np.float32))
    assert low.dtype == jnp.float32
    np.testing.assert_allclose(low, _theirs(torch.tensor(lp, dtype=torch.float32)).numpy(), rtol=1e-5)
    half = _ours(jnp.asarray(lp, jnp.bfloat16))
    assert half.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.float32(half), _ours(np.asarray(jnp.asarray(lp, jnp.bfloat16), np.float64)),
                               rtol=1e-2)  # float32 inside: the bfloat16 inputs' loss, rounded once


@pytest.mark.parametrize("padding", [-100, 100, 0])
def test_padding_past_each_target_is_never_read(padding):
    """torch reads a padded target up to its length: any padding value, in range or not, gives
    its values and gradients."""
    z = _logits()
    padded = np.where(np.arange(3) < TARGET_LENGTHS[:, None], TARGETS, padding)
    tz = torch.tensor(z, requires_grad=True)
    theirs = _theirs(torch.log_softmax(tz, -1), TARGETS, reduction="sum")
    (g_theirs,) = torch.autograd.grad(theirs, tz)
    ours, grad = jax.value_and_grad(lambda v: _ours(jax.nn.log_softmax(v, -1), padded, reduction="sum"))(
        jnp.asarray(z))
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(grad, g_theirs.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_a_target_without_an_alignment(zero_infinity):
    """Three labels with a repeat need five steps; three give none: an infinite loss and NaN
    gradients at its steps (as torch), or 0 and 0 with zero_infinity (as torch). The other
    sequences keep their losses and gradients."""
    z = _logits()
    il = np.array([8, 5, 3, 3])
    tz = torch.tensor(z, requires_grad=True)
    theirs = _theirs(torch.log_softmax(tz, -1), il=il, reduction="sum", zero_infinity=zero_infinity)
    (g_theirs,) = torch.autograd.grad(theirs, tz)
    ours, grad = jax.value_and_grad(lambda v: _ours(jax.nn.log_softmax(v, -1), il=il, reduction="sum",
                                                     zero_infinity=zero_infinity))(jnp.asarray(z))
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-12)
    per = _ours(jax.nn.log_softmax(jnp.asarray(z), -1), il=il, reduction="none", zero_infinity=zero_infinity)
    assert (float(per[2]) == 0) if zero_infinity else np.isposinf(per[2])
    if not zero_infinity:  # NaN at the sequence's own steps, as torch; 0 after them
        assert np.isnan(np.asarray(grad)[:3, 2]).all() and not np.isnan(np.asarray(grad)[3:, 2]).any()
    np.testing.assert_allclose(grad, g_theirs.numpy(), rtol=1e-9, atol=1e-12)  # NaN where torch's is


def test_empty_input_and_target_lengths():
    """No steps and no target: probability 1, loss 0; no steps and a target: infinite (torch's);
    targets of no columns (every target empty); empty log_probs refused as torch refuses them."""
    lp = np.asarray(torch.log_softmax(torch.tensor(_logits()), -1))
    il, tl = np.array([0, 0, 8, 8]), np.array([0, 1, 3, 0])
    np.testing.assert_allclose(_ours(lp, il=il, tl=tl, reduction="none"),
                               _theirs(torch.tensor(lp), il=il, tl=tl, reduction="none").numpy(), rtol=1e-12)
    none, zero = np.zeros((N, 0), np.int64), np.zeros(N, np.int64)
    np.testing.assert_allclose(_ours(lp, none, tl=zero, reduction="none"),
                               _theirs(torch.tensor(lp), none, tl=zero, reduction="none").numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="must not be empty"):
        _theirs(torch.zeros(T, 0, C), none[:0], zero[:0], zero[:0])
    with pytest.raises(ValueError, match="ctc_loss: log_probs must not be empty"):
        _ours(np.zeros((T, 0, C)), none[:0], zero[:0], zero[:0])


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"blank": 5}, ValueError, "blank"),
    ({"reduction": "avg"}, ValueError, "reduction"),
    ({"targets": TARGETS + 3}, ValueError, "targets"),
    ({"input_lengths": np.array([9, 5, 7, 3])}, ValueError, "input_lengths"),
    ({"target_lengths": np.array([4, 2, 3, 0])}, ValueError, "target_lengths"),
    ({"target_lengths": np.array([3.0, 2, 3, 0])}, TypeError, "target_lengths"),
    ({"targets": TARGETS.astype(float)}, TypeError, "targets"),
    ({"input_lengths": np.array([8, 5])}, ValueError, "input_lengths"),
    ({"targets": np.array([1, 2])}, ValueError, "target lengths sum"),
    ({"targets": np.array([[1, 0, 2], [3, 1, 0], [4, 4, 4], [0, 0, 0]])}, ValueError, "blank"),
])
def test_refusals_name_the_op_and_the_argument(kwargs, error, words):
    args = {"targets": TARGETS, "input_lengths": INPUT_LENGTHS, "target_lengths": TARGET_LENGTHS, **kwargs}
    lp = jnp.asarray(_logits())
    with pytest.raises(error, match=words):
        JF.ctc_loss(lp, jnp.asarray(args.pop("targets")), jnp.asarray(args.pop("input_lengths")),
                    jnp.asarray(args.pop("target_lengths")), **args)


def test_second_derivatives_are_finite_and_match_differences_of_the_gradient():
    """JAX's derivative of the VJP formula (torch has no double backward for ctc_loss): finite
    where paths are impossible (the log-space sums' -inf), and equal to central differences of
    the gradient."""
    z = jnp.asarray(_logits())

    def loss(v):
        return _ours(jax.nn.log_softmax(v, -1), reduction="mean")

    direction = jnp.asarray(RNG.standard_normal(z.shape))
    hvp = jax.jvp(jax.grad(loss), (z,), (direction,))[1]
    eps = 1e-6
    fd = (jax.grad(loss)(z + eps * direction) - jax.grad(loss)(z - eps * direction)) / (2 * eps)
    assert np.isfinite(np.asarray(hvp)).all()
    np.testing.assert_allclose(hvp, fd, atol=1e-7)
    hessian_row = jax.grad(lambda v: jnp.vdot(jax.grad(loss)(v), direction))(z)
    np.testing.assert_allclose(hessian_row, hvp, atol=1e-10)
