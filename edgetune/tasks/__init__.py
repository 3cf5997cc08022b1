"""Models to tune: demo networks built in code and ONNX files, as Relax modules."""

from edgetune.tasks.demo import demo_model_names
from edgetune.tasks.models import InputSpec, LoadedModel, load_model, prepare_for_tuning

__all__ = ["InputSpec", "LoadedModel", "demo_model_names", "load_model", "prepare_for_tuning"]
