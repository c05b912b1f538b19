"""``jaxrules.torch``: PyTorch programs ported by changing only their imports give torch 2.13's
values and gradients (float64, CPU), and the torch signatures the ports rely on (pad's negative
widths, one-element tuples, gelu's exact default, softmax's dim, the tensor functions' ``dim``)
behave as torch's."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from _platform_bugs import GPU_REDUCTION_BUG, GPU_REDUCTION_BUG_REASON

import jaxrules.nn
import jaxrules.torch
import jaxrules.torch.linalg
import jaxrules.torch.nn.functional as JF

TORCH_IMPORTS = "import math\nimport torch\nimport torch.nn.functional as F\n"
PORTED_IMPORTS = "import math\nimport jaxrules.torch as torch\nimport jaxrules.torch.nn.functional as F\n"

# ----------------------------------------------------------------------------------------------
# Three small PyTorch programs, one text each; only the imports above differ between the runs

MLP = '''
def loss_fn(x, target, w1, b1, w2, b2, w3, b3):
    h = F.relu(F.linear(x, w1, b1))
    h = F.gelu(F.linear(h, w2, b2))
    h = F.layer_norm(h, (h.shape[-1],))
    logits = F.linear(h, w3, b3)
    return F.cross_entropy(logits, target, label_smoothing=0.1) + 0.5 * F.nll_loss(F.log_softmax(logits, dim=1), target)
'''

CNN = '''
def loss_fn(x, target, running_mean, running_var, w1, b1, gamma, beta, w2, b2, wf, bf, training):
    h = F.pad(x, (1, -1, 2, 0), mode="replicate")
    h = F.conv2d(h, w1, b1, stride=(1,), padding=(1,))
    h = F.batch_norm(h, running_mean, running_var, gamma, beta, training=training, momentum=0.1, eps=1e-5)
    h = F.max_pool2d(F.relu(h), 2)
    h = F.pad(h, (1, 1, 1, 1), mode="reflect")
    h = F.conv2d(h, w2, b2, padding=0, dilation=(1,))
    h = F.avg_pool2d(h, 3, stride=1, padding=(1,), count_include_pad=False)
    h = F.pad(h, (-1, 0, 0, -1))
    h = F.adaptive_avg_pool2d(h, 1).reshape(x.shape[0], -1)
    return F.cross_entropy(F.linear(h, wf, bf), target)
'''

TRANSFORMER = '''
def block(x, mask, ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_1, b_1, w_2, b_2, n_heads, fused):
    B, T, C = x.shape
    D = C // n_heads
    q, k, v = torch.split(F.linear(F.layer_norm(x, (C,), ln1_w, ln1_b, 1e-5), w_qkv, b_qkv), C, dim=-1)
    q, k, v = (t.reshape(B, T, n_heads, D).swapaxes(1, 2) for t in (q, k, v))
    if fused:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        att = F.softmax(q @ k.mT / math.sqrt(D) + mask, dim=-1)
        y = att @ v
    x = x + F.linear(y.swapaxes(1, 2).reshape(B, T, C), w_o, b_o)
    h = F.layer_norm(x, (C,), ln2_w, ln2_b)
    return x + F.linear(F.gelu(F.linear(h, w_1, b_1)), w_2, b_2)


def loss_fn(x, mask, *params, fused):
    y = block(x, mask, *params, n_heads=2, fused=fused)
    return (y ** 2).mean() + torch.std(torch.logsumexp(y, dim=-1), unbiased=False)
'''


def _load(program, imports):
    namespace = {}
    exec(compile(imports + program, "<port>", "exec"), namespace)  # noqa: S102 - the test's own program text
    return namespace


def _compare(program, data, params, *, fn="loss_fn", rtol=1e-10, **options):
    """Runs ``program`` under torch and under jaxrules.torch on the same numpy data; compares the
    loss and the gradient of every parameter."""
    t_fn, j_fn = _load(program, TORCH_IMPORTS)[fn], _load(program, PORTED_IMPORTS)[fn]
    t_params = [torch.tensor(p, requires_grad=True) for p in params]
    t_loss = t_fn(*(torch.tensor(d) for d in data), *t_params, **options)
    t_grads = torch.autograd.grad(t_loss, t_params)
    def ported(device=None):
        with jax.default_device(device):
            j_data = [jnp.asarray(d) for d in data]
            return jax.value_and_grad(lambda ps: j_fn(*j_data, *ps, **options))([jnp.asarray(p) for p in params])

    j_loss, j_grads = ported()
    # On an accelerator a mismatch also reports the CPU device's loss: it says whether the
    # accelerator's program or the port differs.
    on_cpu = "" if jax.default_backend() == "cpu" else f"; the CPU device's loss: {ported(jax.devices('cpu')[0])[0]}"
    np.testing.assert_allclose(j_loss, t_loss.detach().numpy(), rtol=rtol, err_msg=f"loss{on_cpu}")
    for k, (g, tg) in enumerate(zip(j_grads, t_grads)):
        np.testing.assert_allclose(g, tg.numpy(), rtol=rtol, atol=rtol * max(1.0, np.abs(tg.numpy()).max()),
                                   err_msg=f"parameter {k}")
    return t_loss.item()


def test_mlp_classifier_port_matches_torch():
    rng = np.random.default_rng(0)
    x, target = rng.standard_normal((8, 5)), rng.integers(0, 4, 8)
    params = [rng.standard_normal(s) / 2 for s in ((16, 5), (16,), (12, 16), (12,), (4, 12), (4,))]
    assert _compare(MLP, (x, target), params) > 0


@pytest.mark.parametrize("training", [pytest.param(True, marks=pytest.mark.xfail(
    GPU_REDUCTION_BUG, strict=False, reason=f"batch norm's batch statistics: {GPU_REDUCTION_BUG_REASON}")), False])
def test_cnn_port_matches_torch(training):
    rng = np.random.default_rng(1)
    x, target = rng.standard_normal((4, 2, 9, 8)), rng.integers(0, 3, 4)
    running_mean, running_var = rng.standard_normal(6) / 4, 0.5 + rng.random(6)
    params = [rng.standard_normal((6, 2, 3, 3)) / 3, rng.standard_normal(6), 1 + rng.random(6) / 2,
              rng.standard_normal(6) / 4, rng.standard_normal((5, 6, 3, 3)) / 4, rng.standard_normal(5),
              rng.standard_normal((3, 5)), rng.standard_normal(3)]
    assert _compare(CNN, (x, target, running_mean, running_var), params, training=training) > 0


@pytest.mark.parametrize("fused", [False, True], ids=["manual_attention", "scaled_dot_product_attention"])
def test_transformer_block_port_matches_torch(fused):
    rng = np.random.default_rng(2)
    B, T, C = 2, 5, 8
    x = rng.standard_normal((B, T, C))
    mask = np.where(np.tril(np.ones((T, T))) == 1, 0.0, -np.inf)
    params = [1 + rng.standard_normal(C) / 4, rng.standard_normal(C) / 4, rng.standard_normal((3 * C, C)) / 3,
              rng.standard_normal(3 * C) / 4, rng.standard_normal((C, C)) / 3, rng.standard_normal(C) / 4,
              1 + rng.standard_normal(C) / 4, rng.standard_normal(C) / 4, rng.standard_normal((4 * C, C)) / 3,
              rng.standard_normal(4 * C) / 4, rng.standard_normal((C, 4 * C)) / 3, rng.standard_normal(C) / 4]
    assert _compare(TRANSFORMER, (x, mask), params, fused=fused) > 0


# ----------------------------------------------------------------------------------------------
# pad: torch's last-dim-first list; negative widths crop, in every mode torch allows them in


def _pad_pair(x, pad, mode, value=None):
    """jaxrules.torch's and torch's ``pad`` of ``x``, values and the gradient of a weighted sum."""
    t = torch.tensor(x, requires_grad=True)
    ty = TF.pad(t, pad, mode=mode, value=value)
    weights = np.random.default_rng(3).standard_normal(tuple(ty.shape))
    (tg,) = torch.autograd.grad((ty * torch.tensor(weights)).sum(), t)
    y = JF.pad(jnp.asarray(x), pad, mode=mode, value=value)
    g = jax.grad(lambda a: jnp.sum(JF.pad(a, pad, mode=mode, value=value) * weights))(jnp.asarray(x))
    return (y, ty.detach().numpy()), (g, tg.numpy())


@pytest.mark.parametrize("pad", [(-1, 2), (-2, -3), (1, -1, -2, 3), (2, -1, 0, -4, -1, 1), (-5, 0)])
def test_pad_constant_negative_widths_crop_as_torch(pad):
    x = np.random.default_rng(4).standard_normal((2, 3, 5, 6))
    (y, ty), (g, tg) = _pad_pair(x, pad, "constant", value=0.5)
    assert y.shape == ty.shape
    np.testing.assert_array_equal(y, ty)
    np.testing.assert_array_equal(g, tg)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, pad", [((2, 3, 7), (2, -3)), ((2, 3, 7), (-3, 1)), ((2, 3, 7), (-1, -1)),
                                        ((3, 5, 6), (2, -1, -1, 3)), ((2, 3, 5, 6), (-2, 2, 1, -3)),
                                        ((1, 2, 4, 5, 6), (1, -1, -2, 2, 0, -1))])
def test_pad_modes_negative_widths_as_torch(mode, shape, pad):
    x = np.random.default_rng(5).standard_normal(shape)
    (y, ty), (g, tg) = _pad_pair(x, pad, mode)
    assert y.shape == ty.shape
    np.testing.assert_array_equal(y, ty)
    np.testing.assert_allclose(g, tg, rtol=1e-14)


def test_pad_negative_widths_of_integers_and_under_jit():
    x = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(JF.pad(jnp.asarray(x), (-1, 2, 1, -2), value=7),
                                  TF.pad(torch.tensor(x), (-1, 2, 1, -2), value=7).numpy())
    f = jax.jit(lambda a: JF.pad(a, (-1, 2, 1, -2), mode="circular"))
    np.testing.assert_array_equal(f(jnp.asarray(x, jnp.float64)),
                                  TF.pad(torch.tensor(x, dtype=torch.float64), (-1, 2, 1, -2), mode="circular").numpy())


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_negative_widths_under_vmap_and_jvp(mode):
    x = jnp.asarray(np.random.default_rng(17).standard_normal((3, 2, 4, 5)))
    f = lambda a: JF.pad(a, (-1, 2, 1, -2), mode=mode)  # noqa: E731
    np.testing.assert_array_equal(jax.vmap(f)(x), jnp.stack([f(a) for a in x]))
    # the JVP is the transpose of the VJP: <J t, w> = <t, J^T w>
    t, w = x[0], jnp.asarray(np.random.default_rng(18).standard_normal(f(x[0]).shape))
    jt = jax.jvp(f, (x[0],), (t,))[1]
    (jw,) = jax.vjp(f, x[0])[1](w)
    np.testing.assert_allclose(jnp.vdot(jt, w), jnp.vdot(t, jw), rtol=1e-13)


def test_numpy_pad_still_refuses_negative_widths():
    with pytest.raises(ValueError, match="pad: pad_width must be non-negative"):
        jaxrules.numpy.pad(jnp.ones(4), (-1, 1))


@pytest.mark.parametrize("call, match", [
    (lambda x: JF.pad(x, (4, 0), mode="reflect"), "pad: mode='reflect' pads dim 2 of size 4"),
    (lambda x: JF.pad(x, (5, 0), mode="circular"), "pad: mode='circular' pads dim 2"),
    (lambda x: JF.pad(x, (1, 0), mode="reflect", value=1.0), "pad: mode='reflect' takes no value"),
    (lambda x: JF.pad(x, (1,)), "pad: pad must have an even length"),
    (lambda x: JF.pad(x, (-3, -2)), "pad: the widths"),
    (lambda x: JF.pad(x, (1, 1), mode="edge"), "pad: mode must be one of"),
    (lambda x: JF.pad(x[0, 0], (1, 1), mode="replicate"), "pad: mode='replicate' pads the last 1-3 dims"),
])
def test_pad_refusals_name_the_argument(call, match):
    x = jnp.ones((2, 3, 4))
    with pytest.raises(ValueError, match=match):
        call(x)
    with pytest.raises((RuntimeError, NotImplementedError, ValueError, AssertionError)):  # torch refuses them too
        _torch_twin(call)(torch.ones((2, 3, 4)))


def _torch_twin(call):
    """The same lambda with ``JF`` replaced by torch's functional module."""
    return type(call)(call.__code__, {**call.__globals__, "JF": TF}, None, call.__defaults__, call.__closure__)


# ----------------------------------------------------------------------------------------------
# one-element tuples for 2-d and 3-d pooling and convolution


