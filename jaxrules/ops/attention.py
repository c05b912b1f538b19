"""Dense attention and bilinear forms with torch.nn.functional's semantics:
``scaled_dot_product_attention`` and ``bilinear`` (issue 17). Their registry records live here
too."""

from __future__ import annotations

__all__: list[str] = []
