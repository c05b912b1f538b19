"""``jaxrules.torch.nn.functional.multi_head_attention_forward`` against torch 2.13 (float64,
CPU): outputs, attention weights and the gradients of every input and weight, over its options
(packed and separate projections, biases, ``bias_k``/``bias_v``, ``add_zero_attn``, boolean and
float masks of each shape, static keys/values, ``need_weights``, ``is_causal``, one sequence),
dropout's statistics, and refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jaxrules.torch.nn.functional as JF

RNG = np.random.default_rng(5)
L, S, N, E, H = 4, 5, 3, 8, 2


def _config(name):
    """(positional args after query, key, value, keywords) of torch's signature, float64."""
    w = RNG.standard_normal((3 * E, E)) / 3
    b = RNG.standard_normal(3 * E) / 3
    wo, bo = RNG.standard_normal((E, E)) / 3, RNG.standard_normal(E) / 3
    bk, bv = RNG.standard_normal((1, 1, E)), RNG.standard_normal((1, 1, E))
    kpm = np.zeros((N, S), bool)
    kpm[0, -2:], kpm[2, 0] = True, True
    causal = np.triu(np.ones((L, S), bool), 1)
    base = dict(in_proj_weight=w, in_proj_bias=b, bias_k=None, bias_v=None, add_zero_attn=False,
                out_proj_weight=wo, out_proj_bias=bo)
    kw = {}
    if name == "plain":
        pass
    elif name == "no biases":
        base.update(in_proj_bias=None, out_proj_bias=None)
    elif name == "bias_kv zero_attn":
        base.update(bias_k=bk, bias_v=bv, add_zero_attn=True)
        kw = dict(key_padding_mask=np.where(kpm, -np.inf, 0.0), attn_mask=RNG.standard_normal((L, S)))
    elif name == "bool masks":
        kw = dict(key_padding_mask=kpm, attn_mask=causal)
    elif name == "float masks 3d":
        kw = dict(key_padding_mask=np.where(kpm, -1e9, 0.0), attn_mask=RNG.standard_normal((N * H, L, S)))
    elif name == "separate":
        kw = dict(use_separate_proj_weight=True, q_proj_weight=w[:E], k_proj_weight=RNG.standard_normal((E, 6)) / 3,
                  v_proj_weight=RNG.standard_normal((E, 7)) / 3)
        base.update(in_proj_weight=None)
    elif name == "causal hint":
        kw = dict(attn_mask=np.triu(np.ones((L, S), bool), 1), is_causal=True)
    return base, kw


def _inputs(name):
    q, k, v = RNG.standard_normal((L, N, E)), RNG.standard_normal((S, N, E)), RNG.standard_normal((S, N, E))
    if name == "separate":
        k, v = RNG.standard_normal((S, N, 6)), RNG.standard_normal((S, N, 7))
    return q, k, v


_DIFFERENTIABLE = ("in_proj_weight", "in_proj_bias", "bias_k", "bias_v", "out_proj_weight", "out_proj_bias",
                   "q_proj_weight", "k_proj_weight", "v_proj_weight")


def _run(lib, q, k, v, base, kw, need_weights, average=True):
    def wrap(a):
        if a is None or isinstance(a, bool):
            return a
        return torch.tensor(a) if lib is torch else jnp.asarray(a)

    f = TF.multi_head_attention_forward if lib is torch else JF.multi_head_attention_forward
    order = ("in_proj_weight", "in_proj_bias", "bias_k", "bias_v", "add_zero_attn")
    args = [wrap(base[n]) for n in order] + [0.0, wrap(base["out_proj_weight"]), wrap(base["out_proj_bias"])]
    return f(wrap(q), wrap(k), wrap(v), E, H, *args, training=False, need_weights=need_weights,
             average_attn_weights=average, **{n: wrap(a) for n, a in kw.items()})


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("name", ["plain", "no biases", "bias_kv zero_attn", "bool masks", "float masks 3d",
                                  "separate", "causal hint"])