@pytest.mark.parametrize("name, args, kwargs", [
    ("avg_pool2d", (3,), dict(padding=(1,))),
    ("avg_pool2d", ((3,),), dict(stride=(2,), padding=(1,), ceil_mode=True)),
    ("max_pool2d", ((3,),), dict(stride=(1,), padding=(1,), dilation=(1,))),
    ("avg_pool3d", ((2,),), dict(stride=(1,))),
    ("max_pool3d", (2,), dict(stride=(1,), padding=(1,))),
    ("conv2d", ("w2",), dict(stride=(2,), padding=(1,), dilation=(1,))),
    ("conv3d", ("w3",), dict(stride=(1,), padding=(1,))),
    ("conv_transpose2d", ("w2t",), dict(stride=(2,), padding=(1,), output_padding=(1,))),
])
def test_one_element_tuples_as_torch(name, args, kwargs):
    rng = np.random.default_rng(6)
    weights = {"w2": rng.standard_normal((2, 3, 3, 3)), "w3": rng.standard_normal((2, 3, 3, 3, 3)),
               "w2t": rng.standard_normal((3, 2, 3, 3))}
    x = rng.standard_normal((2, 3, 5, 6, 4) if name.endswith("3d") else (2, 3, 5, 6))
    t_args = [torch.tensor(weights[a]) if isinstance(a, str) else a for a in args]
    j_args = [jnp.asarray(weights[a]) if isinstance(a, str) else a for a in args]
    t = torch.tensor(x, requires_grad=True)
    ty = getattr(TF, name)(t, *t_args, **kwargs)
    (tg,) = torch.autograd.grad((ty ** 2).sum(), t)
    y, g = jax.value_and_grad(lambda a: jnp.sum(getattr(JF, name)(a, *j_args, **kwargs) ** 2))(jnp.asarray(x))
    np.testing.assert_allclose(getattr(JF, name)(jnp.asarray(x), *j_args, **kwargs), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(g, tg.numpy(), rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# gelu's exact default and softmax's dim


def test_gelu_default_is_the_exact_form_as_torch():
    x = np.linspace(-4, 4, 41)
    t = torch.tensor(x, requires_grad=True)
    (tg,) = torch.autograd.grad(TF.gelu(t).sum(), t)
    np.testing.assert_allclose(JF.gelu(jnp.asarray(x)), TF.gelu(torch.tensor(x)).numpy(), rtol=1e-12)
    np.testing.assert_allclose(jax.grad(lambda a: JF.gelu(a).sum())(jnp.asarray(x)), tg.numpy(), rtol=1e-12)
    exact = x * 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    np.testing.assert_allclose(JF.gelu(jnp.asarray(x)), exact, rtol=1e-12)
    # jaxrules.nn keeps jax.nn's tanh default, which differs from the exact form by ~1e-4
    assert np.abs(np.asarray(jaxrules.nn.gelu(jnp.asarray(x))) - exact).max() > 1e-5
    np.testing.assert_allclose(JF.gelu(jnp.asarray(x), approximate="tanh"),
                               TF.gelu(torch.tensor(x), approximate="tanh").numpy(), rtol=1e-11, atol=1e-15)
    with pytest.raises(ValueError, match="gelu: approximate must be 'none' or 'tanh'"):
        JF.gelu(jnp.asarray(x), approximate=True)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax", "softmin"])
@pytest.mark.parametrize("shape, dim", [((3, 4), 0), ((3, 4), 1), ((2, 3, 4), -2), ((2, 3, 4), 2), ((5,), 0)])
def test_softmax_dim_as_torch(fn, shape, dim):
    x = np.random.default_rng(7).standard_normal(shape)
    t = torch.tensor(x, requires_grad=True)
    ty = getattr(TF, fn)(t, dim=dim)
    (tg,) = torch.autograd.grad((ty * torch.tensor(x)).sum(), t)
    y, g = jax.value_and_grad(lambda a: jnp.sum(getattr(JF, fn)(a, dim=dim) * x))(jnp.asarray(x))
    np.testing.assert_allclose(getattr(JF, fn)(jnp.asarray(x), dim), ty.detach().numpy(), rtol=1e-13)
    np.testing.assert_allclose(g, tg.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (2, 3, 4, 2)])
def test_softmax_implicit_dim_as_torch(shape):
    x = np.random.default_rng(8).standard_normal(shape)
    with pytest.warns(UserWarning, match="Implicit dimension choice"):
        expected = TF.softmax(torch.tensor(x)).numpy()
    with pytest.warns(UserWarning, match="softmax: implicit dimension choice"):
        y = JF.softmax(jnp.asarray(x))
    np.testing.assert_allclose(y, expected, rtol=1e-14)
    np.testing.assert_allclose(jaxrules.torch.softmax(jnp.asarray(x), -1), torch.softmax(torch.tensor(x), -1).numpy(),
                               rtol=1e-14)


def test_softmax_dtype_casts_first():
    x = np.random.default_rng(9).standard_normal((3, 4)).astype(np.float32)
    y = JF.softmax(jnp.asarray(x), dim=1, dtype=jnp.float64)
    assert y.dtype == jnp.float64
    np.testing.assert_allclose(y, TF.softmax(torch.tensor(x), dim=1, dtype=torch.float64).numpy(), rtol=1e-14)


# ----------------------------------------------------------------------------------------------
# The other torch signatures: deprecated loss arguments, batch_norm's tensor, refusals


@pytest.mark.parametrize("size_average, reduce", [(None, False), (False, None), (True, True), (False, True)])
def test_legacy_size_average_and_reduce_as_torch(size_average, reduce):
    rng = np.random.default_rng(10)
    x, target = rng.standard_normal((6, 4)), rng.integers(0, 4, 6)
    with pytest.warns(UserWarning):
        expected = TF.cross_entropy(torch.tensor(x), torch.tensor(target), None, size_average, -100, reduce).numpy()
    np.testing.assert_allclose(JF.cross_entropy(jnp.asarray(x), jnp.asarray(target), None, size_average, -100, reduce),
                               expected, rtol=1e-14)
    y = rng.standard_normal((6, 4))
    with pytest.warns(UserWarning):
        expected = TF.mse_loss(torch.tensor(x), torch.tensor(y), size_average, reduce).numpy()
    np.testing.assert_allclose(JF.mse_loss(jnp.asarray(x), jnp.asarray(y), size_average, reduce), expected, rtol=1e-14)


def test_batch_norm_returns_the_tensor_and_instance_norm_too():
    rng = np.random.default_rng(11)
    x, mean, var = rng.standard_normal((4, 3, 5)), rng.standard_normal(3), 1 + rng.random(3)
    for training in (False, True):
        y = JF.batch_norm(jnp.asarray(x), jnp.asarray(mean), jnp.asarray(var), training=training)
        expected = TF.batch_norm(torch.tensor(x), torch.tensor(mean), torch.tensor(var), training=training)
        np.testing.assert_allclose(y, expected.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(JF.instance_norm(jnp.asarray(x)), TF.instance_norm(torch.tensor(x)).numpy(), rtol=1e-12,
                               atol=1e-14)


def test_keyword_names_are_torchs():
    rng = np.random.default_rng(12)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    tx, ty = torch.tensor(x), torch.tensor(y)
    pairs = [
        (JF.normalize(input=jnp.asarray(x), p=1.0, dim=0), TF.normalize(input=tx, p=1.0, dim=0)),
        (JF.cosine_similarity(jnp.asarray(x), jnp.asarray(y), dim=0), TF.cosine_similarity(tx, ty, dim=0)),
        (JF.pairwise_distance(jnp.asarray(x), jnp.asarray(y), keepdim=True),
         TF.pairwise_distance(tx, ty, keepdim=True)),
        (JF.glu(jnp.asarray(x), dim=1), TF.glu(tx, dim=1)),
        (JF.logsigmoid(jnp.asarray(x)), TF.logsigmoid(tx)),
        (JF.softplus(jnp.asarray(x), 2.0, 1.0), TF.softplus(tx, 2.0, 1.0)),
        (JF.layer_norm(jnp.asarray(x), [4], eps=1e-3), TF.layer_norm(tx, [4], eps=1e-3)),
        (JF.embedding(jnp.asarray([[0, 2], [1, 0]]), jnp.asarray(x), padding_idx=0),
         TF.embedding(torch.tensor([[0, 2], [1, 0]]), tx, padding_idx=0)),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-13)


_R = np.random.default_rng(20)
_A, _B = _R.standard_normal((4, 6)), _R.standard_normal((4, 6))
_P, _Y = 0.05 + 0.9 * _R.random((4, 6)), _R.random((4, 6))
_SIGN = np.where(_R.random(4) < 0.5, -1.0, 1.0)
_IMG = _R.standard_normal((2, 4, 3, 5))


# every positional argument in torch's order: the adapters' translation of the order is what fails
@pytest.mark.parametrize("name, args", [
    ("sigmoid", (_A,)), ("tanh", (_A,)), ("softsign", (_A,)), ("hardshrink", (_A, 0.3)), ("softshrink", (_A, 0.3)),
    ("tanhshrink", (_A,)), ("pixel_shuffle", (_R.standard_normal((2, 8, 3, 5)), 2)),
    ("pixel_unshuffle", (_R.standard_normal((2, 2, 4, 6)), 2)), ("dropout1d", (_IMG[0], 0.5, False)),
    ("dropout2d", (_IMG, 0.5, False)), ("dropout3d", (_IMG[None], 0.5, False)),
    ("relu", (_A,)), ("relu6", (3 * _A,)), ("elu", (_A, 0.7)), ("celu", (_A, 0.7)), ("selu", (_A,)),
    ("leaky_relu", (_A, 0.2)), ("hardtanh", (_A, -0.5, 0.8)), ("hardsigmoid", (3 * _A,)), ("hardswish", (3 * _A,)),
    ("silu", (_A,)), ("mish", (_A,)), ("threshold", (_A, 0.1, -2.0)), ("softplus", (_A, 2.0, 1.5)),
    ("prelu", (_IMG, np.array([0.1, 0.2, 0.3, 0.4]))), ("dropout", (_A, 0.5, False)),
    ("group_norm", (_IMG, 2, _R.standard_normal(4), _R.standard_normal(4), 1e-3)),
    ("rms_norm", (_IMG, (3, 5), _R.standard_normal((3, 5)), 1e-4)),
    ("instance_norm", (_IMG, None, None, _R.standard_normal(4), _R.standard_normal(4), True, 0.1, 1e-3)),
    ("bilinear", (_A, _B, _R.standard_normal((3, 6, 6)), _R.standard_normal(3))),
    ("pdist", (_A, 3.0)), ("linear", (_A, _R.standard_normal((2, 6)), _R.standard_normal(2))),
    ("conv_transpose1d", (_IMG[0], _R.standard_normal((3, 2, 2)), None, 2, 1, 1, 1, 1)),
    ("conv1d", (_IMG[0], _R.standard_normal((4, 3, 2)), _R.standard_normal(4), 1, 1, 2, 1)),
    ("max_pool1d", (_IMG[0], 2, 1, 1, 1, True)), ("avg_pool1d", (_IMG[0], 2, 1, 1, True, False)),
    ("interpolate", (_IMG, None, 2.0, "bilinear", True)),
    ("l1_loss", (_A, _B, None, None, "sum")), ("mse_loss", (_A, _B, None, None, "none")),
    ("smooth_l1_loss", (_A, _B, None, None, "sum", 0.5)), ("huber_loss", (_A, _B, "sum", 0.5)),
    ("soft_margin_loss", (_A, np.sign(_B), None, None, "sum")),
    ("binary_cross_entropy", (_P, _Y, _R.random(6), None, None, "sum")),
    ("binary_cross_entropy_with_logits", (_A, _Y, _R.random(6), None, None, "sum", _R.random(6))),
    ("kl_div", (np.log(_P), _Y, None, None, "batchmean", False)),
    ("poisson_nll_loss", (_A, _Y, True, True, None, 1e-6, None, "sum")),
    ("gaussian_nll_loss", (_A, _B, _P, True, 1e-3, "sum")),
    ("multilabel_soft_margin_loss", (_A, (_Y > 0.5) * 1.0, _R.random(6), None, None, "sum")),
    ("hinge_embedding_loss", (_A, np.sign(_B), 0.5, None, None, "sum")),
    ("multi_margin_loss", (_A, np.array([0, 5, 2, 1]), 2, 0.5, _R.random(6), None, None, "sum")),
    ("margin_ranking_loss", (_A[:, 0], _B[:, 0], _SIGN, 0.3, None, None, "sum")),
    ("cosine_embedding_loss", (_A, _B, _SIGN, 0.2, None, None, "sum")),
    ("triplet_margin_loss", (_A, _B, _P, 0.5, 3, 1e-5, True, None, None, "sum")),
    ("nll_loss", (np.log(_P), np.array([0, 5, -100, 2]), _R.random(6), None, -100, None, "sum")),
])
def test_functional_positional_arguments_as_torch(name, args):
    def to(convert):
        return [convert(a) if isinstance(a, np.ndarray) else a for a in args]

    expected = getattr(TF, name)(*to(torch.tensor)).numpy()
    np.testing.assert_allclose(getattr(JF, name)(*to(jnp.asarray)), expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("call, match", [
    (lambda x: JF.relu(x, inplace=True), "relu: inplace=True cannot be mirrored"),
    (lambda x: JF.dropout(x, 0.5, True, True), "dropout: inplace=True"),
    (lambda x: JF.normalize(x, out=x), "normalize: out= cannot be mirrored"),
    (lambda x: JF.embedding(jnp.asarray([0]), x, max_norm=1.0), "embedding: max_norm"),
    (lambda x: JF.mse_loss(x, x, weight=x), "mse_loss: weight is not supported"),
    (lambda x: jaxrules.torch.cumsum(x, 0, out=x), "cumsum: out= cannot be mirrored"),
])
def test_what_cannot_be_mirrored_is_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call(jnp.ones((2, 3)))


# ----------------------------------------------------------------------------------------------
# jaxrules.torch's tensor functions: torch's dim, keepdim, correction, overloads and results

_X = np.random.default_rng(13).standard_normal((3, 4, 5))


@pytest.mark.parametrize("name, args, kwargs", [
    ("cumsum", (1,), {}), ("cumprod", (-1,), {}), ("logcumsumexp", (0,), {}), ("sum", ((0, 2),), {}),
    ("sum", (1, True), {}), ("mean", (), dict(dim=-1, keepdim=True)), ("prod", (1,), {}), ("amax", ((0, 1),), {}),
    ("amin", (), {}), ("std", (), {}), ("std", (1,), {}), ("std", (1, False, True), {}), ("std", (False,), {}),
    ("std", (), dict(dim=(0, 2), correction=0)), ("var", (2,), dict(correction=2, keepdim=True)),
    ("var", (None, True), {}), ("std_mean", (1,), {}), ("var_mean", ((0, 1),), dict(correction=0)),
    ("logsumexp", (2,), {}), ("logsumexp", ((0, 1), True), {}), ("norm", (), {}), ("norm", (3,), {}),
    ("norm", (1, 1), {}), ("norm", ("fro", (1, 2)), {}), ("norm", ("nuc", (1, 2)), {}),
    ("norm", (), dict(p=float("inf"), dim=0, keepdim=True)), ("max", (), {}), ("max", (1,), {}),
    ("min", (2, True), {}), ("median", (2,), {}), ("kthvalue", (2, 1), {}), ("topk", (2,), {}),
    ("topk", (3, 1, False), {}), ("sort", (), {}), ("sort", (0, True), {}), ("argsort", (1,), dict(descending=True)),
    ("quantile", (0.3, 1), dict(keepdim=True)), ("cummax", (2,), {}), ("cummin", (0,), {}),
    ("log_softmax", (1,), {}), ("split", (2, 1), {}), ("split", ([1, 3, 1], 2), {}), ("unbind", (1,), {}),
    ("clamp", (-0.5, 0.5), {}), ("clamp", (), dict(min=0.0)), ("tile", ((2, 1, 1),), {}),
    ("repeat_interleave", (2, 1), {}), ("tensor_split", (3, 2), {}),
])
def test_tensor_functions_as_torch(name, args, kwargs):
    t = torch.tensor(_X, requires_grad=True)
    expected = getattr(torch, name)(t, *args, **kwargs)
    ours = getattr(jaxrules.torch, name)(jnp.asarray(_X), *args, **kwargs)
    flat_t = expected if isinstance(expected, tuple | list) else (expected,)
    flat_j = ours if isinstance(ours, tuple | list) else (ours,)
    assert len(flat_t) == len(flat_j)
    for a, b in zip(flat_j, flat_t):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-12, atol=1e-14)
    floats = [b for b in flat_t if b.dtype == torch.float64]
    if not floats:  # indices only: no derivative
        return
    weights = [np.random.default_rng(14).standard_normal(tuple(b.shape)) for b in floats]
    (tg,) = torch.autograd.grad(sum((b * torch.tensor(w)).sum() for b, w in zip(floats, weights)), t)

    def loss(a):
        out = getattr(jaxrules.torch, name)(a, *args, **kwargs)
        out = [o for o in (out if isinstance(out, tuple | list) else (out,)) if o.dtype == jnp.float64]
        return sum(jnp.sum(o * w) for o, w in zip(out, weights))

    np.testing.assert_allclose(jax.grad(loss)(jnp.asarray(_X)), tg.numpy(), rtol=1e-10, atol=1e-12)


def test_nanmedian_as_torch():
    x = np.random.default_rng(19).standard_normal((4, 5))
    x[0, 1] = x[2, 3] = x[2, 4] = np.nan  # 4, 5, 3 and 5 values per row
    odd = [1, 2, 3]  # torch's lower median is the median where the count is odd (the deviation aside)
    t = torch.tensor(x, requires_grad=True)
    values, indices = torch.nanmedian(t, 1)
    (tg,) = torch.autograd.grad(values[odd].sum(), t)
    ours = jaxrules.torch.nanmedian(jnp.asarray(x), 1)
    np.testing.assert_array_equal(np.asarray(ours.values)[odd], values.detach().numpy()[odd])
    np.testing.assert_array_equal(np.asarray(ours.indices)[odd], indices.numpy()[odd])
    g = jax.grad(lambda a: jaxrules.torch.nanmedian(a, 1).values[jnp.asarray(odd)].sum())(jnp.asarray(x))
    np.testing.assert_array_equal(g, tg.numpy())


def test_named_results_and_max_of_two_tensors():
    x = jnp.asarray(_X)
    assert jaxrules.torch.sort(x, 1).indices.shape == (3, 4, 5)
    assert jaxrules.torch.max(x, 0).values.shape == (4, 5)
    np.testing.assert_array_equal(jaxrules.torch.max(x, -x), np.maximum(_X, -_X))
    np.testing.assert_array_equal(jaxrules.torch.gather(x, 1, jnp.zeros((3, 2, 5), int)),
                                  torch.gather(torch.tensor(_X), 1, torch.zeros((3, 2, 5), dtype=torch.long)).numpy())


def test_median_of_an_even_count_is_the_mean_of_the_middle_values():
    # the documented deviation: torch.median returns the lower middle value
    x = np.array([4.0, 1.0, 3.0, 2.0])
    assert float(torch.median(torch.tensor(x))) == 2.0
    assert float(jaxrules.torch.median(jnp.asarray(x))) == 2.5


def test_linalg_lu_pivots_are_torchs_one_based():
    a = np.random.default_rng(15).standard_normal((4, 4))
    lu, piv = jaxrules.torch.linalg.lu_factor(jnp.asarray(a))
    t_lu, t_piv = torch.linalg.lu_factor(torch.tensor(a))
    np.testing.assert_allclose(lu, t_lu.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(piv, t_piv.numpy())
    for ours, theirs in zip(jaxrules.torch.lu_unpack(lu, piv), torch.lu_unpack(t_lu, t_piv)):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name, args, kwargs", [
    ("det", (), {}), ("slogdet", (), {}), ("inv", (), {}), ("matrix_norm", (), {}), ("matrix_norm", ("nuc",), {}),
    ("vector_norm", (3, 1), dict(keepdim=True)), ("norm", (), {}), ("norm", (2, (0, 1)), {}),
    ("svdvals", (), {}), ("qr", (), {}), ("solve", ("b",), {}), ("solve", ("b",), dict(left=False)),
    ("matrix_power", (3,), {}), ("matrix_exp", (), {}), ("eigvalsh", (), {}), ("cholesky", (), dict(upper=True)),
])
def test_linalg_as_torch(name, args, kwargs):
    rng = np.random.default_rng(16)
    m = rng.standard_normal((4, 4))
    a = m @ m.T + 4 * np.eye(4)  # symmetric positive definite: every function applies
    b = rng.standard_normal((4, 4))
    t = torch.tensor(a)
    expected = getattr(torch.linalg, name)(t, *[torch.tensor(b) if v == "b" else v for v in args], **kwargs)
    ours = getattr(jaxrules.torch.linalg, name)(jnp.asarray(a), *[jnp.asarray(b) if v == "b" else v for v in args],
                                                 **kwargs)
    flat_t = expected if isinstance(expected, tuple) else (expected,)
    flat_j = ours if isinstance(ours, tuple) else (ours,)
    for x, y in zip(flat_j, flat_t, strict=True):
        np.testing.assert_allclose(x, y.numpy(), rtol=1e-11, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# torch's calling forms that torch's OpInfo samples use (jaxrules/opinfo.py): each against torch


def test_tensor_split_takes_integer_tensors_as_torch():
    x = np.arange(10.0)
    for sections in (np.array(3), np.array([2, 5])):
        expected = torch.tensor_split(torch.tensor(x), torch.tensor(sections))
        ours = jaxrules.torch.tensor_split(jnp.asarray(x), jnp.asarray(sections))
        assert [o.shape for o in ours] == [tuple(e.shape) for e in expected]
    with pytest.raises(TypeError, match="tensor_split: indices_or_sections"):
        jaxrules.torch.tensor_split(jnp.asarray(x), jnp.ones((1, 1), int))


@pytest.mark.parametrize("name, weight_shape, x_shape", [
    ("conv1d", (4, 3, 2), (3, 7)), ("conv2d", (4, 3, 2, 2), (3, 5, 6)), ("conv_transpose1d", (3, 4, 2), (3, 7)),
])
def test_convolutions_take_an_unbatched_input_as_torch(name, weight_shape, x_shape):
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(weight_shape)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w)
    expected = getattr(TF, name)(tx, tw)
    ct = rng.standard_normal(tuple(expected.shape))
    (tg,) = torch.autograd.grad(expected, tx, torch.tensor(ct))
    ours, pullback = jax.vjp(lambda a: getattr(JF, name)(a, jnp.asarray(w)), jnp.asarray(x))
    np.testing.assert_allclose(ours, expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pullback(jnp.asarray(ct))[0], tg.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["reflect", "circular"])
def test_pad_accepts_a_zero_batch_only_as_torch(mode):
    for shape in ((0, 2, 3), (2, 0, 3), (0, 3)):
        try:
            expected = tuple(TF.pad(torch.zeros(shape), (1, 1), mode=mode).shape)
        except RuntimeError:
            with pytest.raises(ValueError, match=f"pad: mode='{mode}'"):
                JF.pad(jnp.zeros(shape), (1, 1), mode=mode)
        else:
            assert JF.pad(jnp.zeros(shape), (1, 1), mode=mode).shape == expected


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce_of_a_0d_input_as_torch(reduce):
    for include_self in (True, False):
        expected = torch.tensor(1.5).index_reduce(0, torch.tensor([0]), torch.tensor(-2.0), reduce,
                                                  include_self=include_self)
        ours = jaxrules.torch.index_reduce(jnp.asarray(1.5), 0, jnp.array([0]), jnp.asarray(-2.0), reduce,
                                           include_self=include_self)
        assert ours.shape == () and float(ours) == float(expected)


def test_l1_loss_of_complex_input_has_torchs_gradient():
    rng = np.random.default_rng(5)
    x = rng.standard_normal(6) + 1j * rng.standard_normal(6)
    y = rng.standard_normal(6) + 1j * rng.standard_normal(6)
    y[0] = x[0]  # a tie: gradient 0
    tx = torch.tensor(x, requires_grad=True)
    (tg,) = torch.autograd.grad(TF.l1_loss(tx, torch.tensor(y)), tx)
    g = jax.grad(lambda a: JF.l1_loss(a, jnp.asarray(y)))(jnp.asarray(x))
    np.testing.assert_allclose(np.conj(g), tg.numpy(), rtol=1e-12, atol=1e-14)  # JAX's convention: conjugate


def test_masked_fill_broadcasts_input_to_the_mask_as_torch():
    rng = np.random.default_rng(6)
    x = rng.standard_normal(5)
    mask = rng.standard_normal((3, 5)) > 0
    cot = rng.standard_normal((3, 5))
    tx = torch.tensor(x, requires_grad=True)
    expected = torch.masked_fill(tx, torch.tensor(mask), 2.5)
    (tg,) = torch.autograd.grad(expected, tx, torch.tensor(cot))
    ours, pullback = jax.vjp(lambda a: jaxrules.torch.masked_fill(a, jnp.asarray(mask), 2.5), jnp.asarray(x))
    assert ours.shape == (3, 5)
    np.testing.assert_array_equal(ours, expected.detach().numpy())
    np.testing.assert_allclose(pullback(jnp.asarray(cot))[0], tg.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="masked_fill: mask"):
        jaxrules.torch.masked_fill(jnp.ones(4), jnp.ones((3, 5), bool), 0.0)


def _vjp_as_torch(ours_fn, torch_fn, *arrays):
    """Values and the VJP of a random cotangent: jaxrules.torch against torch (float64)."""
    rng = np.random.default_rng(7)
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    expected = torch_fn(*tensors)
    ours, pullback = jax.vjp(ours_fn, *(jnp.asarray(a) for a in arrays))
    assert ours.shape == tuple(expected.shape) and ours.dtype == jnp.float64
    np.testing.assert_allclose(ours, expected.detach().numpy(), rtol=1e-12)
    cot = rng.standard_normal(ours.shape)
    t_grads = torch.autograd.grad(expected, tensors, torch.tensor(cot), allow_unused=True)
    for grad, t_grad, a in zip(pullback(jnp.asarray(cot)), t_grads, arrays, strict=True):
        np.testing.assert_allclose(grad, np.zeros_like(a) if t_grad is None else t_grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("x_shape, index", [
    ((5,), np.zeros((2, 0), np.uint8)),  # an empty index: neither its dtype nor its rank is checked
    ((5,), np.zeros((0,), np.float64)),
    ((3, 4), np.zeros((0, 2), np.int64)),
    ((), np.array([0])),  # a 0-d input acts as a 1-element vector
    ((), np.array(0)),
    ((5,), np.array(3)),  # so does a 0-d index
])
def test_gather_of_0d_and_empty_arguments_as_torch(x_shape, index):
    x = np.random.default_rng(8).standard_normal(x_shape)
    _vjp_as_torch(lambda a: jaxrules.torch.gather(a, 0, jnp.asarray(index)),
                  lambda a: torch.gather(a, 0, torch.tensor(index)), x)


@pytest.mark.parametrize("dim, index_shape", [(1, (2, 7, 3)), (0, (2, 5, 4)), (2, (3, 1, 6)), (-1, (1, 1, 1))])
def test_gather_reads_only_the_index_shape_outside_dim_as_torch(dim, index_shape):
    # torch.gather does not broadcast: outside dim it reads input[:index.shape[d]]
    rng = np.random.default_rng(10)
    x = rng.standard_normal((3, 5, 4))
    index = rng.integers(0, x.shape[dim], index_shape)
    _vjp_as_torch(lambda a: jaxrules.torch.gather(a, dim, jnp.asarray(index)),
                  lambda a: torch.gather(a, dim, torch.tensor(index)), x)


@pytest.mark.parametrize("bad", [-1, 3])
def test_gather_index_out_of_range_raises_eagerly_and_is_nan_under_jit(bad):
    x = jnp.arange(6.0).reshape(2, 3)
    index = np.array([[0, bad], [1, 2]])
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.gather(torch.arange(6.0).reshape(2, 3), 1, torch.tensor(index))
    with pytest.raises(ValueError, match=r"^gather: index must lie in \[0, 3\)"):
        jaxrules.torch.gather(x, 1, jnp.asarray(index))
    gathered = jax.jit(lambda x, i: jaxrules.torch.gather(x, 1, i))(x, jnp.asarray(index))
    np.testing.assert_array_equal(np.isnan(gathered), index == bad)
    with pytest.raises(ValueError, match=r"gather: index must lie in \[0, 3\)"):
        jaxrules.checked(jax.jit(lambda x, i: jaxrules.torch.gather(x, 1, i)))(x, jnp.asarray(index))
    with pytest.raises(ValueError, match="index's shape"):
        jaxrules.torch.gather(x, 1, jnp.zeros((3, 1), jnp.int32))


def test_take_along_dim_counts_negative_indices_from_the_end_along_dim_as_torch():
    x = np.arange(12.0).reshape(3, 4)
    for index, dim in (([[-1], [0], [-4]], 1), ([[0, -3, 2, -1]], 0), ([[-2, 3]], 1)):
        _vjp_as_torch(lambda a: jaxrules.torch.take_along_dim(a, jnp.asarray(index), dim),
                      lambda a: torch.take_along_dim(a, torch.tensor(index), dim), x)


@pytest.mark.parametrize("index, dim, bound", [
    ([[4], [0], [1]], 1, r"\[-4, 4\)"),
    ([[-5], [0], [1]], 1, r"\[-4, 4\)"),
    ([[0, 3, 1, 2]], 0, r"\[-3, 3\)"),
    ([[7, 0, 0, 0]], -2, r"\[-3, 3\)"),
    ([12, 0], None, r"\[0, 12\)"),
    ([0, -1], None, r"\[0, 12\)"),
])
def test_take_along_dim_index_out_of_range_raises_eagerly_and_checked_and_is_nan_under_jit(index, dim, bound):
    """torch 2.13 raises along the flattened input and, along ``dim``, takes the index modulo
    the size (an entry of another position); here an error, and NaN under a plain ``jit``."""
    x = np.arange(12.0).reshape(3, 4)
    index = np.array(index)
    if dim is None:
        with pytest.raises(RuntimeError, match="out of bounds"):
            torch.take_along_dim(torch.tensor(x), torch.tensor(index))
    else:
        size = x.shape[dim]
        wrapped = torch.take_along_dim(torch.tensor(x), torch.tensor(index % size), dim)
        torch.testing.assert_close(torch.take_along_dim(torch.tensor(x), torch.tensor(index), dim), wrapped)
    with pytest.raises(ValueError, match=r"^take_along_dim: indices must lie in " + bound):
        jaxrules.torch.take_along_dim(jnp.asarray(x), jnp.asarray(index), dim)
    with pytest.raises(ValueError, match=r"^take_along_dim: indices must lie in " + bound + ".*out of range"):
        jaxrules.checked(jax.jit(lambda a, i: jaxrules.torch.take_along_dim(a, i, dim)))(x, jnp.asarray(index))
    taken = np.asarray(jax.jit(lambda a, i: jaxrules.torch.take_along_dim(a, i, dim))(x, jnp.asarray(index)))
    size = x.size if dim is None else x.shape[dim]
    bad = np.broadcast_to((index < (0 if dim is None else -size)) | (index >= size), taken.shape)
    assert bad.any()
    np.testing.assert_array_equal(np.isnan(taken), bad)
    in_range = np.where(bad, 0, index)
    expected = torch.take_along_dim(torch.tensor(x), torch.tensor(in_range), dim).numpy()
    np.testing.assert_array_equal(taken[~bad], expected[~bad])


def test_take_along_dim_from_an_empty_axis_is_nan_under_jit():
    x, index = jnp.zeros((2, 0)), jnp.zeros((2, 1), jnp.int32)
    with pytest.raises(ValueError, match=r"take_along_dim: indices must lie in \[0, 0\)"):
        jaxrules.torch.take_along_dim(x, index, 1)
    assert np.isnan(jax.jit(lambda a, i: jaxrules.torch.take_along_dim(a, i, 1))(x, index)).all()
    assert jaxrules.torch.take_along_dim(x, jnp.zeros((2, 0), jnp.int32), 1).shape == (2, 0)


@pytest.mark.parametrize("call, torch_call", [
    (lambda m: jaxrules.torch.gather(jnp.ones(()), 1, jnp.array([0])), lambda: torch.gather(torch.ones(()), 1,
                                                                                              torch.tensor([0]))),
    (lambda m: jaxrules.torch.gather(jnp.ones(5), 2, jnp.zeros((2, 0, 1), jnp.uint8)),
     lambda: torch.gather(torch.ones(5), 2, torch.zeros((2, 0, 1), dtype=torch.uint8))),
    (lambda m: JF.cosine_similarity(jnp.ones(()), jnp.ones(()), dim=1),
     lambda: TF.cosine_similarity(torch.ones(()), torch.ones(()), dim=1)),
])
def test_0d_and_empty_arguments_torch_refuses_raise_the_librarys_error(call, torch_call):
    with pytest.raises((RuntimeError, IndexError)):
        torch_call()
    with pytest.raises(ValueError, match=r"^(gather|take_along_axis|cosine_similarity): "):
        call(None)


def test_cat_skips_legacy_empty_1d_tensors_as_torch():
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 2))
    empty = np.zeros(0)
    _vjp_as_torch(lambda e, x: jaxrules.torch.cat([e, x], dim=1), lambda e, x: torch.cat([e, x], dim=1), empty, a)
    _vjp_as_torch(lambda x, e, y: jaxrules.torch.cat((x, e, y), dim=-1), lambda x, e, y: torch.cat((x, e, y), dim=-1),
                  a, empty, b)
    _vjp_as_torch(lambda e, f: jaxrules.torch.cat([e, f], dim=1), lambda e, f: torch.cat([e, f], dim=1), empty, empty)
    # a skipped tensor's dtype still takes part in the result's
    mixed = jaxrules.torch.cat([jnp.zeros(0, jnp.float64), jnp.ones((2, 3), jnp.float32)], dim=1)
    expected = torch.cat([torch.zeros(0, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float32)], dim=1)
    assert mixed.shape == (2, 3) and str(mixed.dtype) == str(expected.dtype).removeprefix("torch.")
    with pytest.raises(ValueError, match="concatenate"):  # an empty tensor of shape (0, 2) is not skipped
        jaxrules.torch.cat([jnp.zeros((0, 2)), jnp.ones((3, 3))], dim=1)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_of_an_empty_1d_input_as_torch(training):
    empty = np.zeros(0)
    _vjp_as_torch(lambda x, m, v: JF.batch_norm(x, m, v, training=training),
                  lambda x, m, v: TF.batch_norm(x, m, v, training=training), empty, empty, empty + 1)
    with pytest.raises(IndexError):  # weight[0] of an empty weight, as torch
        TF.batch_norm(torch.zeros(0), None, None, torch.ones(0), training=training)
    with pytest.raises(IndexError):
        JF.batch_norm(jnp.zeros(0), None, None, jnp.ones(0), training=training)


