"""``torch.nn``'s functional half: ``jaxrules.torch.nn.functional`` (torch's signatures)."""

from jaxrules.torch.nn import functional

__all__ = ["functional"]