def test_outputs_weights_and_gradients_match_torch(name, need_weights):
    base, kw = _config(name)
    q, k, v = _inputs(name)
    theirs, t_weights = _run(torch, q, k, v, base, kw, need_weights)
    ours, o_weights = _run(jnp, q, k, v, base, kw, need_weights)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-10, atol=1e-12)
    if need_weights:
        np.testing.assert_allclose(o_weights, t_weights.numpy(), rtol=1e-10, atol=1e-12)
    else:
        assert o_weights is None and t_weights is None
    ct = RNG.standard_normal(theirs.shape)
    names = [n for n in _DIFFERENTIABLE if base.get(n, kw.get(n)) is not None]

    def pack(lib, values):
        b, k_ = dict(base), dict(kw)
        for n, a in zip(names, values, strict=True):
            (b if n in b else k_)[n] = a
        return b, k_

    t_leaves = [torch.tensor(a, requires_grad=True) for a in (q, k, v, *[base.get(n, kw.get(n)) for n in names])]
    tb, tk = pack(torch, t_leaves[3:])
    f = TF.multi_head_attention_forward
    order = ("in_proj_weight", "in_proj_bias", "bias_k", "bias_v", "add_zero_attn")
    t_out, _ = f(*t_leaves[:3], E, H, *[tb[n] if not isinstance(tb[n], np.ndarray) else torch.tensor(tb[n])
                                       for n in order], 0.0, tb["out_proj_weight"], tb["out_proj_bias"],
                 training=False, need_weights=need_weights,
                 **{n: torch.tensor(a) if isinstance(a, np.ndarray) else a for n, a in tk.items()})
    t_grads = torch.autograd.grad(t_out, [x for x in t_leaves], torch.tensor(ct))

    def ours_fn(*leaves):
        b, k_ = pack(jnp, leaves[3:])
        return _run(jnp, *leaves[:3], b, k_, need_weights)[0]

    _, pullback = jax.vjp(ours_fn, *[jnp.asarray(x.detach().numpy()) for x in t_leaves])
    for got, want in zip(pullback(jnp.asarray(ct)), t_grads, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-9, atol=1e-11)


def test_one_sequence_per_head_weights_and_static_keys():
    base, _ = _config("plain")
    q, k, v = _inputs("plain")
    theirs, t_w = _run(torch, q[:, 0], k[:, 0], v[:, 0], base, {}, True, average=False)
    ours, o_w = _run(jnp, q[:, 0], k[:, 0], v[:, 0], base, {}, True, average=False)
    assert ours.shape == (L, E) and o_w.shape == (H, L, S)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-10)
    np.testing.assert_allclose(o_w, t_w.numpy(), rtol=1e-10)
    static = dict(static_k=RNG.standard_normal((N * H, 6, E // H)), static_v=RNG.standard_normal((N * H, 6, E // H)))
    theirs, t_w = _run(torch, q, k, v, base, static, True)
    ours, o_w = _run(jnp, q, k, v, base, static, True)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-10)
    np.testing.assert_allclose(o_w, t_w.numpy(), rtol=1e-10)


def test_dropout_needs_a_key_and_keeps_the_expectation():
    base, _ = _config("plain")
    q, k, v = (jnp.asarray(a) for a in _inputs("plain"))
    args = (E, H, *(jnp.asarray(base[n]) for n in ("in_proj_weight", "in_proj_bias")), None, None, False, 0.5,
            jnp.asarray(base["out_proj_weight"]), jnp.asarray(base["out_proj_bias"]))
    with pytest.raises((ValueError, TypeError), match="key"):
        JF.multi_head_attention_forward(q, k, v, *args)
    per_head = dict(average_attn_weights=False)
    clean = JF.multi_head_attention_forward(q, k, v, *args, training=False, **per_head)[1]
    dropped = jax.vmap(lambda key: JF.multi_head_attention_forward(q, k, v, *args, dropout_key=key, **per_head)[1])(
        jax.random.split(jax.random.key(0), 4000))
    assert float(jnp.mean(dropped == 0)) == pytest.approx(0.5, abs=0.02)
    np.testing.assert_allclose(jnp.mean(dropped, 0), clean, atol=0.06)


@pytest.mark.parametrize(("change", "words"), [
    (dict(embed_dim_to_check=7), "embedding dimension"),
    (dict(num_heads=3), "num_heads"),
    (dict(attn_mask=np.zeros((L, S + 1))), "attn_mask"),
    (dict(key_padding_mask=np.zeros((N, S + 1), bool)), "key_padding_mask"),
    (dict(is_causal=True), "is_causal"),
    (dict(attn_mask=np.zeros((L, S), np.int32)), "attn_mask"),
    (dict(bias_k=np.zeros((1, 1, E))), "bias_k"),
    (dict(attn_mask=np.zeros((L, S), np.float32)), "dtype"),  # torch: 'Input dtypes must be the same'
])
def test_refusals_name_the_op_and_the_argument(change, words):  # torch: AssertionError / RuntimeError
    base, _ = _config("plain")
    q, k, v = (jnp.asarray(a) for a in _inputs("plain"))
    args = dict(embed_dim_to_check=E, num_heads=H, in_proj_weight=jnp.asarray(base["in_proj_weight"]),
                in_proj_bias=jnp.asarray(base["in_proj_bias"]), bias_k=None, bias_v=None, add_zero_attn=False,
                dropout_p=0.0, out_proj_weight=jnp.asarray(base["out_proj_weight"]),
                out_proj_bias=jnp.asarray(base["out_proj_bias"]), training=False)
    args.update(change)
    with pytest.raises((ValueError, TypeError), match=words):
        JF.multi_head_attention_forward(q, k, v, **args)


def test_masks_of_two_types_warn_as_torch():
    base, _ = _config("plain")
    q, k, v = _inputs("plain")
    kw = dict(key_padding_mask=np.zeros((N, S), bool), attn_mask=np.zeros((L, S)))
    with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask"):
        _run(torch, q, k, v, base, kw, True)
    with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask"):
        _run(jnp, q, k, v, base, kw, True)
