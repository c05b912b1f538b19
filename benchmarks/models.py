"""Whole-model training steps, jaxrules' namespaces vs plain JAX, side by side in one process.

Each model is written once, as functions of ``(params, batch)`` that take the namespaces as the
keyword arguments ``np_`` and ``nn_``; the jaxrules side runs them with ``jaxrules.numpy`` /
``jaxrules.nn``, the plain side with ``jax.numpy`` / ``PLAIN_NN``: ``jax.nn`` plus the torch
functions jax.nn lacks, written as a JAX user writes them (jax.numpy / lax, JAX's autodiff):

* ``layer_norm``, ``batch_norm`` (training mode, batch statistics), ``group_norm``: statistics in
  float32 for bfloat16 input, ``((x - mean) * rsqrt(var + eps) * w + b)`` in float32, cast back to
  x's dtype (jaxrules' XLA formulas compute the same);
* ``conv2d`` (``lax.conv_general_dilated``, NCHW/OIHW) and ``cross_entropy`` (log_softmax +
  take_along_axis, mean): ``examples/plain.py``'s;
* ``max_pool2d`` (``lax.reduce_window``, -inf padding), ``mse_loss`` (mean of squares);
* ``scaled_dot_product_attention(q, k, v, is_causal=True)`` on torch's (B, H, L, D):
  ``jax.nn.dot_product_attention`` on (B, L, H, D) (``implementation="cudnn"`` on a GPU in
  bfloat16/float16, else ``"xla"``). The model swaps (B, L, H, D) -> (B, H, L, D) before the call
  and back after it on both sides; both sides' attention swaps to cuDNN's (B, L, H, D) inside
  (jaxrules' cuDNN path does the same), so XLA cancels the same transpose pairs on both sides.

The training step is ``jax.jit(jax.value_and_grad(loss))(params, batch)``: the loss and the
gradients of every parameter, no optimizer update (the same on both sides). All parameters and
activations are in the point's dtype; normalization statistics and the loss in float32 (the
logits / the UNet's output are cast to float32 before the loss, on both sides).

Models and the full (GPU) grid, 13 points:

* ``gpt``, bfloat16, vocab 32768, pre-LN blocks (layer_norm, QKV projection, causal attention,
  output projection, residual; layer_norm, MLP 4x with exact (erf) GELU, residual), token +
  position embedding (a gather), final layer_norm, unfused head ``h @ W_out.T`` (W_out (vocab,
  width)), cross_entropy: width 768 (12 layers, 12 heads, seq 1024, batch 8), width 4096 (4
  layers, 32 heads, seq 2048, batch 4), width 8192 (2 layers, 64 heads, seq 2048, batch 2);
  head dim 64 / 128 / 128. Two more rows give jaxrules' side the fused head
  (``nn.linear_cross_entropy``) against the plain side's unfused one: width 768 as above, and
  width 4096 with a 131072 vocabulary.
* ``resnet``: ResNet-50's layout (v1.5) at 224x224: stem conv 7x7/2 + batch_norm, max_pool 3x3/2
  (pad 1), relu (relu after the pool: the same values, and no tied zeros in a pooling window,
  where the two sides' gradient conventions may differ), bottleneck blocks [3, 4, 6, 3] at 56, 28,
  14, 7 (widths 64/128/256/512, expansion 4, stride in the 3x3 conv, projection shortcut with
  batch_norm on each stage's first block), global average pool, linear head (1000 classes),
  cross_entropy. Batch norm in training mode without running statistics (``None`` on both
  sides). bfloat16 and float32, batch 64 and 128.
* ``unet``: a UNet-like stage with group_norm (32 groups) at 224x224 input: stem conv 3x3/2 to
  64 channels (112), two conv3x3 + group_norm + silu blocks at 112 (64), a conv3x3/2 down to 56
  (128) and two blocks, a conv3x3/2 down to 28 (256) and two blocks; up: nearest 2x upsample
  (broadcast + reshape), conv3x3 to 128, concatenated with the 56 skip, a block (256 -> 128); the
  same to 112 (64, with the 112 skip); a 1x1 conv head to 3 channels, mean squared error against a
  (N, 3, 112, 112) target. bfloat16 and float32, batch 64 and 128.

Per point: both programs lowered, compiled in a thread pool (both sides of a point in one task,
so that the second finds XLA's autotuning results of the first's identical GEMMs/convolutions),
``compiled.memory_analysis().temp_size_in_bytes``, both losses and the largest relative gradient
difference (per leaf ``max |g - g_plain| / max |g_plain|``), then the step times, interleaved
(``bench.interleaved_times_ms``: ``--repeats`` runs of ``--calls`` back-to-back calls per
side; the speed is the ratio of the medians, and the per-run speed the median of each repeat's
plain/jaxrules ratio with its 95% confidence interval, ``bench.paired_ratio``). ``--workers 1``
compiles one point at a time, should concurrent autotuning on the GPU be suspected of picking
different kernels. ``--profile POINT`` (a substring of a
point's id, e.g. ``gpt-768``, ``resnet-224x224-bfloat16-b128``) prints, for one point, each side's
custom calls and fusion count (``benchmarks/hlo_summary.py``), the HLO opcodes whose counts differ and,
on a GPU, the time per kernel category and the top kernels by device time
(``benchmarks/device_timeline.py``). ``--ablate POINT`` says which of jaxrules' pieces costs the
time at one point: it times, in one process, plain JAX, jaxrules, and plain JAX with each of
jaxrules' ``nn`` functions the model calls swapped in alone (``PIECES``), plain JAX with
jaxrules' ``numpy`` only, jaxrules with each of those functions swapped out alone, and jaxrules
with every normalization on the direct (two-pass), then on the one-pass statistics whatever its
size.

    PYTHONPATH=. python benchmarks/models.py --out models.json            # the full grid (a GPU)
    PYTHONPATH=. python benchmarks/models.py --models gpt --profile gpt-768
    PYTHONPATH=. python benchmarks/models.py --models unet --ablate unet-224x224-float32-b64
    PYTHONPATH=. python benchmarks/models.py --quick                     # tiny configs, CPU, seconds

``--quick`` (``tests/test_model_benchmarks.py``): a GPT of width 32 (2 layers, 2 heads, seq 16,
batch 2, vocab 64) in float32 and bfloat16, ResNet-like and UNet-like at 32x32 (bottlenecks [1, 1,
1, 1] of widths 4/8/8/8; UNet channels 8/16/16 with 4 groups), float32, batch 4.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import re
import statistics
import sys
import time
import types

import jax
import jax.numpy
import numpy as np
from jax import lax

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench  # noqa: E402
import hlo_summary  # noqa: E402

import jaxrules.nn  # noqa: E402
import jaxrules.numpy  # noqa: E402
from jaxrules.partials import normalization  # noqa: E402

_ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("examples_plain", _ROOT / "examples" / "plain.py")
plain_examples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plain_examples)


# ----------------------------------------------------------------------------------------------
# The plain-JAX namespace


def _stat_dtype(dtype):
    return jax.numpy.promote_types(dtype, jax.numpy.float32)


def _normalize(x, axes, eps):
    """``(x - mean) * rsqrt(var + eps)`` over ``axes``, in float32 (or wider), biased variance."""
    xf = x.astype(_stat_dtype(x.dtype))
    mean = jax.numpy.mean(xf, axes, keepdims=True)
    var = jax.numpy.mean(jax.numpy.square(xf - mean), axes, keepdims=True)
    return (xf - mean) * lax.rsqrt(var + eps)


def _affine(y, weight, bias, shape, dtype):
    if weight is not None:
        y = y * weight.astype(y.dtype).reshape(shape)
    if bias is not None:
        y = y + bias.astype(y.dtype).reshape(shape)
    return y.astype(dtype)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    y = _normalize(x, tuple(range(x.ndim - len(shape), x.ndim)), eps)
    return _affine(y, weight, bias, shape, x.dtype)


def batch_norm(x, running_mean, running_var, weight=None, bias=None, *, training=False, momentum=0.1, eps=1e-5):
    """Training mode only (batch statistics); ``running_mean``/``running_var`` must be None and
    come back None (as jaxrules' with None)."""
    if not training or running_mean is not None or running_var is not None:
        raise NotImplementedError("the benchmark's batch_norm: training mode without running statistics only")
    y = _normalize(x, (0, *range(2, x.ndim)), eps)
    return _affine(y, weight, bias, (1, -1) + (1,) * (x.ndim - 2), x.dtype), None, None


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    y = _normalize(x.reshape(x.shape[0], num_groups, -1), (2,), eps).reshape(x.shape)
    return _affine(y, weight, bias, (1, -1) + (1,) * (x.ndim - 2), x.dtype)


def max_pool2d(input, kernel_size, stride=None, padding=0):  # noqa: A002 - torch's name
    stride = stride or kernel_size
    return lax.reduce_window(input, -jax.numpy.inf, lax.max, (1, 1, kernel_size, kernel_size),
                             (1, 1, stride, stride), ((0, 0), (0, 0), (padding, padding), (padding, padding)))


def mse_loss(input, target):  # noqa: A002 - torch's name
    return jax.numpy.mean(jax.numpy.square(input - target))


def scaled_dot_product_attention(query, key, value, is_causal=False):
    """torch's layout (B, H, L, D) in and out; ``jax.nn.dot_product_attention`` takes (B, L, H, D)."""
    cudnn = jax.default_backend() == "gpu" and query.dtype in (jax.numpy.bfloat16, jax.numpy.float16)
    q, k, v = (jax.numpy.swapaxes(t, 1, 2) for t in (query, key, value))
    y = jax.nn.dot_product_attention(q, k, v, is_causal=is_causal, implementation="cudnn" if cudnn else "xla")
    return jax.numpy.swapaxes(y, 1, 2)


PLAIN_NN = types.SimpleNamespace(**{
    **vars(plain_examples.PLAIN_NN),
    "layer_norm": layer_norm, "batch_norm": batch_norm, "group_norm": group_norm, "max_pool2d": max_pool2d,
    "mse_loss": mse_loss, "scaled_dot_product_attention": scaled_dot_product_attention,
})

SIDES = {"jaxrules": (jaxrules.numpy, jaxrules.nn), "plain JAX": (jax.numpy, PLAIN_NN)}


# ----------------------------------------------------------------------------------------------
# The models, written once


class _DeviceRandom:
    """Random draws with ``jax.random`` (under ``jit``: large models)."""

    def __init__(self, key):
        self.key = key

    def _next(self):
        self.key, key = jax.random.split(self.key)
        return key

    def normal(self, shape, dtype, scale):
        return (scale * jax.random.normal(self._next(), shape, jax.numpy.float32)).astype(dtype)

    def integers(self, shape, high):
        return jax.random.randint(self._next(), shape, 0, high, jax.numpy.int32)


class _HostRandom:
    """The same draws with NumPy (small models: no program to compile, seconds saved on a CPU)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def normal(self, shape, dtype, scale):
        return (scale * self.rng.standard_normal(shape, np.float32)).astype(dtype)

    def integers(self, shape, high):
        return self.rng.integers(0, high, shape, dtype=np.int32)


def gpt_init(rng, cfg, dtype):
    d, vocab = cfg["width"], cfg["vocab"]
    ones, zeros = np.ones(d, dtype), np.zeros(d, dtype)
    blocks = [{
        "ln1_w": ones, "ln1_b": zeros, "ln2_w": ones, "ln2_b": zeros,
        "w_qkv": rng.normal((d, 3 * d), dtype, d ** -0.5), "b_qkv": np.zeros(3 * d, dtype),
        "w_o": rng.normal((d, d), dtype, d ** -0.5), "b_o": zeros,
        "w_fc": rng.normal((d, 4 * d), dtype, d ** -0.5), "b_fc": np.zeros(4 * d, dtype),
        "w_proj": rng.normal((4 * d, d), dtype, (4 * d) ** -0.5), "b_proj": zeros,
    } for _ in range(cfg["layers"])]
    return {"tok_emb": rng.normal((vocab, d), dtype, 1.0), "pos_emb": rng.normal((cfg["seq"], d), dtype, 0.1),
            "blocks": blocks, "ln_f_w": ones, "ln_f_b": zeros, "w_out": rng.normal((vocab, d), dtype, d ** -0.5)}


def gpt_batch(rng, cfg, batch, dtype):
    tokens = rng.integers((batch, cfg["seq"] + 1), cfg["vocab"])
    return tokens[:, :-1], tokens[:, 1:]


def gpt_block(p, x, heads, *, np_, nn_):
    b, length, d = x.shape
    h = nn_.layer_norm(x, (d,), p["ln1_w"], p["ln1_b"])
    qkv = (np_.matmul(h, p["w_qkv"]) + p["b_qkv"]).reshape(b, length, 3, heads, d // heads)
    # (B, L, H, D) -> torch's (B, H, L, D), and back after the attention (see the module docstring)
    q, k, v = (np_.swapaxes(qkv[:, :, i], 1, 2) for i in range(3))
    y = np_.swapaxes(nn_.scaled_dot_product_attention(q, k, v, is_causal=True), 1, 2).reshape(b, length, d)
    x = x + (np_.matmul(y, p["w_o"]) + p["b_o"])
    h = nn_.layer_norm(x, (d,), p["ln2_w"], p["ln2_b"])
    h = nn_.gelu(np_.matmul(h, p["w_fc"]) + p["b_fc"], approximate=False)
    return x + (np_.matmul(h, p["w_proj"]) + p["b_proj"])


def gpt_loss(params, batch, *, cfg, np_, nn_):
    tokens, targets = batch
    x = np_.take(params["tok_emb"], tokens, axis=0) + params["pos_emb"]
    for p in params["blocks"]:
        x = gpt_block(p, x, cfg["heads"], np_=np_, nn_=nn_)
    d = x.shape[-1]
    h = nn_.layer_norm(x, (d,), params["ln_f_w"], params["ln_f_b"])
    fused = getattr(nn_, "linear_cross_entropy", None) if cfg.get("head") == "fused" else None
    if fused is not None:  # jaxrules' fused head: the logits are never held (the plain side has none)
        return fused(h.reshape(-1, d), params["w_out"], targets.reshape(-1)).astype(np_.float32)
    logits = np_.matmul(h.reshape(-1, d), params["w_out"].T)  # the unfused head: (B L, vocab)
    return nn_.cross_entropy(logits.astype(np_.float32), targets.reshape(-1))


def _conv_init(rng, c_out, c_in, k, dtype):
    return rng.normal((c_out, c_in, k, k), dtype, (c_in * k * k) ** -0.5)


def _norm_init(c, dtype):
    return {"w": np.ones(c, dtype), "b": np.zeros(c, dtype)}


def resnet_init(rng, cfg, dtype):
    stem = cfg["stem"]
    params = {"stem": _conv_init(rng, stem, 3, 7, dtype), "stem_bn": _norm_init(stem, dtype), "stages": []}
    c_in = stem
    for width, blocks in zip(cfg["widths"], cfg["blocks"]):
        stage = []
        for i in range(blocks):
            c_out = 4 * width
            block = {"conv1": _conv_init(rng, width, c_in, 1, dtype), "bn1": _norm_init(width, dtype),
                     "conv2": _conv_init(rng, width, width, 3, dtype), "bn2": _norm_init(width, dtype),
                     "conv3": _conv_init(rng, c_out, width, 1, dtype), "bn3": _norm_init(c_out, dtype)}
            if i == 0:
                block["down"] = _conv_init(rng, c_out, c_in, 1, dtype)
                block["down_bn"] = _norm_init(c_out, dtype)
            stage.append(block)
            c_in = c_out
        params["stages"].append(stage)
    params["fc_w"] = rng.normal((c_in, cfg["classes"]), dtype, c_in ** -0.5)
    params["fc_b"] = np.zeros(cfg["classes"], dtype)
    return params


def resnet_batch(rng, cfg, batch, dtype):
    return rng.normal((batch, 3, cfg["size"], cfg["size"]), dtype, 1.0), rng.integers((batch,), cfg["classes"])


def _conv_bn(x, w, bn, *, stride=1, padding=0, nn_):
    x = nn_.conv2d(x, w, stride=stride, padding=padding)  # no bias: batch norm subtracts it again
    return nn_.batch_norm(x, None, None, bn["w"], bn["b"], training=True)[0]


def resnet_loss(params, batch, *, cfg, np_, nn_):
    x, labels = batch
    x = _conv_bn(x, params["stem"], params["stem_bn"], stride=2, padding=3, nn_=nn_)
    x = nn_.relu(nn_.max_pool2d(x, 3, stride=2, padding=1))  # pool before relu: see the module docstring
    for s, stage in enumerate(params["stages"]):
        for i, p in enumerate(stage):
            stride = 2 if i == 0 and s > 0 else 1
            h = nn_.relu(_conv_bn(x, p["conv1"], p["bn1"], nn_=nn_))
            h = nn_.relu(_conv_bn(h, p["conv2"], p["bn2"], stride=stride, padding=1, nn_=nn_))
            h = _conv_bn(h, p["conv3"], p["bn3"], nn_=nn_)
            shortcut = _conv_bn(x, p["down"], p["down_bn"], stride=stride, nn_=nn_) if "down" in p else x
            x = nn_.relu(h + shortcut)
    features = np_.mean(x, axis=(2, 3))
    logits = np_.matmul(features, params["fc_w"]) + params["fc_b"]
    return nn_.cross_entropy(logits.astype(np_.float32), labels)


def unet_init(rng, cfg, dtype):
    c1, c2, c3 = cfg["channels"]

    def block(c_in, c_out):
        return {"w": _conv_init(rng, c_out, c_in, 3, dtype), "gn": _norm_init(c_out, dtype)}

    return {
        "stem": _conv_init(rng, c1, 3, 3, dtype),
        "enc1": [block(c1, c1), block(c1, c1)],
        "down2": _conv_init(rng, c2, c1, 3, dtype), "enc2": [block(c2, c2), block(c2, c2)],
        "down3": _conv_init(rng, c3, c2, 3, dtype), "mid": [block(c3, c3), block(c3, c3)],
        "up2": _conv_init(rng, c2, c3, 3, dtype), "dec2": [block(2 * c2, c2)],
        "up1": _conv_init(rng, c1, c2, 3, dtype), "dec1": [block(2 * c1, c1)],
        "head_w": _conv_init(rng, 3, c1, 1, dtype), "head_b": np.zeros(3, dtype),
    }


def unet_batch(rng, cfg, batch, dtype):
    size = cfg["size"]
    return (rng.normal((batch, 3, size, size), dtype, 1.0),
            rng.normal((batch, 3, size // 2, size // 2), np.float32, 1.0))


def _upsample2x(x, *, np_):
    """Nearest-neighbour 2x upsampling: broadcast + reshape."""
    n, c, h, w = x.shape
    return np_.broadcast_to(x[:, :, :, None, :, None], (n, c, h, 2, w, 2)).reshape(n, c, 2 * h, 2 * w)


def unet_loss(params, batch, *, cfg, np_, nn_):
    x, target = batch
    groups = cfg["groups"]

    def blocks(x, ps):
        for p in ps:
            x = nn_.silu(nn_.group_norm(nn_.conv2d(x, p["w"], padding=1), groups, p["gn"]["w"], p["gn"]["b"]))
        return x

    skip1 = blocks(nn_.conv2d(x, params["stem"], stride=2, padding=1), params["enc1"])
    skip2 = blocks(nn_.conv2d(skip1, params["down2"], stride=2, padding=1), params["enc2"])
    h = blocks(nn_.conv2d(skip2, params["down3"], stride=2, padding=1), params["mid"])
    h = nn_.conv2d(_upsample2x(h, np_=np_), params["up2"], padding=1)
    h = blocks(np_.concatenate([h, skip2], axis=1), params["dec2"])
    h = nn_.conv2d(_upsample2x(h, np_=np_), params["up1"], padding=1)
    h = blocks(np_.concatenate([h, skip1], axis=1), params["dec1"])
    y = nn_.conv2d(h, params["head_w"], params["head_b"])
    return nn_.mse_loss(y.astype(np_.float32), target)


# ----------------------------------------------------------------------------------------------
# The grid

GPT_CONFIGS = {
    "768": {"width": 768, "layers": 12, "heads": 12, "seq": 1024, "batch": 8, "vocab": 32768},
    "4096": {"width": 4096, "layers": 4, "heads": 32, "seq": 2048, "batch": 4, "vocab": 32768},
    "8192": {"width": 8192, "layers": 2, "heads": 64, "seq": 2048, "batch": 2, "vocab": 32768},
    # jaxrules' side with the fused head (nn.linear_cross_entropy), the plain side unfused
    "768-fused-head": {"width": 768, "layers": 12, "heads": 12, "seq": 1024, "batch": 8, "vocab": 32768,
                       "head": "fused"},
    "4096-fused-head": {"width": 4096, "layers": 4, "heads": 32, "seq": 2048, "batch": 4, "vocab": 131072,
                        "head": "fused"},
}
RESNET = {"size": 224, "stem": 64, "widths": (64, 128, 256, 512), "blocks": (3, 4, 6, 3), "classes": 1000}
UNET = {"size": 224, "channels": (64, 128, 256), "groups": 32}
CNN_GRID = [(dtype, batch) for dtype in ("bfloat16", "float32") for batch in (64, 128)]

# --quick: tiny float32 configs (plus one bfloat16 GPT) for a CPU in seconds.
QUICK_GPT = {"tiny": {"width": 32, "layers": 2, "heads": 2, "seq": 16, "batch": 2, "vocab": 64}}
QUICK_RESNET = {"size": 32, "stem": 8, "widths": (4, 8, 8, 8), "blocks": (1, 1, 1, 1), "classes": 10}
QUICK_UNET = {"size": 32, "channels": (8, 16, 16), "groups": 4}
QUICK_CNN_GRID = [("float32", 4)]

MODELS = {"gpt": (gpt_init, gpt_batch, gpt_loss), "resnet": (resnet_init, resnet_batch, resnet_loss),
          "unet": (unet_init, unet_batch, unet_loss)}
HOST_INIT_MAX = 50_000_000  # inputs of up to this many elements drawn with NumPy, larger with jax.random


@dataclasses.dataclass(frozen=True)
class Point:
    model: str
    config: str  # a label
    dtype: str
    batch: int
    cfg: dict = dataclasses.field(hash=False, compare=False)

    @property
    def id(self) -> str:
        return f"{self.model}-{self.config}-{self.dtype}-b{self.batch}"


def points(models, quick=False) -> list[Point]:
    out = []
    if "gpt" in models:
        gpt_dtypes = ("float32", "bfloat16") if quick else ("bfloat16",)
        for label, cfg in (QUICK_GPT if quick else GPT_CONFIGS).items():
            out += [Point("gpt", label, dtype, cfg["batch"], cfg) for dtype in gpt_dtypes]
    for model, cfg in (("resnet", QUICK_RESNET if quick else RESNET), ("unet", QUICK_UNET if quick else UNET)):
        if model in models:
            label = f"{cfg['size']}x{cfg['size']}"
            out += [Point(model, label, dtype, batch, cfg) for dtype, batch in (QUICK_CNN_GRID if quick else CNN_GRID)]
    return out


def _build(point: Point, rng):
    init, make_batch, _ = MODELS[point.model]
    dtype = jax.numpy.dtype(point.dtype)
    return init(rng, point.cfg, dtype), make_batch(rng, point.cfg, point.batch, dtype)


def abstract_inputs(point: Point):
    """The shapes and dtypes of ``inputs(point)``."""
    return jax.eval_shape(lambda key: _build(point, _DeviceRandom(key)), jax.random.PRNGKey(0))


def inputs(point: Point, seed: int = 0):
    """``(params, batch)`` of a point, on the default device: drawn with NumPy when small (no
    program to compile), else by one jitted program."""
    size = sum(leaf.size for leaf in jax.tree.leaves(abstract_inputs(point)))
    if size <= HOST_INIT_MAX:
        return jax.device_put(_build(point, _HostRandom(seed)))
    return jax.jit(lambda key: _build(point, _DeviceRandom(key)))(jax.random.PRNGKey(seed))


def step(point: Point, np_, nn_):
    """The jitted training step ``value_and_grad(loss)(params, batch)`` with the given namespaces."""
    loss = MODELS[point.model][2]

    def fn(params, batch):
        return loss(params, batch, cfg=point.cfg, np_=np_, nn_=nn_)

    return jax.jit(jax.value_and_grad(fn))


@jax.jit
def _leaf_errors(grads, reference):
    """Per leaf ``max |g - g_ref| / max |g_ref|`` (``max |g|`` where g_ref is 0; inf where g is not
    finite), on the device (the largest model's gradients are 4 GiB a side)."""
    errors = []
    for g, r in zip(grads, reference, strict=True):
        dtype = jax.numpy.promote_types(g.dtype, jax.numpy.float32)
        g, r = g.astype(dtype), r.astype(dtype)
        diff, scale = jax.numpy.max(jax.numpy.abs(g - r)), jax.numpy.max(jax.numpy.abs(r))
        error = jax.numpy.where(scale > 0, diff / jax.numpy.where(scale > 0, scale, 1), diff)
        errors.append(jax.numpy.where(jax.numpy.all(jax.numpy.isfinite(g)), error, jax.numpy.inf))
    return jax.numpy.stack(errors)


def grad_rel_diff(grads, reference) -> float:
    """The largest over the leaves of ``max |g - g_ref| / max |g_ref|``."""
    leaves, ref_leaves = jax.tree.leaves(grads), jax.tree.leaves(reference)
    assert [(g.shape, g.dtype) for g in leaves] == [(r.shape, r.dtype) for r in ref_leaves]
    return float(jax.numpy.max(_leaf_errors(leaves, ref_leaves)))


def compare(point: Point, sides=None, seed: int = 0) -> dict:
    """Both sides' loss and gradients at ``point`` (``sides``: label -> (np_, nn_), jaxrules
    first, the reference second): ``{"losses", "loss_rel_diff", "grad_rel_diff"}``."""
    sides = sides or SIDES
    args = inputs(point, seed)
    (loss, grads), (loss_ref, grads_ref) = (step(point, *ns)(*args) for ns in sides.values())
    return {"losses": [float(loss), float(loss_ref)],
            "loss_rel_diff": abs(float(loss) - float(loss_ref)) / abs(float(loss_ref)),
            "grad_rel_diff": grad_rel_diff(grads, grads_ref)}


def _compile_point(lowered: dict) -> tuple[dict, float]:
    start = time.perf_counter()
    return {label: low.compile() for label, low in lowered.items()}, time.perf_counter() - start


def compile_all(pts, workers: int):
    """``[{label: compiled}]`` per point: lowered here one after the other (tracing holds the
    GIL), compiled in a thread pool (XLA releases it), both sides of a point in one task."""
    start = time.perf_counter()
    lowered = []
    for point in pts:
        shapes = abstract_inputs(point)
        lowered.append({label: step(point, *ns).lower(*shapes) for label, ns in SIDES.items()})
    traced = time.perf_counter() - start
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        results = list(pool.map(_compile_point, lowered))
    print(f"lowered {2 * len(pts)} programs in {traced:.1f} s, compiled them in "
          f"{time.perf_counter() - start - traced:.1f} s ({workers} threads)", flush=True)
    return [compiled for compiled, _ in results]


def _temp_bytes(compiled) -> int | None:
    analysis = compiled.memory_analysis()
    return None if analysis is None else int(analysis.temp_size_in_bytes)


def measure(point: Point, compiled: dict, repeats: int, calls: int) -> dict:
    args = inputs(point)
    outs = {label: jax.block_until_ready(c(*args)) for label, c in compiled.items()}
    (loss, grads), (loss_ref, grads_ref) = outs["jaxrules"], outs["plain JAX"]
    row = {"id": point.id, "model": point.model, "config": point.config, "dtype": point.dtype, "batch": point.batch,
           "cfg": {k: list(v) if isinstance(v, tuple) else v for k, v in point.cfg.items()},
           "loss_jaxrules": float(loss), "loss_plain": float(loss_ref),
           "loss_rel_diff": abs(float(loss) - float(loss_ref)) / abs(float(loss_ref)),
           "grad_rel_diff": grad_rel_diff(grads, grads_ref)}
    del outs, grads, grads_ref
    runs = bench.interleaved_times_ms({label: (lambda c=c: c(*args)) for label, c in compiled.items()},
                                      repeats, warmup=2, calls=calls)
    times = {label: statistics.median(t) for label, t in runs.items()}
    paired, low, high = bench.paired_ratio(runs["plain JAX"], runs["jaxrules"])
    temps = {label: _temp_bytes(c) for label, c in compiled.items()}
    row.update({"ms_jaxrules": times["jaxrules"], "ms_plain": times["plain JAX"],
                "speedup": times["plain JAX"] / times["jaxrules"],
                "speedup_paired": paired, "speedup_paired_95": [low, high],
                "temp_bytes_jaxrules": temps["jaxrules"], "temp_bytes_plain": temps["plain JAX"],
                "temp_ratio": (temps["jaxrules"] / temps["plain JAX"]) if temps["jaxrules"] is not None
                and temps["plain JAX"] else None})
    return row


def _mib(b):
    if b is None:
        return "-"
    return f"{b / 2 ** 20:.0f}" if b >= 100 * 2 ** 20 else f"{b / 2 ** 20:.2f}"


def table(rows) -> str:
    lines = ["| model | config | dtype | batch | jaxrules ms | plain JAX ms | speed (plain/jaxrules) | "
             "per-run speed [95%] | temp MiB jaxrules | temp MiB plain | temp ratio | loss rel diff | grad rel diff |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ratio = "-" if r["temp_ratio"] is None else f"{r['temp_ratio']:.3f}"
        lines.append(f"| {r['model']} | {r['config']} | {r['dtype']} | {r['batch']} | {r['ms_jaxrules']:.3f} | "
                     f"{r['ms_plain']:.3f} | {r['speedup']:.3f}x | {r['speedup_paired']:.4f}x "
                     f"[{r['speedup_paired_95'][0]:.4f}, {r['speedup_paired_95'][1]:.4f}] | "
                     f"{_mib(r['temp_bytes_jaxrules'])} | "
                     f"{_mib(r['temp_bytes_plain'])} | {ratio} | {r['loss_rel_diff']:.1e} | {r['grad_rel_diff']:.1e} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# --ablate

# The jaxrules.nn functions each model calls: --ablate swaps them into the plain side one at a time.
PIECES = {"gpt": ("layer_norm", "scaled_dot_product_attention", "gelu", "cross_entropy"),
          "resnet": ("conv2d", "batch_norm", "max_pool2d", "relu", "cross_entropy"),
          "unet": ("conv2d", "group_norm", "silu", "mse_loss")}


def ablation_sides(model: str) -> dict:
    """``label -> (np_, nn_)``: plain JAX, jaxrules, plain JAX with one ``jaxrules.nn`` function of
    ``PIECES[model]`` in place of its own (``plain+NAME``), plain JAX with ``jaxrules.numpy``, and
    jaxrules with plain JAX's function in place of one of its own (``jaxrules-NAME``: what a piece
    costs beside the others, where pieces interact)."""
    plain_np, plain_nn = SIDES["plain JAX"]
    ours_np, ours_nn = SIDES["jaxrules"]
    sides = {"plain JAX": SIDES["plain JAX"], "jaxrules": SIDES["jaxrules"]}
    for name in PIECES[model]:
        swapped = types.SimpleNamespace(**{**vars(plain_nn), name: getattr(ours_nn, name)})
        sides[f"plain+{name}"] = (plain_np, swapped)
    sides["plain+numpy"] = (ours_np, plain_nn)
    for name in PIECES[model]:
        removed = types.SimpleNamespace(**{**vars(ours_nn), name: getattr(plain_nn, name)})
        sides[f"jaxrules-{name}"] = (ours_np, removed)
    return sides


STATISTICS_SIDES = {"jaxrules+direct statistics": True, "jaxrules+one-pass statistics": False}


@contextlib.contextmanager
def _statistics_forms(direct: bool | None):
    """While tracing: every normalization takes the direct (two-pass, ``direct=True``) or the
    one-pass (``False``) statistics' forms whatever its size, in place of
    ``jaxrules.partials.normalization.direct_forms``' rule (``None``: the rule)."""
    rule = normalization.direct_forms
    if direct is not None:
        normalization.direct_forms = lambda x, axes: direct
    try:
        yield
    finally:
        normalization.direct_forms = rule


def ablate(point: Point, repeats: int, calls: int, workers: int, only=None) -> list[dict]:
    """Each of ``ablation_sides(point.model)``, and jaxrules with each statistics' form everywhere
    (``STATISTICS_SIDES``), compiled (in ``workers`` threads) and timed interleaved in this
    process: ``[{"side", "ms", "speedup" (plain JAX's ms / this side's), "temp_bytes"}]``, printed
    as a table. ``only`` (labels) keeps plain JAX and those sides."""
    shapes = abstract_inputs(point)
    sides = {**ablation_sides(point.model), **dict.fromkeys(STATISTICS_SIDES, SIDES["jaxrules"])}
    if only is not None:
        unknown = set(only) - set(sides)
        if unknown:
            raise ValueError(f"ablate: unknown sides {sorted(unknown)}; the sides are {list(sides)}")
        sides = {label: ns for label, ns in sides.items() if label == "plain JAX" or label in only}
    lowered = []
    for label, ns in sides.items():
        with _statistics_forms(STATISTICS_SIDES.get(label)):
            lowered.append(step(point, *ns).lower(*shapes))
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        compiled = dict(zip(sides, pool.map(lambda low: low.compile(), lowered)))
    args = inputs(point)
    times = bench.interleaved_median_ms({label: (lambda c=c: c(*args)) for label, c in compiled.items()},
                                        repeats, warmup=2, calls=calls)
    rows = [{"side": label, "ms": ms, "speedup": times["plain JAX"] / ms, "temp_bytes": _temp_bytes(compiled[label])}
            for label, ms in times.items()]
    print(f"## ablation {point.id}\n\n| side | ms | speed (plain/side) | temp MiB |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['side']} | {r['ms']:.3f} | {r['speedup']:.3f}x | {_mib(r['temp_bytes'])} |")
    return rows


# ----------------------------------------------------------------------------------------------
# --profile

_CATEGORIES = [  # (category, kernel name pattern), first match
    ("attention (cuDNN)", r"fmha|flash|cudnn.*(attn|sdpa)|sdpa"),
    ("convolution", r"conv(?!ert)|implicit_gemm|cudnn|xmma_fprop|xmma_dgrad|xmma_wgrad|fprop|dgrad|wgrad"),
    ("gemm", r"gemm|cutlass|cublas|xmma|sm\d+_|matmul|dot"),
    ("pallas/triton", r"triton|pallas|rows_|grouped_"),
    ("copy/transpose", r"copy|transpose|memcpy|memset"),
    ("reduction fusion", r"reduce|reduction"),
    ("elementwise fusion", r"fusion|loop_"),
]


def _category(name: str) -> str:
    low = name.lower()
    return next((c for c, pattern in _CATEGORIES if re.search(pattern, low)), "other")


_PLUMBING = {"parameter", "constant", "bitcast", "tuple", "get-tuple-element"}
_HLO_OP = re.compile(r"^\s*(?:ROOT )?%[\w.\-]+ = .*? ([a-z][\w\-]*)\(", re.M)


def opcode_counts(hlo: str) -> collections.Counter:
    """How often each HLO opcode occurs in a compiled program's text, fusion bodies included."""
    return collections.Counter(op for op in _HLO_OP.findall(hlo) if op not in _PLUMBING)


def profile(point: Point, top: int = 15, steps: int = 3):
    """Prints, for both sides at ``point``: the temporary memory, custom calls and fusions of the
    compiled program, the HLO opcodes whose counts differ, and on a GPU the time per kernel
    category and the top kernels by device time per step (a profiler trace)."""
    shapes = abstract_inputs(point)
    args = inputs(point)
    big = max(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes[1]))
    print(f"## profile {point.id} ({point.cfg})")
    compiled = {label: step(point, *ns).lower(*shapes).compile() for label, ns in SIDES.items()}
    texts = {label: c.as_text() for label, c in compiled.items()}
    for label, c in compiled.items():
        summary = hlo_summary.summarize(texts[label], big)
        print(f"\n### {label}: temp {_mib(_temp_bytes(c))} MiB, {summary['fusions']} top-level fusions, "
              f"{len(summary['custom_calls'])} custom calls; reads/writes of input-sized arrays "
              f"{summary['big_reads']}/{summary['big_writes']}, copies/transposes {summary['big_copies']}")
        for name, n in collections.Counter(summary["custom_calls"]).most_common():
            print(f"    {n:4d} x {name}")
    counts = {label: opcode_counts(text) for label, text in texts.items()}
    differ = sorted(op for op in set().union(*counts.values()) if len({c[op] for c in counts.values()}) > 1)
    print("\n### HLO opcodes whose counts differ (jaxrules / plain JAX, fusion bodies included)")
    for op in differ:
        print(f"    {counts['jaxrules'][op]:5d} / {counts['plain JAX'][op]:5d}  {op}")
    if jax.default_backend() != "gpu":
        return
    sys.path.insert(0, str(_ROOT / "benchmarks"))
    import device_timeline

    for label, c in compiled.items():
        planes = device_timeline.timeline(lambda c=c: c(*args), steps)
        if not planes:
            continue
        plane = planes[sorted(planes)[0]]
        by_name, by_category = collections.Counter(), collections.Counter()
        for _, us, name in plane["ops"]:
            by_name[name] += us
            by_category[_category(name)] += us
        busy = sum(by_name.values()) or 1.0
        print(f"\n### {label}: step span {plane['span_us'] / 1e3:.3f} ms, kernels {busy / 1e3:.3f} ms, "
              f"GPU idle {plane['idle_us'] / 1e3:.3f} ms; by category:")
        for name, us in by_category.most_common():
            print(f"    {us / 1e3:9.3f} ms  {100 * us / busy:5.1f}%  {name}")
        print(f"  top {top} kernels (summed per step):")
        for name, us in by_name.most_common(top):
            print(f"    {us / 1e3:9.3f} ms  {100 * us / busy:5.1f}%  {name[:110]}")


# ----------------------------------------------------------------------------------------------


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt,resnet,unet", help="comma-separated: gpt, resnet, unet")
    parser.add_argument("--quick", action="store_true", help="tiny configs (a CPU, seconds)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--calls", type=int, default=3, help="back-to-back calls per timed run")
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1), help="compile threads")
    parser.add_argument("--out", help="write the rows as JSON here")
    parser.add_argument("--profile", metavar="POINT", help="profile one point (a substring of its id) instead")
    parser.add_argument("--ablate", metavar="POINT",
                        help="time one point (a substring of its id), each jaxrules piece alone in plain JAX, instead")
    parser.add_argument("--sides", help="with --ablate: only plain JAX and these sides (comma-separated labels)")
    parser.add_argument("--points", help="only the points whose id contains one of these (comma-separated substrings)")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = set(models) - set(MODELS)
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; choose from {sorted(MODELS)}")
    pts = points(models, args.quick)
    if args.points:
        wanted = [w.strip() for w in args.points.split(",") if w.strip()]
        pts = [p for p in pts if any(w in p.id for w in wanted)]
        if not pts:
            parser.error(f"no point matches {args.points!r}")
    device = jax.devices()[0]
    print(f"jax {jax.__version__}, {device.platform} {device.device_kind}; points: {', '.join(p.id for p in pts)}",
          flush=True)
    if args.profile or args.ablate:
        wanted = args.profile or args.ablate
        matches = [p for p in pts if wanted in p.id]
        if not matches:
            parser.error(f"no point matches {wanted!r}; points: {[p.id for p in pts]}")
        if args.profile:
            profile(matches[0])
            return []
        only = None if args.sides is None else [w.strip() for w in args.sides.split(",") if w.strip()]
        return ablate(matches[0], args.repeats, args.calls, args.workers, only)
    compiled = compile_all(pts, args.workers)
    rows = []
    for point, programs in zip(pts, compiled):
        start = time.perf_counter()
        row = measure(point, programs, args.repeats, args.calls)
        rows.append(row)
        print(f"{point.id}: jaxrules {row['ms_jaxrules']:.3f} ms, plain {row['ms_plain']:.3f} ms "
              f"({row['speedup']:.3f}x; per run {row['speedup_paired']:.4f}x, 95% "
              f"{row['speedup_paired_95'][0]:.4f}-{row['speedup_paired_95'][1]:.4f}), "
              f"temp {_mib(row['temp_bytes_jaxrules'])} vs {_mib(row['temp_bytes_plain'])} "
              f"MiB, loss {row['loss_jaxrules']:.6g} vs {row['loss_plain']:.6g} (rel {row['loss_rel_diff']:.1e}), "
              f"grad rel diff {row['grad_rel_diff']:.1e} [{time.perf_counter() - start:.1f} s]", flush=True)
    print()
    print(table(rows))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"jax_version": jax.__version__, "device_kind": device.device_kind, "platform": device.platform,
                       "repeats": args.repeats, "calls": args.calls, "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
