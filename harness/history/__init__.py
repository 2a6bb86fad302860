"""The performance history: the asv runs (``bench``, ``backfill``, ``asvrun``), the asv machine and
plugins, the committed store (``store.py``) and the append-only
``asv-results`` branch, the change-point check on main, the site."""