@pytest.mark.parametrize("x1, x2, dim", [(2.0, -3.0, 0), (0.5, 4.0, -1), (0.0, -3.0, 0)])
def test_cosine_similarity_of_0d_inputs_as_torch(x1, x2, dim):
    """A 0-d pair is a 1-element vector along dim 0: the value sign(x1 x2), the derivative torch's
    (at x1 = 0 the clamped norm eps: x2 / (|x2| eps))."""
    _vjp_as_torch(lambda a, b: JF.cosine_similarity(a, b, dim=dim), lambda a, b: TF.cosine_similarity(a, b, dim=dim),
                  np.float64(x1), np.float64(x2))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_of_0d_arguments_as_torch(reduce):
    for include_self in (True, False):
        _vjp_as_torch(
            lambda x, s, r=reduce, i=include_self: jaxrules.torch.scatter_reduce(x, 0, jnp.asarray(0), s, r,
                                                                                 include_self=i),
            lambda x, s, r=reduce, i=include_self: torch.scatter_reduce(x, 0, torch.tensor(0), s, r, include_self=i),
            np.float64(1.5), np.float64(-2.0))
    with pytest.raises(IndexError):
        torch.scatter_reduce(torch.tensor(1.5), 1, torch.tensor(0), torch.tensor(2.0), reduce)
    with pytest.raises(ValueError, match="^scatter_reduce: dim"):
        jaxrules.torch.scatter_reduce(jnp.asarray(1.5), 1, jnp.asarray(0), jnp.asarray(2.0), reduce)


