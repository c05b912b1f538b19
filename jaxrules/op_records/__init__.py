"""The registry records: one module per ops family (``jaxrules.op_records.<family>`` beside
``jaxrules.ops.<family>``, in the same order) and ``nested`` for the NestedTensor ops. Importing
this package registers every record; only ``registry.load_records()`` does, so ``import
jaxrules`` and its namespaces load no records (nor their samples and torch references). Its name
is not ``records``: importing a ``jaxrules.records`` package would replace the public function
``jaxrules.records``."""

import importlib

from jaxrules import ops

__all__ = [*ops.__all__, "nested"]

for _module in __all__:  # importing a records module registers its records
    importlib.import_module(f"{__name__}.{_module}")
