"""MetaTune: a meta-learned cost model (graph encoding, GCN + MAML, MetaSchedule cost model, CLI).

Importing this package does not import PyTorch: only :mod:`.net` does, and the
cost model and pre-training load it when used (``edgetune[meta]``).
"""

from .modelfile import FORMAT_VERSION, ModelFile, bundled_model, load_model_file

__all__ = ["FORMAT_VERSION", "ModelFile", "bundled_model", "load_model_file"]
