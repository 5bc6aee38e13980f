"""Reference (PyTorch) implementations of the surrogate families, used to check the C++ library.

Only the ``flare`` family exists so far; see ``surrogate_ref.flare``.
"""

from . import flare  # noqa: F401
from .flare import FLAREModel, load_model_file, predict_batched, predict_physical  # noqa: F401
