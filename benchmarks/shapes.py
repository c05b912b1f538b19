"""Shapes of real models for the normalization ops, drawn at random, and the committed held-out draw.

The held-out draw (``held_out()``: ``HELD_OUT_POINTS`` points from ``HELD_OUT_SEED``) judges the
normalization defaults at shapes no decision was tuned on; nothing in ``jaxrules`` reads it. The
rules of the XLA formulas (``partials.normalization.direct_forms``, its ``ONE_PASS_*`` thresholds,
and ``WEIGHT_SUMS_MIN_ROWS``) were chosen on the draws of ``SEEN_SEEDS`` (``TUNING_SEED``'s, one
whose results showed the long-row clause was needed, one whose results set the weight sums' row
count) and on grids of long rows (``long_rows_grid()``) and of many rows (``many_rows_grid()``,
token counts between powers of two); the held-out draw excludes their
points. A point is ``(op, shape, dtype, weight_dtype)``:

* ``layer_norm`` / ``rms_norm`` on ``(tokens, width)``: widths of open transformer models from
  256 to 16384 (``WIDTHS``: GPT-2's 768-1600, Llama/Mistral/Qwen/Gemma's 2048-16384, ...), token
  counts ``batch * sequence`` from 512 to 65536 (sequences 512-8192), capped at ``MAX_ELEMENTS``;
* ``batch_norm`` on ResNet-50's and ConvNeXt-like stages' feature maps ``(N, C, H, W)`` (batch
  8-256), ``group_norm`` (32 groups) on UNet stages (pixel and latent space, batch 1-64) and on
  ResNet stages;
* dtypes: ``bfloat16``, ``float16``, ``float32``; a half-precision input takes float32 weights in
  a quarter of the draws (mixed precision).

``python benchmarks/shapes.py`` prints the held-out draw.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

HELD_OUT_SEED = 20261204
TUNING_SEED = 20261202
SEEN_SEEDS = (TUNING_SEED, 7, 20261203)  # draws whose results informed the rule: never held out again
HELD_OUT_POINTS = 240
MAX_ELEMENTS = 2**28  # 512 MiB of bfloat16 per tensor: x, y, the cotangent and dx fit in a GPU many times over

WIDTHS = (256, 384, 512, 640, 768, 1024, 1280, 1536, 1600, 2048, 2304, 2560, 3072, 3584, 4096, 5120, 6144,
          7168, 8192, 12288, 16384)
SEQUENCES = (512, 1024, 2048, 4096, 8192)
BATCHES = (1, 2, 4, 8, 16, 32, 64)
MIN_TOKENS, MAX_TOKENS = 512, 65536

# (channels, height = width) of the normalized feature maps of each family's stages.
RESNET = ((64, 112), (64, 56), (256, 56), (128, 56), (128, 28), (512, 28), (256, 28), (256, 14),
          (1024, 14), (512, 14), (512, 7), (2048, 7))
CONVNEXT = ((96, 56), (192, 28), (384, 14), (768, 7))
UNET = ((64, 256), (128, 128), (256, 64), (512, 32), (1024, 16),  # pixel space
        (128, 64), (320, 64), (640, 32), (1280, 16), (1280, 8))  # latent space (Stable Diffusion-like)
FAMILIES = {"batch_norm": (RESNET + CONVNEXT, (8, 16, 32, 64, 128, 256)),
            "group_norm": (UNET + RESNET, (1, 2, 4, 8, 16, 32, 64))}
GROUPS = 32
DTYPES = ("bfloat16", "float16", "float32")
OPS = ("layer_norm", "rms_norm", "batch_norm", "group_norm")


@dataclasses.dataclass(frozen=True)
class Point:
    """One shape to time: the op, x's shape, x's and the weights' dtypes."""

    op: str
    shape: tuple
    dtype: str
    weight_dtype: str

    @property
    def channels(self) -> int:
        """The length of the weight: the width (layer/RMS norm) or the channels."""
        return self.shape[-1] if self.op in ("layer_norm", "rms_norm") else self.shape[1]

    @property
    def name(self) -> str:
        mixed = "" if self.dtype == self.weight_dtype else f"+{self.weight_dtype}-weights"
        return f"{self.op} {'x'.join(map(str, self.shape))} {self.dtype}{mixed}"


