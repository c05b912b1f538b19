"""Registry records of ``jaxrules.ops.conv``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import numpy as np

from jaxrules.ops._sampling import distinct, f64, normal
from jaxrules.ops.conv import _adaptive_pool, avg_pool, conv, conv_transpose, fold, max_pool, unfold
from jaxrules.registry import Sample, SingularPoint, record


def _adaptive_avg_pool_nd(input, output_size):  # noqa: A002
    """The record's entry: ``adaptive_avg_pool1d/2d/3d`` by the input's rank (below rank 3: 1d,
    whose own check names the shape it needs)."""
    dims = max(np.ndim(input) - 2, 1)
    return _adaptive_pool(f"adaptive_avg_pool{dims}d", dims, input, output_size)


def _adaptive_max_pool_nd(input, output_size, return_indices=False):  # noqa: A002
    """The record's entry: ``adaptive_max_pool1d/2d/3d`` by the input's rank (below rank 3: 1d,
    whose own check names the shape it needs)."""
    dims = max(np.ndim(input) - 2, 1)
    return _adaptive_pool(f"adaptive_max_pool{dims}d", dims, input, output_size, bool(return_indices))


def _torch_conv(torch, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    fn = getattr(torch.nn.functional, f"conv{w.ndim - 2}d")
    return fn(x, w, b, stride, padding, dilation, groups)


record(
    "conv", fn=conv, public=("jaxrules.nn.conv", "jaxrules.nn.conv1d", "jaxrules.nn.conv2d", "jaxrules.nn.conv3d"),
    formula_ops=("convolution",), seed=("convolution_jvp", "convolution_backward", "_convolution_double_backward"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 2, 3, 7), normal(rng, dt, 4, 3, 3), normal(rng, dt, 4)), {"stride": 2, "padding": 1}),
        Sample((normal(rng, dt, 1, 4, 5, 6), normal(rng, dt, 2, 2, 2, 3), normal(rng, dt, 2)),
               {"padding": (1, 0), "dilation": (2, 1), "groups": 2}),
        Sample((normal(rng, dt, 1, 2, 4, 3, 3), normal(rng, dt, 2, 2, 2, 2, 2), None), {"stride": (1, 2, 1)}),
        Sample((normal(rng, dt, 2, 2, 6), normal(rng, dt, 3, 2, 3)), {"padding": "same", "dilation": 2}),
    ],
    torch_fn=_torch_conv, torch_name="torch.nn.functional.conv1d/2d/3d", low_precision=("float32",),
    tolerance={"float32": 1e-3},  # float32 convolutions may run in TF32 on a GPU
    empty_samples=lambda rng, dt: [  # no input channels: tests/test_conv.py (torch's output has no channels)
        Sample((normal(rng, dt, 0, 3, 7), normal(rng, dt, 4, 3, 3), normal(rng, dt, 4)), {"stride": 2, "padding": 1}),
        Sample((normal(rng, dt, 0, 4, 5, 6), normal(rng, dt, 2, 2, 2, 3), normal(rng, dt, 2)),
               {"padding": (1, 0), "dilation": (2, 1), "groups": 2}),
        Sample((normal(rng, dt, 0, 2, 6), normal(rng, dt, 3, 2, 3)), {"padding": "same", "dilation": 2}),
    ],
    deviations="No input channels (C = 0): the output has the weight's O channels, the bias (the sum over no "
    "channels is 0); torch 2.13 returns C = 0 output channels.",
)


def _torch_conv_transpose(torch, x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    fn = getattr(torch.nn.functional, f"conv_transpose{w.ndim - 2}d")
    return fn(x, w, b, stride, padding, output_padding, groups, dilation)


record(
    "conv_transpose", fn=conv_transpose,
    public=("jaxrules.nn.conv_transpose", "jaxrules.nn.conv_transpose1d",
            "jaxrules.nn.conv_transpose2d", "jaxrules.nn.conv_transpose3d"),
    formula_ops=("conv_transpose",), seed=("convolution_jvp", "convolution_backward", "_convolution_double_backward"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 2, 3, 4), normal(rng, dt, 3, 2, 3), normal(rng, dt, 2)),
               {"stride": 2, "padding": 1, "output_padding": 1}),
        # output_padding 1 < dilation 2 on axis 0 (stride 1), < stride 2 on axis 1
        Sample((normal(rng, dt, 1, 4, 3, 2), normal(rng, dt, 4, 1, 2, 3), normal(rng, dt, 2)),
               {"stride": (1, 2), "padding": (1, 0), "output_padding": 1, "groups": 2, "dilation": (2, 1)}),
        Sample((normal(rng, dt, 1, 2, 2, 2, 2), normal(rng, dt, 2, 2, 2, 2, 2), None), {"stride": (1, 2, 1)}),
        Sample((normal(rng, dt, 2, 4), normal(rng, dt, 2, 3, 2), normal(rng, dt, 3)),  # unbatched
               {"output_padding": 1, "dilation": 2}),
        # an empty batch (the weight is never empty) is in tests/test_conv_transpose.py: the
        # harness expects formulas to run unless every argument is empty
    ],
    torch_fn=_torch_conv_transpose, torch_name="torch.nn.functional.conv_transpose1d/2d/3d", low_precision=("float32",),
    tolerance={"float32": 1e-3},  # float32 convolutions may run in TF32 on a GPU
    deviations="a non-finite input entry (weight tap) whose product with a weight tap (input entry) lands only on "
               "output positions cut off by padding is not in the output, and the weight (input) gradient leaves "
               "that product out: finite, the exact partial derivative, where torch's is NaN (its backward "
               "multiplies the zeros it pads the cotangent with)",
)


record(
    "unfold", fn=unfold, public=("jaxrules.nn.unfold",), formula_ops=("unfold",),
    seed=("im2col (derivatives.yaml)", "col2im (derivatives.yaml)"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 2, 2, 3, 4), (2, 3)), {"dilation": (1, 2), "padding": 1, "stride": (2, 1)}),
        Sample((normal(rng, dt, 2, 3, 3), 2)),  # unbatched
        Sample((normal(rng, dt, 0, 1, 3, 3), 2)),  # empty batch
    ],
    torch_fn=lambda torch, *args, **kwargs: torch.nn.functional.unfold(*args, **kwargs),
    torch_name="torch.nn.functional.unfold", low_precision=("float32", "bfloat16"),
)


record(
    "fold", fn=fold, public=("jaxrules.nn.fold",), formula_ops=("fold",),
    seed=("col2im (derivatives.yaml)", "im2col (derivatives.yaml)"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 2, 12, 4), (3, 4), (2, 3)), {"dilation": (1, 2), "padding": 1, "stride": (2, 1)}),
        Sample((normal(rng, dt, 8, 6), (3, 4), 2)),  # unbatched, overlapping blocks summed
        Sample((normal(rng, dt, 0, 4, 4), 3, 2)),  # empty batch
    ],
    torch_fn=lambda torch, *args, **kwargs: torch.nn.functional.fold(*args, **kwargs),
    torch_name="torch.nn.functional.fold", low_precision=("float32", "bfloat16"),
)


def _torch_max_pool(torch, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    fn = getattr(torch.nn.functional, f"max_pool{x.ndim - 2}d")
    return fn(x, kernel_size, stride, padding, dilation, ceil_mode)


def _pool_samples(rng, dt):
    return [
        Sample((distinct(rng, dt, 2, 2, 7), 3), {"stride": 2, "padding": 1}),
        Sample((distinct(rng, dt, 1, 2, 5, 6), (2, 3)), {"stride": (2, 2), "dilation": (1, 2), "ceil_mode": True}),
        Sample((distinct(rng, dt, 1, 1, 4, 4, 4), 2),),
    ]


record(
    "max_pool", fn=max_pool,
    public=("jaxrules.nn.max_pool", "jaxrules.nn.max_pool1d", "jaxrules.nn.max_pool2d",
            "jaxrules.nn.max_pool3d"),
    formula_ops=("max_pool",), seed=("max_pool2d_with_indices_backward", "max_pool_double_backward"),
    samples=_pool_samples, torch_fn=_torch_max_pool, torch_name="torch.nn.functional.max_pool1d/2d/3d",
    singular=(SingularPoint("ties: the derivative to the first maximum only",
                            (f64(1.0, 3.0, 3.0, 2.0).reshape(1, 1, 4), 2), (f64(0, 2, 1, 0).reshape(1, 1, 4),),
                            {"stride": 1}),),
)


def _torch_avg_pool(torch, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                    divisor_override=None):
    fn = getattr(torch.nn.functional, f"avg_pool{x.ndim - 2}d")
    extra = {} if divisor_override is None else {"divisor_override": divisor_override}  # torch's 1d: none
    return fn(x, kernel_size, stride, padding, ceil_mode, count_include_pad, **extra)


record(
    "avg_pool", fn=avg_pool,
    public=("jaxrules.nn.avg_pool", "jaxrules.nn.avg_pool1d", "jaxrules.nn.avg_pool2d",
            "jaxrules.nn.avg_pool3d"),
    formula_ops=("avg_pool",), seed=("avg_pool2d_backward", "avg_pool3d_backward"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 2, 2, 7), 3), {"stride": 2, "padding": 1}),
        Sample((normal(rng, dt, 1, 3, 8), 3), {"stride": 2, "padding": 1, "ceil_mode": True,
                                               "count_include_pad": False}),
        # ceil_mode: a 4th window would start in the right padding (dropped); the 3rd reaches past it
        Sample((normal(rng, dt, 1, 1, 5), 2), {"stride": 2, "padding": 1, "ceil_mode": True}),
        Sample((normal(rng, dt, 1, 2, 5, 6), (2, 3)), {"stride": (2, 2), "padding": (1, 1), "ceil_mode": True,
                                                       "divisor_override": 4}),
        Sample((normal(rng, dt, 1, 1, 4, 5, 3), 2), {"stride": (1, 2, 2), "padding": (0, 1, 1),
                                                     "count_include_pad": False}),
        Sample((normal(rng, dt, 2, 2, 9, 4), (3, 2)), {"stride": (4, 1)}),  # trailing input in no window
    ],
    torch_fn=_torch_avg_pool, torch_name="torch.nn.functional.avg_pool1d/2d/3d",
)


def _torch_adaptive_pool(kind):
    def reference(torch, x, output_size, **kwargs):
        return getattr(torch.nn.functional, f"adaptive_{kind}_pool{x.ndim - 2}d")(x, output_size, **kwargs)

    return reference


record(
    "adaptive_avg_pool", fn=_adaptive_avg_pool_nd,
    public=("jaxrules.nn.adaptive_avg_pool1d", "jaxrules.nn.adaptive_avg_pool2d",
            "jaxrules.nn.adaptive_avg_pool3d"),
    formula_ops=("adaptive_avg_pool",), seed=("_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 2, 2, 7), 3)),
        Sample((normal(rng, dt, 1, 2, 5, 6), (3, None))),
        Sample((normal(rng, dt, 1, 1, 4, 5, 3), (2, 7, 1))),  # 7 > 5: overlapping windows
    ],
    torch_fn=_torch_adaptive_pool("avg"), torch_name="torch.nn.functional.adaptive_avg_pool1d/2d/3d",
)


record(
    "adaptive_max_pool", fn=_adaptive_max_pool_nd,
    public=("jaxrules.nn.adaptive_max_pool1d", "jaxrules.nn.adaptive_max_pool2d",
            "jaxrules.nn.adaptive_max_pool3d"),
    formula_ops=("adaptive_max_pool",),
    seed=("adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward",
          "max_pool_double_backward"),
    samples=lambda rng, dt: [
        Sample((distinct(rng, dt, 2, 2, 7), 3)),
        Sample((distinct(rng, dt, 1, 2, 5, 6), (4, None))),
        Sample((distinct(rng, dt, 1, 1, 4, 5, 3), (2, 7, 1))),
    ],
    torch_fn=_torch_adaptive_pool("max"), torch_name="torch.nn.functional.adaptive_max_pool1d/2d/3d",
    # windows [0, 2), [1, 3), [2, 4): the tie 3, 3 goes to the first; the middle 3 wins twice
    singular=(SingularPoint("ties: the derivative to the first maximum only", (f64(1.0, 3.0, 3.0, 2.0).reshape(1, 1, 4), 3),
                            (f64(0, 2, 1, 0).reshape(1, 1, 4),)),),
)
