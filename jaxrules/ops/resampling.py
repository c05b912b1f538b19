"""Resampling with torch.nn.functional's semantics (channels first): ``interpolate``,
``grid_sample`` and ``affine_grid`` (issue 17). Their registry records live here too."""

from __future__ import annotations

__all__: list[str] = []