def test_quantile_takes_torchs_interpolations_only():
    """numpy's ``inverted_cdf`` (``jaxrules.numpy.quantile`` has it) is not one of torch's."""
    with pytest.raises(RuntimeError, match="interpolation"):
        torch.quantile(torch.ones(3), 0.5, interpolation="inverted_cdf")
    with pytest.raises(ValueError, match="^quantile: interpolation"):
        jaxrules.torch.quantile(jnp.ones(3), 0.5, interpolation="inverted_cdf")
    np.testing.assert_array_equal(jaxrules.torch.quantile(jnp.arange(4.0), 0.5, interpolation="lower"),
                                  torch.quantile(torch.arange(4.0), 0.5, interpolation="lower").numpy())


@pytest.mark.parametrize("n", [1, 2, 3])
def test_max_pool_of_an_unbatched_input_as_torch(n):
    # torch pools a (C, *spatial) input as a batch of one; the indices too
    x = np.random.default_rng(12).standard_normal((3,) + (5,) * n)
    ours, theirs = getattr(JF, f"max_pool{n}d"), getattr(TF, f"max_pool{n}d")
    _vjp_as_torch(lambda a: ours(a, 2, stride=1, padding=1), lambda a: theirs(a, 2, stride=1, padding=1), x)
    values, indices = ours(jnp.asarray(x), 3, stride=2, return_indices=True)
    t_values, t_indices = theirs(torch.tensor(x), 3, stride=2, return_indices=True)
    np.testing.assert_array_equal(values, t_values.numpy())
    np.testing.assert_array_equal(indices, t_indices.numpy())


