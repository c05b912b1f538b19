"""Registry records of ``jaxrules.ops.resampling``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import numpy as np

from jaxrules.ops._sampling import f64, normal
from jaxrules.ops.resampling import affine_grid, grid_sample, interpolate
from jaxrules.registry import Sample, SingularPoint, record


def _torch_interpolate(torch, x, **kwargs):
    return torch.nn.functional.interpolate(x, **kwargs)


def _interpolate_samples(rng, dt):
    return [
        Sample((normal(rng, dt, 2, 2, 5),), {"size": 7}),
        Sample((normal(rng, dt, 1, 2, 3, 4),), {"scale_factor": (2.0, 1.5)}),
        Sample((normal(rng, dt, 1, 1, 2, 3, 2),), {"size": (3, 2, 4), "mode": "nearest-exact"}),
        Sample((normal(rng, dt, 2, 2, 5),), {"scale_factor": 1.7, "mode": "linear"}),
        Sample((normal(rng, dt, 1, 2, 4),), {"size": 3, "mode": "linear", "align_corners": True}),
        Sample((normal(rng, dt, 1, 2, 3, 4),), {"scale_factor": (1.5, 0.6), "mode": "bilinear"}),
        Sample((normal(rng, dt, 1, 1, 4, 3),), {"size": (5, 5), "mode": "bilinear", "align_corners": True}),
        Sample((normal(rng, dt, 1, 2, 4, 3),), {"size": (6, 2), "mode": "bicubic"}),
        Sample((normal(rng, dt, 1, 1, 5, 4),), {"scale_factor": 0.7, "mode": "bicubic", "recompute_scale_factor": True}),
        Sample((normal(rng, dt, 1, 1, 3, 3),), {"size": (4, 2), "mode": "bicubic", "align_corners": True}),
        Sample((normal(rng, dt, 1, 1, 2, 3, 3),), {"scale_factor": (1.5, 1.0, 0.7), "mode": "trilinear"}),
        Sample((normal(rng, dt, 1, 2, 5, 4),), {"size": (3, 2), "mode": "area"}),
        Sample((normal(rng, dt, 1, 1, 7, 5),), {"size": (3, 2), "mode": "bilinear", "antialias": True}),
        Sample((normal(rng, dt, 1, 1, 6, 4),), {"scale_factor": (0.6, 1.5), "mode": "bicubic", "antialias": True}),
        Sample((normal(rng, dt, 0, 2, 3, 3),), {"size": 4, "mode": "bilinear"}),  # empty batch
    ]


def _interpolate_empty_samples(rng, dt):
    """Empty batches through each mode (torch takes them), and no channels (torch refuses)."""
    return [
        Sample((normal(rng, dt, 0, 2, 5),), {"size": 7}),
        Sample((normal(rng, dt, 0, 2, 5),), {"scale_factor": 1.7, "mode": "linear"}),
        Sample((normal(rng, dt, 0, 2, 4, 3),), {"size": (5, 6), "mode": "bicubic"}),
        Sample((normal(rng, dt, 0, 1, 2, 3, 2),), {"size": (3, 2, 4), "mode": "trilinear"}),
        Sample((normal(rng, dt, 0, 1, 7, 5),), {"size": (3, 2), "mode": "bilinear", "antialias": True}),
        Sample((normal(rng, dt, 2, 0, 5, 4),), {"size": (3, 2), "mode": "area"}),
    ]


_INTERPOLATE_DEVIATIONS = (
    "torch's CPU backward is not the transpose of its forward in two cases, and jaxrules' VJP is "
    "(the derivative of the values, which match torch's): nearest on 3-d/5-d input with a "
    "scale_factor whose output size is n or 2n but whose ratio is not 1 or 2 (the backward's "
    "nearest_idx copies or halves, the forward reads floor(i / scale_factor)), and bicubic with a "
    "scale_factor keeping a size (the backward copies, the forward resamples at 1 / scale_factor). "
    "With antialias and an output width of 1 (the height resampled), torch 2.13's CPU forward "
    "repeats its first output row; jaxrules computes the separable filter (torch's own backward "
    "and its height and width passes run one after the other agree with it)."
)

record(
    "interpolate", fn=interpolate, public=("jaxrules.nn.interpolate",),
    formula_ops=("interpolate", "adaptive_avg_pool"),
    seed=("upsample_nearest1d_backward", "upsample_nearest2d_backward", "upsample_nearest3d_backward",
          "upsample_linear1d_backward", "upsample_bilinear2d_backward", "upsample_bicubic2d_backward",
          "upsample_trilinear3d_backward", "_upsample_bilinear2d_aa_backward", "_upsample_bicubic2d_aa_backward",
          "_adaptive_avg_pool2d_backward"),
    samples=_interpolate_samples, torch_fn=_torch_interpolate, torch_name="torch.nn.functional.interpolate",
    low_precision=("float32", "bfloat16"), deviations=_INTERPOLATE_DEVIATIONS, empty_samples=_interpolate_empty_samples,
)


def _torch_grid_sample(torch, x, grid, **kwargs):
    return torch.nn.functional.grid_sample(x, grid, **kwargs)


def _grid(rng, dt, batch, out_spatial, spatial, align_corners, reach):
    """A grid of normalized positions whose pixel positions (up to ``reach`` pixels outside the
    input) sit away from every kink: fractions in (0.15, 0.35) or (0.65, 0.85), so neither
    integers (bilinear corners, clipped borders) nor half-integers (nearest's ties, reflections
    without align_corners)."""
    coords = []
    for size in reversed(spatial):  # x (width) first
        whole = rng.integers(-reach, size + reach, (batch, *out_spatial))
        pos = whole + rng.uniform(0.15, 0.35, whole.shape) + 0.5 * rng.integers(0, 2, whole.shape)
        coords.append(2 * pos / (size - 1) - 1 if align_corners else (2 * pos + 1) / size - 1)
    return np.stack(coords, axis=-1).astype(dt)


def _grid_sample_samples(rng, dt):
    def sample(x_shape, out_spatial, reach, **kwargs):
        ac = kwargs.get("align_corners", False)
        grid = _grid(rng, dt, x_shape[0], out_spatial, x_shape[2:], ac, reach)
        return Sample((normal(rng, dt, *x_shape), grid), kwargs)

    return [
        sample((1, 2, 3, 4), (2, 3), 1, align_corners=False),
        sample((2, 1, 3, 3), (2, 2), 2, padding_mode="border", align_corners=True),
        sample((1, 2, 3, 4), (2, 3), 4, padding_mode="reflection", align_corners=False),
        sample((1, 2, 3, 3), (2, 2), 1, mode="nearest", align_corners=False),
        sample((1, 1, 2, 3, 3), (1, 2, 2), 1, padding_mode="border", align_corners=False),
        sample((1, 1, 4, 3), (2, 2), 2, mode="bicubic", padding_mode="reflection", align_corners=True),
        sample((0, 2, 3, 3), (2, 2), 1, align_corners=True),  # empty batch
    ]


def _grid_sample_empty_samples(rng, dt):
    """An empty batch (2-d, 3-d), no sampled points (the input's gradient is zeros, not empty) and
    no channels (the grid's gradient is zeros); torch takes all of them."""
    def sample(x_shape, out_spatial, **kwargs):
        grid = _grid(rng, dt, x_shape[0], out_spatial, x_shape[2:], kwargs.get("align_corners", False), 1)
        return Sample((normal(rng, dt, *x_shape), grid), kwargs)

    return [
        sample((0, 2, 3, 4), (2, 3), align_corners=False),
        sample((0, 1, 2, 3, 3), (1, 2, 2), padding_mode="border", align_corners=True),
        sample((1, 2, 3, 4), (0, 3), align_corners=False),
        sample((1, 1, 4, 3), (2, 0), mode="bicubic", padding_mode="reflection", align_corners=True),
        sample((1, 0, 3, 4), (2, 3), mode="nearest", align_corners=False),
    ]


def _row(*values):
    return f64(*values).reshape(1, 1, 1, -1)


_GRID_SAMPLE_SINGULAR = (
    # pixel 1 of [1, 4, 2] (align_corners: x = 0 -> 1; a 1-pixel height -> y's multiplier 0): the
    # grid's derivative is the one-sided slope of the cell to the right, 2 - 4 (torch's floor)
    SingularPoint("bilinear at a pixel centre: the right cell's slope", (_row(1.0, 4.0, 2.0), _row(0.0, 0.0)),
                  (_row(0.0, 1.0, 0.0), _row(-2.0, 0.0)), {"align_corners": True}),
    # border: x = -1 -> pixel 0 exactly: torch's clip counts the border as outside, derivative 0
    SingularPoint("border padding at the border: zero grid derivative", (_row(1.0, 4.0, 2.0), _row(-1.0, 0.0)),
                  (_row(1.0, 0.0, 0.0), _row(0.0, 0.0)), {"align_corners": True, "padding_mode": "border"}),
    # reflection: x = 1 -> pixel 2, the reflection point: clipped there, derivative 0
    SingularPoint("reflection at the border: zero grid derivative", (_row(1.0, 4.0, 2.0), _row(1.0, 0.0)),
                  (_row(0.0, 0.0, 1.0), _row(0.0, 0.0)), {"align_corners": True, "padding_mode": "reflection"}),
    # nearest: pixel 1.5 (width 4, x = 0, no align_corners) rounds half to even -> 2
    SingularPoint("nearest at a tie: half to even, zero grid derivative",
                  (_row(1.0, 4.0, 2.0, 3.0), _row(0.0, 0.0)), (_row(0.0, 0.0, 1.0, 0.0), _row(0.0, 0.0)),
                  {"mode": "nearest"}),
)

record(
    "grid_sample", fn=grid_sample, public=("jaxrules.nn.grid_sample",), formula_ops=("grid_sample",),
    seed=("grid_sampler_2d_backward", "grid_sampler_3d_backward"),  # CPU kernels (GridSamplerKernel.cpp)
    samples=_grid_sample_samples, torch_fn=_torch_grid_sample, torch_name="torch.nn.functional.grid_sample",
    low_precision=("float32",), singular=_GRID_SAMPLE_SINGULAR, empty_samples=_grid_sample_empty_samples,
)


def _torch_affine_grid(torch, theta, size, **kwargs):
    return torch.nn.functional.affine_grid(theta, size, **kwargs)


record(
    "affine_grid", fn=affine_grid, public=("jaxrules.nn.affine_grid",), formula_ops=("affine_grid",),
    seed=("affine_grid_generator_backward",),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 2, 2, 3), (2, 3, 3, 4)), {"align_corners": False}),
        Sample((normal(rng, dt, 1, 2, 3), (1, 1, 1, 3)), {"align_corners": True}),
        Sample((normal(rng, dt, 1, 3, 4), (1, 2, 2, 3, 2)), {"align_corners": True}),
    ],
    torch_fn=_torch_affine_grid, torch_name="torch.nn.functional.affine_grid", low_precision=("float32", "bfloat16"),
    # torch refuses every zero-size size ("Expected non-zero, positive output size")
    empty_samples=lambda rng, dt: [
        Sample((normal(rng, dt, 0, 2, 3), (0, 3, 3, 4)), {"align_corners": False}),
        Sample((normal(rng, dt, 2, 2, 3), (2, 3, 0, 4)), {"align_corners": True}),
        Sample((normal(rng, dt, 0, 3, 4), (0, 2, 2, 3, 2)), {"align_corners": True}),
    ],
)
