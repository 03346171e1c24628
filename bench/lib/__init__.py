"""What the bench scripts share and the tests import: dataset loaders and recall counting (``locomo``,
``longmemeval``), the retrieval evaluations (``retrieval``), the embedded default as the benches run it
(``embedded``), grown stores from a seed (``seed``), the perception floors' helpers (``speech``, ``vision``,
``entities``), the distributed ingest measurement (``distributed``) and the typed-memory fact
scoring (``facts``).

A module here imports no bench script; each script (``python bench/<name>.py``) makes one measurement and imports
what it shares from here. Importing ``bench.lib`` imports ``bench`` first, which sets the offline model
environment.
"""