def test_one_hot_as_torch():
    """torch's integer rows, ``num_classes=-1`` read from the indices, its refusals."""
    t = np.array([[0, 2], [1, 3]])
    for n in (-1, 5):
        np.testing.assert_array_equal(JF.one_hot(t, n), TF.one_hot(torch.tensor(t), n).numpy())
    assert jnp.issubdtype(JF.one_hot(t).dtype, jnp.integer)
    np.testing.assert_array_equal(jax.jit(lambda v: JF.one_hot(v, 4))(t), TF.one_hot(torch.tensor(t), 4).numpy())
    with pytest.raises(ValueError, match=r"one_hot: class values must lie in \[0, 3\)"):
        JF.one_hot(t, 3)  # torch: "Class values must be smaller than num_classes"
    with pytest.raises(ValueError, match="one_hot: num_classes=-1 .* concrete"):
        jax.jit(JF.one_hot)(t)
    with pytest.raises(TypeError, match="one_hot: tensor must hold integer"):
        JF.one_hot(np.array([0.5]))


# ----------------------------------------------------------------------------------------------
# F's functions without a jaxrules op: jax.numpy compositions whose JAX derivatives are torch's


@pytest.mark.parametrize("name, lambd", [("hardshrink", 0.5), ("hardshrink", -0.25), ("softshrink", 0.5),
                                         ("softshrink", 0.0), ("tanhshrink", None)])
def test_shrinks_match_torch_at_their_ends_and_between(name, lambd):
    """Values and gradients against torch's in float64, at the band's ends (``+-lambd``: inside,
    gradient 0), just outside them, at zeros and at random points. At NaN the value is NaN and
    the gradient that of torch's formula, ``grad`` outside the band (torch's own kernels give 1
    or 0 there, by code path: not compared)."""
    x = np.concatenate([[-0.5, 0.5, -0.25, 0.25, -0.5 - 1e-9, 0.5 + 1e-9, 0.0, -0.0, 0.7, -2.0],
                        np.random.default_rng(3).standard_normal(40)])
    kw = {} if lambd is None else {"lambd": lambd}
    tx = torch.tensor(x, requires_grad=True)
    getattr(TF, name)(tx, **kw).sum().backward()
    ours = getattr(JF, name)
    with jax.enable_x64(True):
        value = ours(jnp.asarray(x), **kw)
        grad = jax.grad(lambda v: ours(v, **kw).sum())(jnp.asarray(x))
        np.testing.assert_allclose(value, getattr(TF, name)(tx, **kw).detach().numpy(), rtol=1e-14, atol=1e-16)
        np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=1e-12, atol=1e-15)  # 1 - tanh^2: rounding
        nan_value, nan_grad = ours(jnp.asarray(np.nan), **kw), jax.grad(lambda v: ours(v, **kw))(jnp.asarray(np.nan))
    assert np.isnan(nan_value)
    assert np.isnan(nan_grad) if name == "tanhshrink" else nan_grad == 1.0


def test_shrinks_refuse_what_torch_refuses():
    with pytest.raises(ValueError, match="^softshrink: lambd must be >= 0"):
        JF.softshrink(jnp.ones(3), -0.1)
    with pytest.raises(TypeError, match="^hardshrink: lambd must be a static number"):
        JF.hardshrink(jnp.ones(3), "0.5")


@pytest.mark.parametrize("shape, r", [((1, 8, 3, 5), 2), ((2, 3, 18, 2, 4), 3), ((9, 2, 2), 3), ((4, 1, 1), 1)])
def test_pixel_shuffles_match_torch_with_gradients(shape, r):
    """``pixel_shuffle`` and ``pixel_unshuffle`` against torch's: values (any leading batch axes)
    and the gradient of ``sum(w * out)``, a permutation of ``w``."""
    x = np.random.default_rng(4).standard_normal(shape)
    for name, arg in (("pixel_shuffle", x), ("pixel_unshuffle", TF.pixel_shuffle(torch.tensor(x), r).numpy())):
        tx = torch.tensor(arg, requires_grad=True)
        tout = getattr(TF, name)(tx, r)
        w = np.random.default_rng(5).standard_normal(tout.shape)
        (tout * torch.tensor(w)).sum().backward()
        ours = getattr(JF, name)
        np.testing.assert_array_equal(ours(jnp.asarray(arg), r), tout.detach().numpy())
        grad = jax.grad(lambda v, ours=ours, w=w: jnp.sum(ours(v, r) * w))(jnp.asarray(arg))
        np.testing.assert_array_equal(grad, tx.grad.numpy())


def test_pixel_shuffle_of_zero_channels_has_an_empty_gradient():
    """Zero channels: torch's value (empty) and an empty gradient of the input's shape, where torch
    2.13's backward raises ("PixelShuffleBackward0 returned an invalid gradient": it reshapes to
    the output's shape)."""
    x = np.zeros((2, 0, 2, 2))
    assert JF.pixel_shuffle(jnp.asarray(x), 2).shape == TF.pixel_shuffle(torch.tensor(x), 2).shape == (2, 0, 4, 4)
    grad = jax.grad(lambda v: jnp.sum(JF.pixel_shuffle(v, 2)))(jnp.asarray(x))
    assert grad.shape == x.shape
    tx = torch.tensor(x, requires_grad=True)
    with pytest.raises(RuntimeError, match="invalid gradient"):  # torch's bug: when it is fixed, compare
        TF.pixel_shuffle(tx, 2).sum().backward()


@pytest.mark.parametrize("call, match", [
    (lambda: JF.pixel_shuffle(jnp.ones((8, 3)), 2), "^pixel_shuffle: input must have at least 3 dimensions"),
    (lambda: JF.pixel_shuffle(jnp.ones((1, 6, 3, 3)), 2), r"^pixel_shuffle: input's channels \(6\) must be divisible"),
    (lambda: JF.pixel_shuffle(jnp.ones((1, 4, 3, 3)), 0), "^pixel_shuffle: upscale_factor must be a positive int"),
    (lambda: JF.pixel_shuffle(jnp.ones((1, 4, 3, 3)), 2.0), "^pixel_shuffle: upscale_factor must be a positive int"),
    (lambda: JF.pixel_unshuffle(jnp.ones((1, 1, 3, 4)), 2), "^pixel_unshuffle: input's height \\(3\\) and width"),
])
def test_pixel_shuffles_refuse_what_torch_refuses(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("name, shape, mask_shape", [
    ("dropout1d", (6, 5, 7), (6, 5, 1)), ("dropout1d", (5, 7), (5, 1)), ("dropout2d", (6, 5, 3, 4), (6, 5, 1, 1)),
    ("dropout3d", (6, 5, 2, 3, 2), (6, 5, 1, 1, 1)), ("dropout3d", (5, 2, 3, 2), (5, 1, 1, 1)),
])
def test_channel_dropout_drops_whole_channels(name, shape, mask_shape):
    """torch's feature dropout: each channel (of each example) is all zeros or all ``x / (1 - p)``;
    the gradient is that mask; about ``p`` of the channels dropped; not training, the identity; a
    dropped NaN stays NaN (torch multiplies by the mask too)."""
    fn = getattr(JF, name)
    x = np.random.default_rng(6).standard_normal(shape) + 3.0  # no zero entries
    key = jax.random.key(1)
    out = np.asarray(fn(jnp.asarray(x), 0.4, key=key))
    ratio = out / x
    channels = ratio.reshape(int(np.prod(mask_shape)), -1)  # one row per mask entry (example, channel)
    np.testing.assert_allclose(channels, channels[:, :1] * np.ones_like(channels), rtol=1e-6)
    assert set(np.round(channels[:, 0], 5)) <= {0.0, round(1 / 0.6, 5)}
    dropped = np.mean(channels[:, 0] == 0)
    assert 0.15 < dropped < 0.65, dropped
    grad = jax.grad(lambda v: jnp.sum(fn(v, 0.4, key=key)))(jnp.asarray(x))
    np.testing.assert_allclose(grad, ratio, rtol=1e-6)
    np.testing.assert_array_equal(fn(jnp.asarray(x), 0.4, training=False), x)
    with_nan = x.copy()
    with_nan[(0,) * len(shape)] = np.nan
    assert np.isnan(np.asarray(fn(jnp.asarray(with_nan), 0.4, key=key))[(0,) * len(shape)])


def test_channel_dropout_follows_torchs_rank_rules_and_refusals():
    x = jnp.ones((2, 3, 4))
    with pytest.warns(UserWarning, match="dropout2d: a 3-D input is read as \\(N, C, L\\)"):
        out = JF.dropout2d(x, 0.5, key=jax.random.key(0))
    channels = np.asarray(out).reshape(6, 4)
    assert all(len(set(row)) == 1 for row in channels)  # (N, C, L): one mask entry per (n, c)
    with pytest.warns(UserWarning, match="dropout3d: received a 3-D input"):
        JF.dropout3d(x, 0.5, training=False)
    with pytest.raises(ValueError, match="^dropout1d: input must be 2-D or 3-D, got 4-D"):
        JF.dropout1d(jnp.ones((1, 2, 3, 4)), key=jax.random.key(0))
    with pytest.raises(ValueError, match="^dropout2d: p must be a probability in \\[0, 1\\]"):
        JF.dropout2d(jnp.ones((1, 2, 3, 4)), 1.5, key=jax.random.key(0))
    with pytest.raises(ValueError, match="^dropout2d: key \\(a jax.random key\\) is required"):
        JF.dropout2d(jnp.ones((1, 2, 3, 4)))
    with pytest.raises(ValueError, match="^dropout2d: inplace=True cannot be mirrored"):
        JF.dropout2d(jnp.ones((1, 2, 3, 4)), 0.5, True, True, key=jax.random.key(0))
    np.testing.assert_array_equal(JF.dropout2d(jnp.ones((1, 2, 3, 4)), 0.0), 1.0)  # p = 0 needs no key
    np.testing.assert_array_equal(JF.dropout2d(jnp.ones((1, 2, 3, 4)), 1.0, key=jax.random.key(0)), 0.0)


# torch before 2.13 has no infinite norm_type case in lp_pool (x^inf summed, then ^(1/inf): 1);
# 2.13's is the max pool of |x| (the GPU machine has torch 2.11; CI pins 2.13).
_TORCH_LP_POOL_INF = pytest.mark.skipif(
    tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13),
    reason="torch < 2.13 has no infinite norm_type in lp_pool")


