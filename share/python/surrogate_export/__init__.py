"""``surrogate-export``: PyTorch checkpoints -> surrogate model files (share/docs/model-format.md).

Layout: ``common`` holds what every family shares (checkpoint loading and containers, key prefixes,
validation reports, config / normalisation / fields files, the HDF5 writer); one module per family
(``flare``, ``erwin``; later bsa, hept, sequoia, spherical) turns a config plus the weights into the
family's canonical /config and the expected tensor shapes; ``cli`` is the command line.
"""

from .cli import FAMILIES, main
from .common import ExportError

__all__ = ["FAMILIES", "ExportError", "main"]
