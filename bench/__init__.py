"""Benchmark and evaluation scripts that print figures (LoCoMo evidence recall, ...).

Importing the package sets the offline model environment every bench needs (models ship inside packages;
no hub is reachable), unless the caller set the variables: a script run as ``python bench/x.py`` puts the
repository on ``sys.path`` and imports ``bench`` before any model library.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
