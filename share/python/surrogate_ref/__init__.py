"""Reference (PyTorch) implementations of the surrogate families, used to check the C++ library.

Families: ``flare`` (``surrogate_ref.flare``) and ``erwin`` (``surrogate_ref.erwin``, the forward with
the ball tree given by the caller).
"""

from . import compat, erwin, flare
from .flare import FLAREModel, load_model_file, predict_batched, predict_physical

__all__ = ["compat", "erwin", "flare", "FLAREModel", "load_model_file", "predict_batched", "predict_physical"]
