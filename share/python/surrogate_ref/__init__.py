"""Reference (PyTorch) implementations of the surrogate families, used to check the C++ library.

Only the ``flare`` family exists so far; see ``surrogate_ref.flare``.
"""

from . import compat, flare
from .flare import FLAREModel, load_model_file, predict_batched, predict_physical

__all__ = ["compat", "flare", "FLAREModel", "load_model_file", "predict_batched", "predict_physical"]