@pytest.mark.parametrize("name, shape, args", [
    ("lp_pool1d", (2, 3, 9), (2.0, 3)), ("lp_pool1d", (2, 3, 9), (1.5, 2, 2, True)),
    ("lp_pool2d", (2, 3, 6, 7), (2, (2, 3))), ("lp_pool2d", (2, 3, 6, 7), (3.0, 2, 1, True)),
    pytest.param("lp_pool2d", (2, 3, 6, 7), (float("inf"), 2), marks=_TORCH_LP_POOL_INF),
    pytest.param("lp_pool2d", (3, 6, 7), (-float("inf"), 2), marks=_TORCH_LP_POOL_INF),
    ("lp_pool3d", (1, 2, 4, 5, 6), (2.0, 2)),
    ("local_response_norm", (2, 5, 7), (3,)), ("local_response_norm", (2, 6, 4, 5), (4, 1e-2, 0.6, 2.0)),
    ("local_response_norm", (1, 4, 2, 3, 3), (2,)),
])
def test_lp_pool_and_local_response_norm_match_torch(name, shape, args):
    """torch's composite forms over the library's pools and pad: values and the gradient of
    ``sum(w * out)`` against torch's, positive input (``x^p`` of a negative entry is NaN in both)."""
    x = np.abs(np.random.default_rng(7).standard_normal(shape)) + 0.1
    tx = torch.tensor(x, requires_grad=True)
    tout = getattr(TF, name)(tx, *args)
    w = np.random.default_rng(8).standard_normal(tout.shape)
    (tout * torch.tensor(w)).sum().backward()
    with jax.enable_x64(True):
        ours = getattr(JF, name)
        np.testing.assert_allclose(ours(jnp.asarray(x), *args), tout.detach().numpy(), rtol=1e-13)
        grad = jax.grad(lambda v: jnp.sum(ours(v, *args) * w))(jnp.asarray(x))
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_lp_pool_and_local_response_norm_refuse_what_torch_refuses():
    assert JF.local_response_norm(jnp.zeros((0, 4, 3)), 2).shape == (0, 4, 3)  # torch returns it as is
    with pytest.raises(ValueError, match="^local_response_norm: input must have 3 or more dimensions"):
        JF.local_response_norm(jnp.ones((2, 3)), 2)
    with pytest.raises(ValueError, match="^lp_pool2d: norm_type must be a non-zero real number"):
        JF.lp_pool2d(jnp.ones((1, 1, 4, 4)), 0, 2)


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_nanquantile_matches_torch(interpolation):
    x = np.random.default_rng(9).standard_normal((3, 6))
    x[0, [1, 4]], x[2, :] = np.nan, np.nan
    q = np.array([0.2, 0.5, 0.75])
    tx = torch.tensor(x, requires_grad=True)
    tout = torch.nanquantile(tx, torch.tensor(q), dim=1, keepdim=True, interpolation=interpolation)
    ct = np.random.default_rng(10).standard_normal(tout.shape)
    (tout * torch.tensor(ct)).sum().backward()
    with jax.enable_x64(True):
        fn = lambda v: jaxrules.torch.nanquantile(v, q, 1, True, interpolation=interpolation)  # noqa: E731
        np.testing.assert_allclose(fn(jnp.asarray(x)), tout.detach().numpy(), rtol=1e-14)
        np.testing.assert_allclose(jax.grad(lambda v: jnp.sum(fn(v) * ct))(jnp.asarray(x)), tx.grad.numpy(), rtol=1e-13)
    with pytest.raises(ValueError, match="^nanquantile: interpolation must be one of"):
        jaxrules.torch.nanquantile(jnp.asarray(x), 0.5, interpolation="inverted_cdf")



@pytest.mark.parametrize("kwargs", [{}, {"p": 2}, {"margin": 0.3}, {"weight": "w"},
                                    {"p": 2, "weight": "w", "reduction": "sum"}, {"reduction": "none"},
                                    {"size_average": False}, {"reduce": False}])
def test_multi_margin_loss_matches_torch(kwargs):
    """Values and gradients against torch's (including a hinge exactly at 0: derivative 0, as
    torch's), every ``p``, ``margin``, ``weight``, reduction and the legacy flags."""
    rng = np.random.default_rng(11)
    x, t, w = rng.standard_normal((5, 4)), np.array([0, 3, 1, 1, 2]), rng.random(4)
    x[0, 1] = x[0, 0] - kwargs.get("margin", 1.0)  # z = 0 at (0, 1)
    kw = {k: (w if v == "w" else v) for k, v in kwargs.items()}
    tx = torch.tensor(x, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's legacy-flag deprecation
        tout = TF.multi_margin_loss(tx, torch.tensor(t), **{k: torch.tensor(v) if k == "weight" else v
                                                             for k, v in kw.items()})
    ct = rng.standard_normal(tout.shape)
    (tout * torch.tensor(ct)).sum().backward()
    with jax.enable_x64(True):
        fn = lambda v: JF.multi_margin_loss(v, jnp.asarray(t), **kw)  # noqa: E731
        np.testing.assert_allclose(fn(jnp.asarray(x)), tout.detach().numpy(), rtol=1e-14)
        np.testing.assert_allclose(jax.grad(lambda v: jnp.sum(fn(v) * ct))(jnp.asarray(x)), tx.grad.numpy(),
                                   rtol=1e-13, atol=1e-16)


def test_multi_margin_loss_of_a_vector_and_its_refusals():
    for x, label in ((np.random.default_rng(12).standard_normal(5), 2), (np.array(0.7), 0)):  # a 0-d input: one class
        for target in (np.array(label), np.array([label])):
            for reduction in ("none", "mean"):
                want = TF.multi_margin_loss(torch.tensor(x), torch.tensor(target), reduction=reduction).numpy()
                got = JF.multi_margin_loss(jnp.asarray(x), jnp.asarray(target), reduction=reduction)
                assert got.shape == want.shape
                np.testing.assert_allclose(got, want, rtol=1e-6)
    m = jnp.ones((2, 3))
    with pytest.raises(ValueError, match=r"^multi_margin_loss: target must lie in \[0, 3\)"):
        JF.multi_margin_loss(m, jnp.asarray([0, 3]))
    with pytest.raises(ValueError, match="^multi_margin_loss: p must be 1 or 2"):
        JF.multi_margin_loss(m, jnp.asarray([0, 1]), p=3)
    with pytest.raises(ValueError, match="^multi_margin_loss: weight must be one-dimensional with 3 entries"):
        JF.multi_margin_loss(m, jnp.asarray([0, 1]), weight=jnp.ones(2))
    with pytest.raises(TypeError, match="^multi_margin_loss: target must hold integer class indices"):
        JF.multi_margin_loss(m, jnp.asarray([0.0, 1.0]))
    # an empty batch: the mean of nothing is NaN (torch 2.13 returns uninitialized memory)
    assert np.isnan(JF.multi_margin_loss(jnp.ones((0, 3)), jnp.zeros(0, jnp.int32)))
    # a traced out-of-range target: that example's loss is NaN outside jaxrules.checked
    out = jax.jit(lambda t: JF.multi_margin_loss(m, t, reduction="none"))(jnp.asarray([0, 7]))
    assert not np.isnan(out[0]) and np.isnan(out[1])


def _torch_value_and_grads(fn, args, ct_rng, diff=None):
    """torch's value of ``fn(*args)`` and the gradients of ``sum(value * ct)`` with respect to
    the floating arguments (or those listed in ``diff``); returns ``(value, grads, ct)``."""
    diff = [i for i, a in enumerate(args) if np.issubdtype(np.asarray(a).dtype, np.floating)] if diff is None else diff
    targs = [torch.tensor(np.asarray(a), requires_grad=i in diff) for i, a in enumerate(args)]
    out = fn(*targs)
    ct = ct_rng.standard_normal(tuple(out.shape))
    (out * torch.tensor(ct)).sum().backward()
    return out.detach().numpy(), [targs[i].grad.numpy() for i in diff], ct


def _assert_value_and_grads(fn, args, want, want_grads, ct, diff=None, rtol=1e-12):
    diff = [i for i, a in enumerate(args) if np.issubdtype(np.asarray(a).dtype, np.floating)] if diff is None else diff
    with jax.enable_x64(True):
        jargs = [jnp.asarray(a) for a in args]
        np.testing.assert_allclose(fn(*jargs), want, rtol=rtol, atol=1e-14)

        def loss(*d):
            full = list(jargs)
            for i, v in zip(diff, d):
                full[i] = v
            return jnp.sum(fn(*full) * ct)

        grads = jax.grad(loss, argnums=tuple(range(len(diff))))(*[jargs[i] for i in diff])
        for g, w in zip(grads, want_grads):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-14)


# torch 2.13 added F.linear_cross_entropy (the GPU machine has torch 2.11; CI pins 2.13).
_NO_TORCH_LCE = pytest.mark.skipif(not hasattr(TF, "linear_cross_entropy"),
                                   reason="this torch has no F.linear_cross_entropy (added in 2.13)")


@_NO_TORCH_LCE
@pytest.mark.parametrize("kwargs", [{}, {"reduction": "sum", "label_smoothing": 0.2}, {"reduction": "none"},
                                    {"weight": "cw", "ignore_index": 2}, {"linear_bias": "b"}])
def test_linear_cross_entropy_matches_torchs_function(kwargs):
    """torch 2.13's ``F.linear_cross_entropy`` (class indices, -100 ignored by default), by the
    fused head: values and the gradients of input, linear weight and bias."""
    rng = np.random.default_rng(20)
    x, w, b, cw = rng.standard_normal((6, 4)), rng.standard_normal((7, 4)), rng.standard_normal(7), rng.random(7)
    t = np.array([0, 1, kwargs.get("ignore_index", -100), 3, 6, 2])
    kw = {k: {"cw": cw, "b": b}.get(v, v) if isinstance(v, str) else v for k, v in kwargs.items()}
    with_bias = "linear_bias" in kw
    args = [x, w, t] + ([b] if with_bias else [])
    kw.pop("linear_bias", None)

    def torch_fn(x, w, t, *bias):
        tkw = {k: torch.tensor(v) if k == "weight" else v for k, v in kw.items()}
        return TF.linear_cross_entropy(x, w, t, linear_bias=bias[0] if bias else None, **tkw)

    def ours(x, w, t, *bias):
        return JF.linear_cross_entropy(x, w, t, linear_bias=bias[0] if bias else None, **kw)

    want, grads, ct = _torch_value_and_grads(torch_fn, args, rng)
    _assert_value_and_grads(ours, args, want, grads, ct)


@_NO_TORCH_LCE
def test_linear_cross_entropy_of_probabilities_and_a_vector_and_its_refusals():
    rng = np.random.default_rng(21)
    x, w = rng.standard_normal((5, 3)), rng.standard_normal((4, 3))
    probs = rng.dirichlet(np.ones(4), 5)
    want, grads, ct = _torch_value_and_grads(lambda a, b, p: TF.linear_cross_entropy(a, b, p), [x, w, probs], rng,
                                             diff=[0, 1])
    _assert_value_and_grads(lambda a, b, p: JF.linear_cross_entropy(a, b, p), [x, w, probs], want, grads, ct,
                            diff=[0, 1])
    want = TF.linear_cross_entropy(torch.tensor(x[0]), torch.tensor(w), torch.tensor(2)).item()
    with jax.enable_x64(True):
        assert float(JF.linear_cross_entropy(jnp.asarray(x[0]), jnp.asarray(w), jnp.asarray(2))) == pytest.approx(
            want, rel=1e-13)
    with pytest.raises(ValueError, match="linear_cross_entropy: input must be 1-D or 2-D"):
        JF.linear_cross_entropy(jnp.ones((2, 3, 3)), jnp.ones((4, 3)), jnp.zeros((2, 3), int))
    with pytest.raises(RuntimeError, match="dimensionality 1 or 2"):  # torch's rule, mirrored
        TF.linear_cross_entropy(torch.ones(2, 3, 3), torch.ones(4, 3), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="linear_weight must be"):
        JF.linear_cross_entropy(jnp.ones((2, 3)), jnp.ones((4, 3, 1)), jnp.zeros(2, int))
    with pytest.raises(ValueError, match="target must lie in"):
        JF.linear_cross_entropy(jnp.ones((2, 3)), jnp.ones((4, 3)), jnp.array([0, 4]))


@pytest.mark.parametrize("shape, reduction", [((3, 4), "none"), ((3, 4), "mean"), ((4,), "sum"), ((), "none"),
                                              ((0, 4), "sum")])
def test_multilabel_margin_loss_matches_torch(shape, reduction):
    """Values and gradients against torch's, with targets ended by -1, a repeated class (counted
    twice, as torch), no target, and a hinge exactly at 0 (derivative 0, torch's ``z > 0``)."""
    rng = np.random.default_rng(22)
    x = rng.standard_normal(shape)
    rows = [[3, 0, -1, 1], [0, 0, 2, 2], [-1, 1, 2, 3]]
    t = np.array(rows[: x.shape[0]] if len(shape) == 2 else rows[0] if shape else 0, dtype=np.int64).reshape(shape)
    if len(shape) == 2 and shape[0]:
        x[0, 2] = x[0, 3] - 1  # z = 1 - x[3] + x[2] = 0 for the target 3 and the class 2
    args = [x, t]
    want, grads, ct = _torch_value_and_grads(lambda a, b: TF.multilabel_margin_loss(a, b, reduction=reduction),
                                             args, rng)
    _assert_value_and_grads(lambda a, b: JF.multilabel_margin_loss(a, b, reduction=reduction), args, want, grads,
                            ct)


@pytest.mark.parametrize("bad", [[4, 0, -1, 1], [3, -2, 1, 1], [-1, 5, 5, 5]])
def test_multilabel_margin_loss_target_out_of_range_raises_and_is_nan_under_jit(bad):
    """torch checks every entry (also after the -1) against ``[-1, C)``."""
    x = jnp.array([0.1, 0.2, 0.4, 0.8])
    with pytest.raises(RuntimeError, match="out of range"):
        TF.multilabel_margin_loss(torch.tensor(np.asarray(x)), torch.tensor(bad))
    with pytest.raises(ValueError, match=r"multilabel_margin_loss: target must lie in \[-1, 4\)"):
        JF.multilabel_margin_loss(x, jnp.array(bad))
    assert np.isnan(jax.jit(JF.multilabel_margin_loss)(x, jnp.array(bad)))
    with pytest.raises(TypeError, match="integer class indices"):
        JF.multilabel_margin_loss(x, jnp.zeros(4))
    with pytest.raises(ValueError, match="target of its shape"):
        JF.multilabel_margin_loss(x, jnp.zeros(3, int))


