"""Parts of the exporter shared by every family: checkpoint loading, containers, key prefixes,
validation reports, config / normalisation / fields files and the HDF5 writer (model format v1)."""

import datetime
import json
import os
import re
import sys
import tempfile
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np

EXPORTER = "surrogate-export 0.1.0"
FORMAT = "surrogate-model"
FORMAT_VERSION = 1
STRIP_COMPONENTS = ("module", "_orig_mod")  # DataParallel / DDP and torch.compile wrappers


class ExportError(Exception):
    """An expected failure: reported as one message on stderr, exit code 2, no traceback."""


def note(message):
    print(f"surrogate-export: note: {message}", file=sys.stderr)


def _first_line(exc):
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _list(items, limit=None):
    items = list(items)
    if limit is not None and len(items) > limit:
        return ", ".join(items[:limit]) + f", ... ({len(items) - limit} more)"
    return ", ".join(items)


# --------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------

def _looks_like_torch_file(path):
    """torch.save zip archives (``*/data.pkl``) or the legacy pickle format (magic number first)."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                return any(name.endswith("data.pkl") for name in zf.namelist())
        with open(path, "rb") as f:
            head = f.read(4)
        return head[:3] == b"\x80\x02\x8a"
    except OSError:
        return False


def load_checkpoint(path, unsafe=False):
    """``torch.load(path, map_location="cpu")``.

    On torch >= 2 the safe loader (``weights_only=True``) is used unless ``unsafe``. torch 1.13's
    weights-only unpickler cannot read plain floats (pickle opcode BINFLOAT) and so refuses every trainer
    snapshot: there, as on older torch, the file is loaded with the ordinary unpickler.
    """
    import torch
    from surrogate_ref.compat import TORCH_VERSION, load_supports_weights_only

    p = Path(path)
    if not p.exists():
        raise ExportError(f"checkpoint {path} does not exist")
    if not p.is_file():
        raise ExportError(f"checkpoint {path} is not a file")
    safe = TORCH_VERSION >= (2, 0, 0) and load_supports_weights_only()
    weights_only = safe and not unsafe
    try:
        if safe:
            return torch.load(str(p), map_location="cpu", weights_only=weights_only)
        return torch.load(str(p), map_location="cpu")
    except Exception as exc:  # torch raises many types here (UnpicklingError, RuntimeError, ...)
        if not _looks_like_torch_file(p):
            raise ExportError(f"{path} is not a PyTorch checkpoint (torch.load failed: {_first_line(exc)})")
        if weights_only:
            raise ExportError(
                f"{path} could not be loaded with torch.load(weights_only=True) ({_first_line(exc)}). "
                "It holds objects other than tensors and plain containers. If you trust the file, run again "
                "with --unsafe-load (full pickle: loading can execute code stored in the file).")
        raise ExportError(f"could not load {path}: {_first_line(exc)}")


def _is_tensor(value):
    import torch
    return isinstance(value, torch.Tensor)


def _is_state_dict(obj):
    return isinstance(obj, dict) and len(obj) > 0 and all(
        isinstance(k, str) and _is_tensor(v) for k, v in obj.items())


def unwrap_container(obj, path="checkpoint"):
    """Return (model_state, ema_shadow or None, kind) with kind ``trainer`` or ``state_dict``.

    Accepted: the FLARE.py trainer snapshot (``model_state`` [+ ``ema_shadow``]), a bare state_dict,
    or a dict holding one under ``state_dict``, ``model`` or ``model_state_dict`` (Erwin's training
    scripts).
    """
    if not isinstance(obj, dict):
        raise ExportError(f"{path} holds a {type(obj).__name__}, not a dict of weights; save the model's "
                          "state_dict() (or the trainer snapshot) instead")
    if "model_state" in obj:
        state = obj["model_state"]
        if not _is_state_dict(state):
            raise ExportError(f"{path}: 'model_state' is not a dict of tensors")
        ema = obj.get("ema_shadow")
        if ema is not None and not _is_state_dict(ema):
            raise ExportError(f"{path}: 'ema_shadow' is not a dict of tensors")
        return state, ema, "trainer"
    if _is_state_dict(obj):
        return obj, None, "state_dict"
    for key in ("state_dict", "model", "model_state_dict"):  # the last: Erwin's training checkpoints
        if key in obj and _is_state_dict(obj[key]):
            return obj[key], None, "state_dict"
    keys = _list((repr(k) for k in obj), limit=12) or "none"
    raise ExportError(f"{path} holds no model weights: expected a trainer checkpoint with 'model_state', a "
                      f"state_dict, or a dict with 'state_dict', 'model' or 'model_state_dict'; its top-level keys are {keys}")


def strip_key(key):
    """Drop every ``module`` / ``_orig_mod`` path component, wherever it is."""
    return ".".join(part for part in key.split(".") if part not in STRIP_COMPONENTS)


def strip_prefixes(state, what="state_dict"):
    out = OrderedDict()
    for key, value in state.items():
        new = strip_key(key)
        if new in out:
            raise ExportError(f"{what}: two keys map to {new!r} once 'module.'/'_orig_mod.' are removed")
        out[new] = value
    return out


def select_weights(model_state, ema_shadow, kind, choice):
    """Apply --weights: returns (state with stripped keys, variant recorded in @weights_variant)."""
    state = strip_prefixes(model_state, "model_state" if kind == "trainer" else "state_dict")
    if choice is None:
        choice = "ema" if ema_shadow is not None else "raw"
    if choice == "raw":
        return state, ("raw" if kind == "trainer" else "state_dict")
    if choice != "ema":
        raise ExportError(f"--weights must be 'ema' or 'raw', got {choice!r}")
    if ema_shadow is None:
        where = "trainer checkpoint" if kind == "trainer" else "bare state_dict"
        raise ExportError(f"--weights ema: this {where} has no 'ema_shadow' (EMA weights); use --weights raw")
    ema = strip_prefixes(ema_shadow, "ema_shadow")
    stray = [k for k in ema if k not in state]
    if stray:
        raise ExportError("ema_shadow holds tensors that model_state does not have: " + _list(stray, 20))
    kept = [k for k in state if k not in ema and not k.endswith("num_batches_tracked")]
    if kept:
        note(f"{len(kept)} tensor(s) are not in ema_shadow and are taken from model_state: " + _list(kept, 8))
    merged = OrderedDict((k, ema.get(k, v)) for k, v in state.items())
    return merged, "ema"


def validate_state(expected, state, context):
    """Compare tensor names and shapes with ``expected`` (OrderedDict key -> shape).

    Drops ``num_batches_tracked`` only; refuses with one message listing every missing, unexpected
    and mis-shaped tensor. Returns an OrderedDict key -> float32 numpy array in expected order.
    """
    state = OrderedDict((k, v) for k, v in state.items() if not k.split(".")[-1] == "num_batches_tracked")
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    bad_shape, bad_type = [], []
    for key, shape in expected.items():
        if key in state:
            tensor = state[key]
            if tuple(tensor.shape) != tuple(shape):
                bad_shape.append(f"{key}: expected {tuple(shape)}, found {tuple(tensor.shape)}")
            elif not tensor.is_floating_point():
                bad_type.append(f"{key}: {tensor.dtype}")
    if missing or unexpected or bad_shape or bad_type:
        lines = [f"the weights do not match {context}:"]
        if missing:
            lines.append(f"  missing ({len(missing)}): " + _list(missing))
        if unexpected:
            lines.append(f"  unexpected ({len(unexpected)}): " + _list(unexpected))
        if bad_shape:
            lines.append(f"  wrong shape ({len(bad_shape)}): " + "; ".join(bad_shape))
        if bad_type:
            lines.append(f"  not floating point ({len(bad_type)}): " + "; ".join(bad_type))
        raise ExportError("\n".join(lines))
    weights = OrderedDict()
    downcast = []
    for key in expected:
        tensor = state[key].detach().cpu()
        if tensor.element_size() > 4:
            downcast.append(key)
        array = tensor.float().contiguous().numpy()
        if not np.all(np.isfinite(array)):
            raise ExportError(f"tensor {key} holds non-finite values (nan or inf)")
        weights[key] = array
    if downcast:
        note(f"{len(downcast)} tensor(s) are stored with more than 32 bits and are rounded to float32")
    return weights


# --------------------------------------------------------------------------------------------------
# Config, normalisation and fields files
# --------------------------------------------------------------------------------------------------

def read_config(text):
    """``--config``: a .yaml/.yml/.json file or an inline JSON object. Returns (dict, description)."""
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ExportError(f"--config: inline JSON does not parse: {exc}")
        origin = "inline JSON"
    else:
        p = Path(text)
        if not p.exists():
            raise ExportError(f"config file {text} does not exist")
        try:
            raw = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ExportError(f"cannot read config file {text}: {_first_line(exc)}")
        if p.suffix.lower() == ".json":
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise ExportError(f"config file {text} is not valid JSON: {exc}")
        else:
            import yaml
            try:
                data = yaml.safe_load(raw)
            except yaml.YAMLError as exc:
                raise ExportError(f"config file {text} is not valid YAML: {_first_line(exc)}")
        origin = p.name
    if not isinstance(data, dict):
        raise ExportError(f"--config {origin}: expected a mapping (dict), found {type(data).__name__}")
    return data, origin


def config_json(data):
    return json.dumps(data, sort_keys=True, default=str)


NORMALIZATION_NAMES = ("input_mean", "input_std", "output_mean", "output_std")


def load_normalization(path, in_dim, out_dim):
    """JSON or NPZ with input_mean/input_std/output_mean/output_std -> dict of float64 arrays."""
    p = Path(path)
    if not p.exists():
        raise ExportError(f"normalization file {path} does not exist")
    raw = {}
    if p.suffix.lower() == ".npz":
        try:
            with np.load(str(p), allow_pickle=False) as npz:
                raw = {k: npz[k] for k in npz.files}
        except Exception as exc:
            raise ExportError(f"cannot read normalization file {path}: {_first_line(exc)}")
    else:
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ExportError(f"normalization file {path} is not valid JSON: {_first_line(exc)}")
        if not isinstance(raw, dict):
            raise ExportError(f"normalization file {path}: expected a JSON object")
    unknown = sorted(set(raw) - set(NORMALIZATION_NAMES))
    if unknown:
        raise ExportError(f"normalization file {path}: unknown name(s) {', '.join(unknown)}; "
                          f"expected {', '.join(NORMALIZATION_NAMES)}")
    out = OrderedDict()
    for side, dim in (("input", in_dim), ("output", out_dim)):
        mean_key, std_key = f"{side}_mean", f"{side}_std"
        if (mean_key in raw) != (std_key in raw):
            raise ExportError(f"normalization file {path}: {mean_key} and {std_key} come in pairs")
        if mean_key not in raw:
            continue
        for key in (mean_key, std_key):
            try:
                arr = np.asarray(raw[key], dtype=np.float64)
                arr = arr.reshape(-1) if arr.ndim <= 1 else None
            except (TypeError, ValueError):
                arr = None
            if arr is None:
                raise ExportError(f"normalization {key} must be a flat list of numbers")
            if arr.shape[0] != dim:
                short = "in" if side == "input" else "out"
                raise ExportError(f"normalization {key} has {arr.shape[0]} values but the model has "
                                  f"{short}_dim = {dim}")
            if not np.all(np.isfinite(arr)):
                raise ExportError(f"normalization {key} holds non-finite values")
            if key == std_key and np.any(arr == 0.0):
                raise ExportError(f"normalization {key} holds zeros (it is a divisor)")
            out[key] = arr
    if not out:
        raise ExportError(f"normalization file {path} holds none of {', '.join(NORMALIZATION_NAMES)}")
    return out


def load_fields(path, in_dim, out_dim):
    """``{"inputs": [{"name", "unit"}], "outputs": [...]}`` -> dict of string lists (format §3)."""
    p = Path(path)
    if not p.exists():
        raise ExportError(f"fields file {path} does not exist")
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ExportError(f"fields file {path} is not valid JSON: {_first_line(exc)}")
    if not isinstance(raw, dict):
        raise ExportError(f"fields file {path}: expected a JSON object with 'inputs' and/or 'outputs'")
    unknown = sorted(set(raw) - {"inputs", "outputs"})
    if unknown:
        raise ExportError(f"fields file {path}: unknown key(s) {', '.join(unknown)}")
    out = OrderedDict()
    for side, dim in (("inputs", in_dim), ("outputs", out_dim)):
        if side not in raw:
            continue
        entries = raw[side]
        if not isinstance(entries, list):
            raise ExportError(f"fields {side} must be a list of {{'name': ..., 'unit': ...}}")
        if len(entries) != dim:
            raise ExportError(f"fields {side} lists {len(entries)} channels but the model has {dim}")
        names, units = [], []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
                raise ExportError(f"fields {side}[{i}] needs a non-empty string 'name'")
            extra = sorted(set(entry) - {"name", "unit"})
            if extra:
                raise ExportError(f"fields {side}[{i}]: unknown key(s) {', '.join(extra)}")
            unit = entry.get("unit", "")
            if not isinstance(unit, str):
                raise ExportError(f"fields {side}[{i}]: 'unit' must be a string")
            names.append(entry["name"])
            units.append(unit)
        prefix = side[:-1]  # input / output
        out[f"{prefix}_names"] = names
        out[f"{prefix}_units"] = units
    return out


# --------------------------------------------------------------------------------------------------
# HDF5 writer
# --------------------------------------------------------------------------------------------------

def _attr_value(kind, value):
    if kind == "int":
        return np.int64(value)
    if kind == "bool":
        return np.int64(1 if value else 0)
    if kind == "float":
        return np.float64(value)
    if kind == "ints":
        return np.asarray([int(v) for v in value], dtype=np.int64)
    return str(value)


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_model_file(path, root_attrs, config, config_kinds, weights, normalization=None, fields=None):
    """Write a model file (format v1) atomically: a temporary file next to ``path`` is renamed."""
    import h5py

    out = Path(path)
    if not out.parent.exists():
        raise ExportError(f"output directory {out.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".surrogate-export-", suffix=".h5", dir=str(out.parent))
    # mkstemp creates the file for its owner only; the model file gets the mode of any new file (0666
    # less the umask), so that the colleagues and batch jobs that read it can.
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["format_version"] = np.int64(FORMAT_VERSION)
            for key, value in root_attrs.items():
                if value is not None:
                    f.attrs[key] = str(value)
            g = f.create_group("config")
            for key, value in config.items():
                g.attrs[key] = _attr_value(config_kinds[key], value)
            w = f.create_group("weights")
            for key, array in weights.items():
                w.create_dataset(key, data=np.ascontiguousarray(array, dtype=np.float32))
            if normalization:
                n = f.create_group("normalization")
                for key, array in normalization.items():
                    n.create_dataset(key, data=np.asarray(array, dtype=np.float64))
            if fields:
                s = f.create_group("fields")
                dt = h5py.string_dtype(encoding="utf-8")
                for key, values in fields.items():
                    s.create_dataset(key, data=np.array(values, dtype=object), dtype=dt)
        os.replace(tmp, str(out))
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {_first_line(exc)}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def count_parameters(weights):
    return int(sum(int(np.prod(a.shape)) for a in weights.values()))
