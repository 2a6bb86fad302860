"""The asv result reader as ``history/store.py`` imports it; each record kind lives in a module of its
own (``gate_record.py``, ``regression_record.py``, ``asv_files.py``, checked with ``schema.py``)."""

from harness.core.asv_files import read_asv_result

__all__ = ["read_asv_result"]