@pytest.mark.parametrize("n, shape, kernel, output_size", [
    (1, (2, 3, 9), 2, None), (2, (2, 3, 4, 6), 2, None), (2, (3, 5, 5), 2, (5, 5)),
    (2, (1, 2, 5, 4), 2, (1, 2, 5, 4)), (3, (1, 2, 4, 4, 5), 2, (4, 4, 5))])
def test_max_unpool_matches_torch(n, shape, kernel, output_size):
    """``max_unpool*d`` of ``max_pool*d``'s values and indices: torch's values and gradients
    (input and the indices' positions), batched and unbatched, with an ``output_size`` (also
    naming the batch and channel axes) or torch's default."""
    rng = np.random.default_rng(23)
    x = torch.tensor(rng.standard_normal(shape))
    pool, unpool = getattr(TF, f"max_pool{n}d"), f"max_unpool{n}d"
    values, indices = pool(x, kernel, return_indices=True)
    want, grads, ct = _torch_value_and_grads(
        lambda v, i: getattr(TF, unpool)(v, i, kernel, output_size=output_size), [values.numpy(), indices.numpy()],
        rng)
    _assert_value_and_grads(lambda v, i: getattr(JF, unpool)(v, i, kernel, output_size=output_size),
                            [values.numpy(), indices.numpy()], want, grads, ct)
    ours_values, ours_indices = getattr(JF, f"max_pool{n}d_with_indices")(jnp.asarray(x.numpy()), kernel)
    np.testing.assert_array_equal(ours_indices, indices.numpy())
    np.testing.assert_array_equal(ours_values, values.numpy())


def test_max_unpool_of_a_repeated_index_keeps_one_value_and_differentiates_it_alone():
    """Overlapping windows can choose one position twice: the output holds one of the two
    (equal) values, so its derivative reaches one of them; torch's backward gathers the gradient
    into both, counting that position twice (a deliberate difference, docs/differences.md)."""
    x = np.array([[[1.0, 5.0, 2.0, 0.0]]])
    values, indices = TF.max_pool1d(torch.tensor(x), 3, stride=1, return_indices=True)
    assert indices.tolist() == [[[1, 1]]]
    want = TF.max_unpool1d(values, indices, 3, stride=1).numpy()
    got = JF.max_unpool1d(jnp.asarray(values.numpy()), jnp.asarray(indices.numpy()), 3, stride=1)
    np.testing.assert_array_equal(got, want)
    grad = jax.grad(lambda v: jnp.sum(JF.max_unpool1d(v, jnp.asarray(indices.numpy()), 3, stride=1)))(
        jnp.asarray(values.numpy()))
    assert sorted(np.asarray(grad).ravel().tolist()) == [0.0, 1.0]
    tv = values.clone().requires_grad_(True)
    TF.max_unpool1d(tv, indices, 3, stride=1).sum().backward()
    assert tv.grad.numpy().ravel().tolist() == [1.0, 1.0]  # torch's: the one output counted twice


def test_max_unpool_refuses_what_torch_refuses_and_is_nan_under_jit():
    values, indices = TF.max_pool2d(torch.randn(1, 1, 4, 4, dtype=torch.float64), 2, return_indices=True)
    v, i = jnp.asarray(values.numpy()), jnp.asarray(indices.numpy())
    with pytest.raises(RuntimeError, match="invalid max index"):
        TF.max_unpool2d(values, indices + 12, 2)
    with pytest.raises(ValueError, match=r"max_unpool2d: indices must lie in \[0, 16\)"):
        JF.max_unpool2d(v, i + 12, 2)
    out = jax.jit(lambda a, b: JF.max_unpool2d(a, b, 2))(v, i + 12)
    assert out.shape == (1, 1, 4, 4) and np.isnan(out).all()
    with pytest.raises(ValueError, match="between 2 and 6"):
        TF.max_unpool2d(values, indices, 2, output_size=(7, 7))
    with pytest.raises(ValueError, match=r"max_unpool2d: invalid output_size \(7, 7\) \(dim 0 must be between 2 and 6"):
        JF.max_unpool2d(v, i, 2, output_size=(7, 7))
    with pytest.raises(ValueError, match="indices must have input's shape"):
        JF.max_unpool2d(v, i[..., :1], 2)
    with pytest.raises(TypeError, match="indices must be integers"):
        JF.max_unpool2d(v, i.astype(float), 2)
    with pytest.raises(ValueError, match="output_size should be a sequence containing 1 or 3 elements"):
        TF.max_unpool2d(values, indices, (2,), output_size=(4, 4))  # torch reads (2,) as one spatial axis
    with pytest.raises(ValueError, match="max_unpool2d: kernel_size must be an int >= 1 or 2 of them"):
        JF.max_unpool2d(v, i, (2,), output_size=(4, 4))


@pytest.mark.parametrize("shape, groups", [((2, 6, 3, 3), 3), ((2, 6, 5), 2), ((1, 4, 2, 2, 2), 4), ((3, 5, 2), 1)])
def test_channel_shuffle_matches_torch_and_its_gradient_is_the_inverse_permutation(shape, groups):
    rng = np.random.default_rng(24)
    x = rng.standard_normal(shape)
    want, grads, ct = _torch_value_and_grads(lambda a: TF.channel_shuffle(a, groups), [x], rng)
    _assert_value_and_grads(lambda a: JF.channel_shuffle(a, groups), [x], want, grads, ct)
    assert JF.native_channel_shuffle is JF.channel_shuffle


@pytest.mark.parametrize("shape, groups, match", [((2, 6, 3), 4, "divisible by groups"), ((2, 6, 3), 0, "positive"),
                                                  ((2, 6), 3, "more than 2 dimensions")])
def test_channel_shuffle_refuses_what_torch_refuses(shape, groups, match):
    with pytest.raises(RuntimeError):
        TF.channel_shuffle(torch.ones(shape), groups)
    with pytest.raises(ValueError, match=f"channel_shuffle: .*{match}"):
        JF.channel_shuffle(jnp.ones(shape), groups)


@pytest.mark.parametrize("name, kwargs", [("upsample", {"scale_factor": 2, "mode": "bilinear",
                                                        "align_corners": False}),
                                          ("upsample", {"size": (5, 7)}), ("upsample_nearest", {"scale_factor": 3}),
                                          ("upsample_bilinear", {"size": (5, 7)})])