def _dtypes(rng) -> tuple[str, str]:
    dtype = DTYPES[rng.integers(len(DTYPES))]
    mixed = dtype != "float32" and rng.random() < 0.25
    return dtype, "float32" if mixed else dtype


def _rows_shape(rng) -> tuple[int, int]:
    """(tokens, width): a width of ``WIDTHS``, tokens = batch x sequence within the bounds."""
    width = int(WIDTHS[rng.integers(len(WIDTHS))])
    while True:
        tokens = int(BATCHES[rng.integers(len(BATCHES))] * SEQUENCES[rng.integers(len(SEQUENCES))])
        if MIN_TOKENS <= tokens <= MAX_TOKENS and tokens * width <= MAX_ELEMENTS:
            return tokens, width


def _map_shape(op, rng) -> tuple[int, int, int, int]:
    """(N, C, H, W) of a stage of the op's model families, N within the family's batches and the
    element cap."""
    stages, batches = FAMILIES[op]
    channels, side = stages[rng.integers(len(stages))]
    fitting = [n for n in batches if n * channels * side * side <= MAX_ELEMENTS]
    return int(fitting[rng.integers(len(fitting))]), channels, side, side


def draw(seed: int, count: int, exclude=()) -> list[Point]:
    """``count`` points drawn with ``np.random.default_rng(seed)``: the op uniformly, then its
    shape and dtypes; a repeated point, or one of ``exclude``, is drawn again."""
    rng = np.random.default_rng(seed)
    points: list[Point] = []
    excluded = set(exclude)
    while len(points) < count:
        op = OPS[rng.integers(len(OPS))]
        shape = _rows_shape(rng) if op in ("layer_norm", "rms_norm") else _map_shape(op, rng)
        point = Point(op, shape, *_dtypes(rng))
        if point not in points and point not in excluded:
            points.append(point)
    return points


def long_rows_grid() -> list[Point]:
    """Layer norms of fewer rows than the one-pass forms' many groups and rows of 4096-16384 (the
    widths of large transformers), in each dtype."""
    return [Point("layer_norm", (rows, width), d, d) for d in DTYPES
            for rows in (1024, 2048, 4096, 6144) for width in (4096, 6144, 8192, 12288, 16384)]


def many_rows_grid() -> list[Point]:
    """Layer norms of 4096-8192 rows, token counts between the powers of two that ``draw`` makes
    (a batch of 5, 6 or 7 sequences of 1024, or 3 of 2048), of 512-6144, in each dtype."""
    return [Point("layer_norm", (rows, width), d, d) for d in DTYPES for rows in (4096, 5120, 6144, 7168, 8192)
            for width in (512, 768, 1024, 1536, 2048, 2560, 3072, 4096, 6144)]


def seen() -> list[Point]:
    """The points whose results informed a decision: the draws of ``SEEN_SEEDS``, the long-rows
    and many-rows grids."""
    return [p for s in SEEN_SEEDS for p in draw(s, HELD_OUT_POINTS)] + long_rows_grid() + many_rows_grid()


def held_out() -> list[Point]:
    """The committed held-out draw: none of its points is in ``seen()``."""
    return draw(HELD_OUT_SEED, HELD_OUT_POINTS, exclude=seen())


def tensor_bytes(point: Point) -> int:
    """Bytes of one tensor of x's shape and dtype."""
    return math.prod(point.shape) * np.dtype(_np_dtype(point.dtype)).itemsize


def _np_dtype(name: str):
    import ml_dtypes

    return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


if __name__ == "__main__":
    for p in held_out():
        print(p.name)