def test_deprecated_upsample_functions_warn_and_equal_torchs(name, kwargs):
    """``upsample_bilinear`` aligns corners, as torch's."""
    rng = np.random.default_rng(25)
    x = rng.standard_normal((2, 3, 4, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want, grads, ct = _torch_value_and_grads(lambda a: getattr(TF, name)(a, **kwargs), [x], rng)
    with pytest.warns(UserWarning, match=f"{name} is deprecated"):
        _assert_value_and_grads(lambda a: getattr(JF, name)(a, **kwargs), [x], want, grads, ct)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_adaptive_max_pool_with_indices_matches_torch(n):
    x = np.random.default_rng(26).standard_normal((2, 3) + (7,) * n)
    want = getattr(TF, f"adaptive_max_pool{n}d_with_indices")(torch.tensor(x), 3)
    got = getattr(JF, f"adaptive_max_pool{n}d_with_indices")(jnp.asarray(x), 3)
    np.testing.assert_array_equal(got[0], want[0].numpy())
    np.testing.assert_array_equal(got[1], want[1].numpy())


@pytest.mark.parametrize("kwargs", [{}, {"swap": True}, {"margin": 0.5, "reduction": "none"},
                                    {"distance": "cosine", "reduction": "sum"}])
def test_triplet_margin_with_distance_loss_matches_torch(kwargs):
    """Values and gradients, with a hinge exactly at 0 (torch's ``clamp_min`` passes the
    gradient there) and a user distance function."""
    rng = np.random.default_rng(27)
    a, p, n = (rng.standard_normal((4, 3)) for _ in range(3))
    kw = dict(kwargs)
    cosine = kw.pop("distance", None) == "cosine"
    if not cosine and not kw.get("swap"):  # a zero hinge at row 0: d(a, n) = d(a, p) + margin
        a[0], p[0] = 0.0, [0.6, 0.8, 0.0]
        n[0] = [1.0 + kw.get("margin", 1.0) + 1e-6, 0.0, 0.0]  # pairwise_distance adds eps = 1e-6

    def torch_fn(x, y, z):
        dist = (lambda u, v: 1 - TF.cosine_similarity(u, v)) if cosine else None
        return TF.triplet_margin_with_distance_loss(x, y, z, distance_function=dist, **kw)

    def ours(x, y, z):
        dist = (lambda u, v: 1 - JF.cosine_similarity(u, v)) if cosine else None
        return JF.triplet_margin_with_distance_loss(x, y, z, distance_function=dist, **kw)

    want, grads, ct = _torch_value_and_grads(torch_fn, [a, p, n], rng)
    _assert_value_and_grads(ours, [a, p, n], want, grads, ct)


def test_triplet_margin_with_distance_loss_refuses_what_torch_refuses():
    a = jnp.ones((3, 4))
    with pytest.raises(ValueError, match="margin must be greater than 0"):
        JF.triplet_margin_with_distance_loss(a, a, a, margin=0.0)
    with pytest.raises(ValueError, match="same number of dimensions"):
        JF.triplet_margin_with_distance_loss(a, a[0], a)


def test_rrelu_evaluates_as_torch_and_trains_with_random_slopes():
    rng = np.random.default_rng(28)
    x = rng.standard_normal((5, 6))
    x[0, 0] = 0.0
    want, grads, ct = _torch_value_and_grads(lambda v: TF.rrelu(v, 0.1, 0.3), [x], rng)
    _assert_value_and_grads(lambda v: JF.rrelu(v, 0.1, 0.3), [x], want, grads, ct)
    with jax.enable_x64(True):
        xj, key = jnp.asarray(x), jax.random.PRNGKey(3)
        out = JF.rrelu(xj, 0.1, 0.3, training=True, key=key)
        slope = np.asarray(jax.grad(lambda v: jnp.sum(JF.rrelu(v, 0.1, 0.3, training=True, key=key)))(xj))
    positive = x > 0
    np.testing.assert_array_equal(np.asarray(out)[positive], x[positive])
    np.testing.assert_array_equal(slope[positive], 1.0)
    assert np.all((slope[~positive] >= 0.1) & (slope[~positive] <= 0.3)) and np.unique(slope[~positive]).size > 1
    np.testing.assert_allclose(np.asarray(out)[~positive], x[~positive] * slope[~positive], rtol=1e-15)
    with pytest.raises(ValueError, match="rrelu: lower .* must be less than or equal to upper"):
        JF.rrelu(xj, 0.5, 0.1)
    with pytest.raises(ValueError, match="key"):
        JF.rrelu(xj, training=True)


def test_gumbel_softmax_samples_and_the_straight_through_gradient():
    """Soft samples are distributions; hard ones are the one-hot of the soft sample's argmax with
    the soft sample's gradient (torch's straight-through estimator); ``eps`` warns as torch."""
    logits = jnp.asarray(np.random.default_rng(29).standard_normal((8, 5)))
    key = jax.random.PRNGKey(4)
    soft = JF.gumbel_softmax(logits, tau=0.5, key=key)
    hard = JF.gumbel_softmax(logits, tau=0.5, hard=True, key=key)
    np.testing.assert_allclose(jnp.sum(soft, axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(hard, jax.nn.one_hot(jnp.argmax(soft, axis=-1), 5))
    w = jnp.arange(5.0)
    grad_soft = jax.grad(lambda v: jnp.sum(JF.gumbel_softmax(v, tau=0.5, key=key) * w))(logits)
    grad_hard = jax.grad(lambda v: jnp.sum(JF.gumbel_softmax(v, tau=0.5, hard=True, key=key) * w))(logits)
    np.testing.assert_allclose(grad_hard, grad_soft, rtol=1e-6)
    along0 = JF.gumbel_softmax(logits, hard=True, dim=0, key=key)
    np.testing.assert_array_equal(jnp.sum(along0, axis=0), 1.0)
    with pytest.warns(UserWarning, match="eps"):
        JF.gumbel_softmax(logits, eps=1e-3, key=key)
    with pytest.raises(ValueError, match="key"):
        JF.gumbel_softmax(logits)


@pytest.mark.parametrize("name", ["alpha_dropout", "feature_alpha_dropout"])
def test_alpha_dropout_keeps_selus_mean_and_variance_with_torchs_affine_map(name):
    """Every entry is ``a x + alpha a p`` (kept) or ``alpha a (p - 1)`` (dropped), whole channels
    at once for the feature form, with torch's ``a``; mean 0 and variance 1 stay so; the
    derivative is ``a`` where kept, 0 where dropped; identity in evaluation, zeros at p = 1."""
    p, alpha = 0.2, 1.7580993408473766
    a = 1 / math.sqrt((alpha**2 * p + 1) * (1 - p))
    fn = getattr(JF, name)
    with jax.enable_x64(True):
        x = jnp.asarray(np.random.default_rng(30).standard_normal((400, 50, 6)))
        key = jax.random.PRNGKey(5)
        out = np.asarray(fn(x, p, training=True, key=key))
        grad = np.asarray(jax.grad(lambda v: jnp.sum(fn(v, p, training=True, key=key)))(x))
    # torch's own outputs take exactly these two forms (its draws differ from ours).
    tx = torch.tensor(np.asarray(x))
    tout = getattr(TF, name)(tx, p, training=True).numpy()
    t_kept = np.isclose(tout, a * tx.numpy() + alpha * a * p, rtol=0, atol=1e-12)
    assert np.all(t_kept | np.isclose(tout, alpha * a * (p - 1), rtol=0, atol=1e-12)) and 0 < t_kept.mean() < 1
    kept = np.isclose(out, a * np.asarray(x) + alpha * a * p, rtol=0, atol=1e-12)
    dropped = np.isclose(out, alpha * a * (p - 1), rtol=0, atol=1e-12)
    assert np.all(kept | dropped) and abs(dropped.mean() - p) < 0.02
    np.testing.assert_allclose(grad, np.where(kept, a, 0.0), rtol=1e-14)
    if name == "feature_alpha_dropout":
        assert np.all(kept == kept[:, :, :1])  # one draw per channel of each example
    assert abs(out.mean()) < 0.02 and abs(out.std() - 1) < 0.02
    x = jnp.array([[1.0, np.nan], [2.0, 3.0]])
    np.testing.assert_array_equal(fn(x, 0.5), x)  # training=False by default, as torch's
    np.testing.assert_array_equal(fn(x, 1.0, training=True), [[0.0, np.nan], [0.0, 0.0]])
    torch_p1 = getattr(TF, name)(torch.tensor(np.asarray(x)), 1.0, training=True).numpy()
    np.testing.assert_array_equal(torch_p1, [[0.0, np.nan], [0.0, 0.0]])
    with pytest.raises(ValueError, match="between 0 and 1"):
        fn(x, 1.5, training=True, key=key)
    with pytest.raises(ValueError, match="key"):
        fn(x, 0.5, training=True)


def test_feature_alpha_dropout_needs_a_channel_axis_as_torch():
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        TF.feature_alpha_dropout(torch.ones(4), 0.5, True)
    with pytest.raises(ValueError, match="feature_alpha_dropout: feature dropout requires at least 2 dimensions"):
        JF.feature_alpha_dropout(jnp.ones(4), 0.5, True, key=jax.random.PRNGKey(0))


@_NO_TORCH_LCE
def test_linear_cross_entropy_k_dimensional_weight_and_probability_rules_as_torch():
    """A ``(C, d, in_features)`` weight gives logits ``(N, C, d)`` (a K-dimensional loss, torch's
    reference path); a target of the logits' shape is probabilities, with which ``ignore_index``
    is refused; an unbatched input with a K-dimensional weight is refused."""
    rng = np.random.default_rng(31)
    x, w, b = rng.standard_normal((5, 3)), rng.standard_normal((4, 2, 3)), rng.standard_normal((4, 2))
    t = np.array([[0, 3], [1, 1], [2, -100], [3, 0], [0, 2]])
    fn_t = lambda a, c, bias: TF.linear_cross_entropy(a, c, torch.tensor(t), linear_bias=bias)  # noqa: E731
    want, grads, ct = _torch_value_and_grads(fn_t, [x, w, b], rng)
    _assert_value_and_grads(lambda a, c, bias: JF.linear_cross_entropy(a, c, jnp.asarray(t), linear_bias=bias),
                            [x, w, b], want, grads, ct)
    probs = rng.dirichlet(np.ones(4), 5)
    with pytest.raises(RuntimeError, match="ignore_index cannot be specified"):
        TF.linear_cross_entropy(torch.tensor(x), torch.tensor(w[:, 0]), torch.tensor(probs), ignore_index=1)
    with pytest.raises(ValueError, match="linear_cross_entropy: ignore_index cannot be given when target holds"):
        JF.linear_cross_entropy(jnp.asarray(x), jnp.asarray(w[:, 0]), jnp.asarray(probs), ignore_index=1)
    with pytest.raises(ValueError, match="needs batched"):
        JF.linear_cross_entropy(jnp.asarray(x[0]), jnp.asarray(w), jnp.asarray(t[0]))
    with pytest.raises(ValueError, match="linear_bias must have shape"):
        JF.linear_cross_entropy(jnp.asarray(x), jnp.asarray(w[:, 0]), jnp.zeros(5, int), linear_bias=jnp.ones(3))


@pytest.mark.parametrize("pad", [0, 2, -1])
def test_conv_tbc_matches_torch_in_value_and_gradients(pad):
    """Time-batch-channel convolution: torch's values and the gradients of input, weight and
    bias, a negative pad cropping as torch's."""
    rng = np.random.default_rng(31)
    x, w, b = rng.standard_normal((7, 2, 3)), rng.standard_normal((3, 3, 4)), rng.standard_normal(4)
    leaves = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    theirs = TF.conv_tbc(*leaves, pad)
    ct = rng.standard_normal(tuple(theirs.shape))
    t_grads = torch.autograd.grad(theirs, leaves, torch.tensor(ct))
    ours, pullback = jax.vjp(lambda *a: JF.conv_tbc(*a, pad), *(jnp.asarray(a) for a in (x, w, b)))
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-12, atol=1e-12)
    for got, want in zip(pullback(jnp.asarray(ct)), t_grads, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("shapes", "pad", "error", "words"), [
    (((7, 2, 3), (3, 2, 4), (4,)), 0, ValueError, "channels"),
    (((7, 2, 3), (3, 3, 4), (5,)), 0, ValueError, "bias"),
    (((2, 2, 3), (9, 3, 4), (4,)), 0, ValueError, "does not fit"),
    (((7, 2, 3), (3, 3, 4), (4,)), 0.5, TypeError, "pad"),
    (((7, 3), (3, 3, 4), (4,)), 0, ValueError, "3-D"),
])
def test_conv_tbc_refusals_name_the_op_and_the_argument(shapes, pad, error, words):
    """Shapes torch refuses (its messages name the dims); a kernel longer than the padded input
    leaves a negative length (torch: 'negative dimension')."""
    with pytest.raises(error, match=f"conv_tbc: .*{words}"):
        JF.conv_tbc(*(jnp.zeros(s) for s in shapes), pad)


@pytest.mark.parametrize(("spatial", "shape", "kernel", "kwargs"), [
    (2, (2, 3, 9, 13), (2, 3), {"output_size": (4, 5)}),
    (2, (2, 3, 9, 13), 3, {"output_ratio": (0.5, 0.7)}),
    (2, (3, 8, 8), (2, 2), {"output_size": 1}),  # unbatched
    (2, (1, 2, 6, 6), (2, 2), {"output_size": 5}),  # overlapping windows: their cotangents add
    (3, (2, 2, 7, 9, 11), (2, 2, 3), {"output_size": (3, 4, 5)}),
    (3, (2, 6, 7, 8), 2, {"output_ratio": 0.5}),  # unbatched
])
def test_fractional_max_pool_matches_torch_given_its_samples(spatial, shape, kernel, kwargs):
    """Values, indices and input gradients equal torch's for the same ``_random_samples``;
    ties, a NaN and a window of -inf follow torch's scan (first maximum, the last NaN, the
    window's first entry)."""
    rng = np.random.default_rng(41)
    x = np.round(rng.standard_normal(shape), 1)  # ties
    x.reshape(-1)[5] = np.nan
    x.reshape(-1)[-12:] = -np.inf
    batch = shape[:2] if len(shape) == spatial + 2 else (1, shape[0])
    samples = rng.uniform(0, 1, (*batch, spatial))
    t_fn = getattr(TF, f"fractional_max_pool{spatial}d")
    tx = torch.tensor(x, requires_grad=True)
    tv, ti = t_fn(tx, kernel, return_indices=True, _random_samples=torch.tensor(samples), **kwargs)
    ct = rng.standard_normal(tuple(tv.shape))
    (t_grad,) = torch.autograd.grad(tv, tx, torch.tensor(ct))
    j_fn = getattr(JF, f"fractional_max_pool{spatial}d")

    def f(a):
        return j_fn(a, kernel, return_indices=True, _random_samples=jnp.asarray(samples), **kwargs)

    values, indices = f(jnp.asarray(x))
    np.testing.assert_array_equal(indices, ti.numpy())
    np.testing.assert_array_equal(values, tv.detach().numpy())
    _, pullback = jax.vjp(lambda a: f(a)[0], jnp.asarray(x))
    np.testing.assert_array_equal(pullback(jnp.asarray(ct))[0], t_grad.numpy())


def test_fractional_max_pool_draws_its_samples_from_a_key():
    x = jnp.asarray(np.random.default_rng(43).standard_normal((2, 3, 10, 10)))
    with pytest.raises(ValueError, match="fractional_max_pool2d: .*key"):
        JF.fractional_max_pool2d(x, 2, output_size=4)
    a = JF.fractional_max_pool2d(x, 2, output_size=4, return_indices=True, key=jax.random.key(0))
    b = JF.fractional_max_pool2d(x, 2, output_size=4, return_indices=True, key=jax.random.key(0))
    c = JF.fractional_max_pool2d(x, 2, output_size=4, return_indices=True, key=jax.random.key(1))
    np.testing.assert_array_equal(a[1], b[1])
    assert a[0].shape == (2, 3, 4, 4) and np.any(np.asarray(a[1]) != np.asarray(c[1]))
    out = jax.jit(lambda v, k: JF.fractional_max_pool2d(v, 2, output_size=4, key=k))(x, jax.random.key(0))
    np.testing.assert_array_equal(out, a[0])


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"output_size": 4, "output_ratio": 0.5}, "exactly one"),
    ({}, "exactly one"),
    ({"output_size": 7}, "does not fit"),  # torch: "pool height 2 too large relative to input height 7"
    ({"output_ratio": 1.5}, "output_ratio"),
    ({"output_size": 4, "_random_samples": np.zeros((2, 3, 3))}, "_random_samples"),
])
def test_fractional_max_pool_refusals_name_the_op_and_the_argument(kwargs, words):
    x = jnp.zeros((2, 3, 7, 7))
    with pytest.raises(ValueError, match=f"fractional_max_pool2d: .*{words}"):
        JF.fractional_max_pool2d(x, 2, key=jax.random.key(0),
                                 **{k: jnp.asarray(v) if k == "_random_samples" else v for k, v in kwargs.items()})


def test_conv_tbc_of_no_output_steps_is_empty_as_torchs():
    x, w, b = np.ones((3, 2, 3)), np.ones((4, 3, 5)), np.ones(5)
    theirs = TF.conv_tbc(*(torch.tensor(a) for a in (x, w, b)))
    ours = JF.conv_tbc(*(jnp.asarray(a) for a in (x, w, b)))
    assert ours.shape == tuple(theirs.shape) == (0, 2, 5)


def test_fractional_max_pool_half_precision_starts_round_as_torchs():
    """torch computes the window starts in the samples' dtype, each step rounded: bfloat16 and
    float16 give its indices (a float32 chain would differ at many starts)."""
    rng = np.random.default_rng(47)
    for jdt, tdt in ((jnp.bfloat16, torch.bfloat16), (jnp.float16, torch.float16)):
        for _ in range(10):
            u, x = rng.uniform(0, 1, (1, 1, 2)), rng.standard_normal((1, 1, 1, 600))
            _, theirs = TF.fractional_max_pool2d(torch.tensor(x).to(tdt), (1, 1), output_size=(1, 400),
                                                 return_indices=True, _random_samples=torch.tensor(u).to(tdt))
            _, ours = JF.fractional_max_pool2d(jnp.asarray(x, jdt), (1, 1), output_size=(1, 400), return_indices=True,
                                               _random_samples=jnp.asarray(u, jdt))
            np.testing.assert_array_equal(ours, theirs.numpy())
