"""Spherical family (NVIDIA/torch-harmonics): ``sphere_transformer`` (examples/models/s2transformer.py,
class ``SphericalTransformer``), ``s2_attention`` (``AttentionS2``) and ``s2_neighborhood_attention``
(``NeighborhoodAttentionS2``). Schema: share/docs/model-format.md §4.3; semantics:
docs/reference-models.md §5.

Works without torch-harmonics: the configuration comes from ``--config`` (constructor arguments) and, for the
transformer, ``--preset`` (the model zoo of examples/model_registry.py); every tensor the configuration implies
is checked by name and shape. torch-harmonics is needed only for ``--tables`` (the DISCO filter tables of the
release the model was trained with) and, when ``--torch-harmonics-version`` is not given, to learn the
installed release.
"""

import math
import re
from collections import OrderedDict

from . import common
from .common import ExportError, note

GRIDS = ("equiangular", "legendre-gauss", "lobatto", "equiangular-trapezoidal")
# The first release whose semantics the library implements (docs/reference-models.md §5.1): from v0.9.1 on
# NeighborhoodAttentionS2 scales q after the projection with 1/sqrt(k_channels/num_heads) and the DISCO
# convolution normalises its filters per node ("nodal"); v0.8.0 / v0.9.0 scaled the input of the q projection
# with 1/sqrt(k_channels) and normalised by the latitude mean.
MIN_RELEASE = (0, 9, 1)
TESTED_RELEASE = (0, 9, 3)
DISCO_NORM_MODE = "nodal"  # DiscreteContinuousConvS2's default from v0.9.1; SphericalTransformer passes none

CONFIG_KINDS = OrderedDict([
    ("torch_harmonics_version", "str"),
    # sphere_transformer
    ("img_size", "ints"), ("grid", "str"), ("grid_internal", "str"), ("scale_factor", "int"), ("in_chans", "int"),
    ("out_chans", "int"), ("embed_dim", "int"), ("num_layers", "int"), ("activation_function", "str"),
    ("encoder_kernel_shape", "ints"), ("filter_basis_type", "str"), ("basis_norm_mode", "str"),
    ("num_heads", "int"), ("use_mlp", "bool"), ("mlp_ratio", "float"), ("drop_rate", "float"),
    ("drop_path_rate", "float"), ("normalization_layer", "str"), ("residual_prediction", "bool"),
    ("pos_embed", "str"), ("upsample_sht", "bool"), ("attention_mode", "str"), ("bias", "bool"),
    ("theta_cutoff", "float"),
    # s2_attention, s2_neighborhood_attention
    ("in_channels", "int"), ("in_shape", "ints"), ("out_shape", "ints"), ("grid_in", "str"), ("grid_out", "str"),
    ("k_channels", "int"), ("out_channels", "int"), ("use_qknorm", "bool"), ("scale", "float"),
    ("scale_is_tensor", "bool"),
])

# SphericalTransformer's constructor arguments with their defaults in 0.9.3 (docs/reference-models.md §5.5).
TRANSFORMER_DEFAULTS = OrderedDict([
    ("img_size", (128, 256)), ("grid", "equiangular"), ("grid_internal", "legendre-gauss"), ("scale_factor", 3),
    ("in_chans", 3), ("out_chans", 3), ("embed_dim", 256), ("num_layers", 4), ("activation_function", "gelu"),
    ("encoder_kernel_shape", (3, 3)), ("filter_basis_type", "morlet"), ("num_heads", 1), ("use_mlp", True),
    ("mlp_ratio", 2.0), ("drop_rate", 0.0), ("drop_path_rate", 0.0), ("normalization_layer", "none"),
    ("hard_thresholding_fraction", 1.0), ("residual_prediction", False), ("pos_embed", "spectral"),
    ("upsample_sht", False), ("attention_mode", "neighborhood"), ("bias", False), ("theta_cutoff", None),
])


def _zoo(embed_dim, attention_mode):
    # examples/model_registry.py: get_baseline_models(img_size=(128, 256), in_chans=3, out_chans=3,
    # residual_prediction=False, grid="equiangular") and the model's arguments.
    return dict(img_size=(128, 256), grid="equiangular", in_chans=3, out_chans=3, num_layers=4, scale_factor=2,
                embed_dim=embed_dim, activation_function="gelu", residual_prediction=False, pos_embed="spectral",
                use_mlp=True, normalization_layer="instance_norm", encoder_kernel_shape=(5, 4),
                filter_basis_type="piecewise linear", upsample_sht=False, attention_mode=attention_mode, bias=False)


PRESETS = OrderedDict([
    ("s2transformer_sc2_layers4_e128", _zoo(128, "global")),
    ("s2ntransformer_sc2_layers4_e128", _zoo(128, "neighborhood")),
    ("s2transformer_sc2_layers4_e256", _zoo(256, "global")),
    ("s2ntransformer_sc2_layers4_e256", _zoo(256, "neighborhood")),
])

ATTENTION_ARGS = ("in_channels", "num_heads", "in_shape", "out_shape", "grid_in", "grid_out", "scale", "use_qknorm",
                  "bias", "k_channels", "out_channels", "drop_rate", "scale_is_tensor")
NEIGHBORHOOD_ARGS = ATTENTION_ARGS[:-2] + ("theta_cutoff", "optimized_kernel", "scale_is_tensor")

ACTIVATIONS = ("gelu", "relu", "identity")
NORMS = ("none", "instance_norm", "layer_norm")
POS_EMBEDS = ("spectral", "sequence", "learnable lat", "learnable latlon", "none")
BASES = ("piecewise linear", "morlet", "zernike")  # the ones SphericalTransformer's cutoff rule knows


# --------------------------------------------------------------------------------------------------
# Releases
# --------------------------------------------------------------------------------------------------

def parse_release(text, what="--torch-harmonics-version"):
    """'0.9.3', 'v0.9.3', '0.9.3+torch2.14.1.cpu' -> (0, 9, 3); refuses releases before MIN_RELEASE."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-]?(?:post|dev|rc|a|b)?\d*)?(?:\+[\w.]+)?", str(text).strip())
    if not m:
        raise ExportError(f"{what}: {text!r} is not a torch-harmonics release number (e.g. 0.9.3)")
    release = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    if release < MIN_RELEASE:
        raise ExportError(
            f"{what} {text}: models trained with torch-harmonics before 0.9.1 are not supported: those releases "
            "scale the neighbourhood-attention query before the projection with 1/sqrt(k_channels) (0.9.1 on: "
            "after it, with 1/sqrt(k_channels/num_heads)) and normalise the DISCO filters by the latitude mean "
            "(0.9.1 on: per node); the library implements the 0.9.1+ semantics (docs/reference-models.md §5.1)")
    if release > TESTED_RELEASE:
        note(f"torch-harmonics {text} is newer than {'.'.join(map(str, TESTED_RELEASE))}, the release the library "
             "was checked against; its semantics are assumed unchanged")
    return release


def installed_release():
    """The installed torch-harmonics' version string, or None (read from the package metadata, no import)."""
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return None
    for name in ("torch-harmonics", "torch_harmonics"):
        try:
            return metadata.version(name)
        except Exception:  # PackageNotFoundError and broken metadata alike
            continue
    return None


def release_from_args(args):
    text = getattr(args, "torch_harmonics_version", None)
    if text is None:
        text = installed_release()
        if text is None:
            raise ExportError("--torch-harmonics-version is required: torch-harmonics is not installed here, and the "
                              "release the model was trained with decides its semantics (e.g. 0.9.3)")
        note(f"--torch-harmonics-version not given: using the installed torch-harmonics {text}")
    release = parse_release(text)
    return release, "%d.%d.%d" % release


# --------------------------------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------------------------------

def _int(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ExportError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _bool(name, value):
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ExportError(f"{name} must be true or false, got {value!r}")


def _float(name, value, minimum=None, maximum=None, open_max=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ExportError(f"{name} must be a finite number, got {value!r}")
    value = float(value)
    if minimum is not None and value < minimum:
        raise ExportError(f"{name} must be >= {minimum}, got {value!r}")
    if maximum is not None and (value >= maximum if open_max else value > maximum):
        raise ExportError(f"{name} must be {'<' if open_max else '<='} {maximum}, got {value!r}")
    return value


def _choice(name, value, choices):
    if value not in choices:
        raise ExportError(f"{name} = {value!r} is not supported; expected one of " + ", ".join(repr(c) for c in choices))
    return value


def _shape(name, value, length=2, minimum=1):
    if not isinstance(value, (list, tuple)) or len(value) != length:
        raise ExportError(f"{name} must be a list of {length} integers, got {value!r}")
    return [_int(f"{name}[{i}]", v, minimum) for i, v in enumerate(value)]


def _unknown(data, allowed, what, origin):
    unknown = sorted(k for k in data if k not in allowed)
    if unknown:
        raise ExportError(f"--config ({origin}): unknown {what} argument(s) {', '.join(unknown)}; expected "
                          + ", ".join(allowed))


def kernel_size(basis, shape):
    """Number of DISCO basis functions (the last dimension of the encoder/decoder weight)."""
    if basis == "piecewise linear":
        nr, nphi = (shape[0], shape[1]) if len(shape) == 2 else (shape[0], 1)
        return (nr // 2) * nphi + nr % 2
    if basis == "morlet":
        return shape[0] * shape[1]
    n = shape[0]  # zernike: only the first entry is used
    return n * (n + 1) // 2


def internal_shape(config):
    """The SphericalTransformer's internal grid (h, w) = ((nlat - 1) // scale_factor + 1, nlon // scale_factor)."""
    nlat, nlon = config["img_size"]
    sf = config["scale_factor"]
    return (nlat - 1) // sf + 1, nlon // sf


def mlp_hidden(config):
    return int(config["embed_dim"] * config["mlp_ratio"]) or config["embed_dim"]


# --------------------------------------------------------------------------------------------------
# sphere_transformer
# --------------------------------------------------------------------------------------------------

def transformer_config(config_data, origin, preset, release):
    args = OrderedDict(TRANSFORMER_DEFAULTS)
    if preset is not None:
        if preset not in PRESETS:
            raise ExportError(f"--preset {preset!r} is not a model-zoo name; known: " + ", ".join(PRESETS))
        args.update(PRESETS[preset])
    data = config_data or {}
    if isinstance(data.get("model"), dict) and len(data) == 1:  # {"model": {...constructor arguments...}}
        data = data["model"]
    _unknown(data, tuple(TRANSFORMER_DEFAULTS), "SphericalTransformer", origin)
    args.update(data)

    c = OrderedDict()
    c["torch_harmonics_version"] = "%d.%d.%d" % release
    c["img_size"] = _shape("img_size", args["img_size"])
    c["grid"] = _choice("grid", args["grid"], GRIDS)
    c["grid_internal"] = _choice("grid_internal", args["grid_internal"], GRIDS)
    c["scale_factor"] = _int("scale_factor", args["scale_factor"])
    c["in_chans"] = _int("in_chans", args["in_chans"])
    c["out_chans"] = _int("out_chans", args["out_chans"])
    c["embed_dim"] = _int("embed_dim", args["embed_dim"])
    c["num_layers"] = _int("num_layers", args["num_layers"], 0)
    c["activation_function"] = _choice("activation_function", args["activation_function"], ACTIVATIONS)
    ks = args["encoder_kernel_shape"]
    if not isinstance(ks, (list, tuple)) or len(ks) not in (1, 2):
        raise ExportError(f"encoder_kernel_shape must be a list of 1 or 2 integers, got {ks!r} (SphericalTransformer "
                          "indexes it, so a plain integer fails in the official code too)")
    c["encoder_kernel_shape"] = [_int(f"encoder_kernel_shape[{i}]", v) for i, v in enumerate(ks)]
    c["filter_basis_type"] = _choice("filter_basis_type", args["filter_basis_type"], BASES)
    if c["filter_basis_type"] == "morlet" and len(c["encoder_kernel_shape"]) != 2:
        raise ExportError("encoder_kernel_shape must have 2 entries for the 'morlet' basis")
    c["basis_norm_mode"] = DISCO_NORM_MODE
    c["num_heads"] = _int("num_heads", args["num_heads"])
    c["use_mlp"] = _bool("use_mlp", args["use_mlp"])
    c["mlp_ratio"] = _float("mlp_ratio", args["mlp_ratio"], 0.0)
    c["drop_rate"] = _float("drop_rate", args["drop_rate"], 0.0, 1.0, open_max=True)
    c["drop_path_rate"] = _float("drop_path_rate", args["drop_path_rate"], 0.0, 1.0, open_max=True)
    c["normalization_layer"] = _choice("normalization_layer", args["normalization_layer"], NORMS)
    _float("hard_thresholding_fraction", args["hard_thresholding_fraction"])  # accepted, unused by the model
    c["residual_prediction"] = _bool("residual_prediction", args["residual_prediction"])
    c["pos_embed"] = _choice("pos_embed", args["pos_embed"], POS_EMBEDS)
    c["upsample_sht"] = _bool("upsample_sht", args["upsample_sht"])
    c["attention_mode"] = _choice("attention_mode", args["attention_mode"], ("neighborhood", "global"))
    c["bias"] = _bool("bias", args["bias"])
    if args["theta_cutoff"] is not None:
        c["theta_cutoff"] = _float("theta_cutoff", args["theta_cutoff"])
        if c["theta_cutoff"] <= 0.0:
            raise ExportError(f"theta_cutoff must be positive, got {args['theta_cutoff']!r}")

    if c["embed_dim"] % c["num_heads"]:
        raise ExportError(f"num_heads = {c['num_heads']} does not divide embed_dim = {c['embed_dim']}")
    if c["residual_prediction"] and c["in_chans"] != c["out_chans"]:
        raise ExportError(f"residual_prediction needs in_chans == out_chans, got {c['in_chans']} and {c['out_chans']}")
    h, w = internal_shape(c)
    if h < 2 or w < 1:
        raise ExportError(f"img_size {c['img_size']} with scale_factor {c['scale_factor']} gives the internal grid "
                          f"({h}, {w}); at least (2, 1) is needed")
    if c["attention_mode"] == "global" and c["drop_rate"] > 0.0 and release < (0, 9, 2):
        raise ExportError(f"torch-harmonics {c['torch_harmonics_version']}: AttentionS2 applies dropout even in eval mode when drop_rate > 0 "
                          "(fixed in 0.9.2), so this model's output is random and cannot be reproduced")
    return c


def transformer_shapes(c):
    E, h, w = c["embed_dim"], *internal_shape(c)
    K = kernel_size(c["filter_basis_type"], c["encoder_kernel_shape"])
    s = OrderedDict()
    if c["pos_embed"] in ("spectral", "sequence", "learnable latlon"):
        s["pos_embed.position_embeddings"] = (1, E, h, w)
    elif c["pos_embed"] == "learnable lat":
        s["pos_embed.position_embeddings"] = (1, E, h, 1)
    s["encoder.conv.weight"] = (E, c["in_chans"], K)
    hidden = mlp_hidden(c)
    for i in range(c["num_layers"]):
        b = f"blocks.{i}."
        for n in ("norm0", "norm1"):
            if c["normalization_layer"] == "instance_norm":
                s[b + n + ".weight"], s[b + n + ".bias"] = (E,), (E,)
            elif c["normalization_layer"] == "layer_norm":
                s[b + n + ".norm.weight"], s[b + n + ".norm.bias"] = (E,), (E,)
        for n in ("q", "k", "v", "proj"):
            s[b + f"self_attn.{n}_weights"] = (E, E, 1, 1)
        if c["bias"]:
            for n in ("q", "k", "v", "proj"):
                s[b + f"self_attn.{n}_bias"] = (E,)
        if c["use_mlp"]:
            s[b + "mlp.fwd.0.weight"], s[b + "mlp.fwd.0.bias"] = (hidden, E, 1, 1), (hidden,)
            s[b + ("mlp.fwd.3.weight" if c["drop_rate"] > 0.0 else "mlp.fwd.2.weight")] = (E, hidden, 1, 1)
    s["decoder.conv.weight"] = (c["out_chans"], E, K)
    return s


def transformer_hints(c, state):
    """Likely causes of a mismatch, from the keys that are there."""
    keys = set(state)
    hints = []
    if c["drop_rate"] == 0.0 and any(re.search(r"\.mlp\.fwd\.3\.weight$", k) for k in keys):
        hints.append("the MLP's second layer is 'fwd.3': the model was built with drop_rate > 0")
    if c["drop_rate"] > 0.0 and any(re.search(r"\.mlp\.fwd\.2\.weight$", k) for k in keys):
        hints.append("the MLP's second layer is 'fwd.2': the model was built with drop_rate = 0")
    if c["normalization_layer"] != "layer_norm" and any(".norm0.norm." in k for k in keys):
        hints.append("'norm0.norm.*' keys: normalization_layer = 'layer_norm'")
    if c["normalization_layer"] != "instance_norm" and any(k.endswith(".norm0.weight") for k in keys):
        hints.append("'norm0.weight' keys: normalization_layer = 'instance_norm'")
    if c["normalization_layer"] != "none" and not any(".norm0." in k for k in keys):
        hints.append("no norm keys: normalization_layer = 'none'")
    pe = state.get("pos_embed.position_embeddings")
    if pe is not None and tuple(pe.shape)[-1:] == (1,) and c["pos_embed"] != "learnable lat":
        hints.append("the position embedding has one longitude: pos_embed = 'learnable lat'")
    if pe is None and c["pos_embed"] != "none":
        hints.append("no position embedding in the checkpoint: pos_embed = 'none'")
    if not c["bias"] and any(k.endswith("self_attn.q_bias") for k in keys):
        hints.append("attention biases present: bias = true")
    if c["use_mlp"] and not any(".mlp." in k for k in keys):
        hints.append("no MLP keys: use_mlp = false")
    layers = {int(m.group(1)) for k in keys for m in [re.match(r"blocks\.(\d+)\.", k)] if m}
    if layers and max(layers) + 1 != c["num_layers"]:
        hints.append(f"the checkpoint has {max(layers) + 1} blocks: num_layers = {max(layers) + 1}")
    w = state.get("encoder.conv.weight")
    K = kernel_size(c["filter_basis_type"], c["encoder_kernel_shape"])
    if w is not None and w.dim() == 3 and tuple(w.shape) != (c["embed_dim"], c["in_chans"], K):
        hints.append(f"encoder.conv.weight {tuple(w.shape)}: embed_dim {w.shape[0]}, in_chans {w.shape[1]}, "
                     f"{w.shape[2]} basis functions (configured: {c['embed_dim']}, {c['in_chans']}, "
                     f"{K}; basis functions: piecewise linear (nr, nphi) -> (nr // 2) * nphi + nr % 2, "
                     "morlet (n0, n1) -> n0 * n1, zernike (n, ...) -> n (n + 1) / 2)")
    return hints


def describe_transformer(c):
    h, w = internal_shape(c)
    return (f"torch-harmonics {c['torch_harmonics_version']}, img {c['img_size'][0]}x{c['img_size'][1]} {c['grid']} -> "
            f"{h}x{w} {c['grid_internal']}, {c['attention_mode']} attention, {c['num_layers']} layers, "
            f"embed_dim {c['embed_dim']}, {c['num_heads']} head(s), {c['normalization_layer']} norm, pos_embed "
            f"{c['pos_embed']}, DISCO {c['filter_basis_type']} {tuple(c['encoder_kernel_shape'])}, "
            f"in/out {c['in_chans']}/{c['out_chans']}" + (", residual" if c["residual_prediction"] else ""))


# --------------------------------------------------------------------------------------------------
# s2_attention, s2_neighborhood_attention
# --------------------------------------------------------------------------------------------------

def attention_config(config_data, origin, state, release, neighborhood):
    what = "NeighborhoodAttentionS2" if neighborhood else "AttentionS2"
    if config_data is None:
        raise ExportError(f"--config is required: the {what} constructor arguments (in_channels, "
                          + ("" if neighborhood else "num_heads, ") + "in_shape, out_shape, ...)")
    data = config_data
    _unknown(data, NEIGHBORHOOD_ARGS if neighborhood else ATTENTION_ARGS, what, origin)
    required = ("in_channels", "in_shape", "out_shape") + (() if neighborhood else ("num_heads",))
    missing = [k for k in required if k not in data]
    if missing:
        raise ExportError(f"--config ({origin}): missing {', '.join(missing)} (required {what} arguments)")
    c = OrderedDict()
    c["torch_harmonics_version"] = "%d.%d.%d" % release
    c["in_channels"] = _int("in_channels", data["in_channels"])
    c["num_heads"] = _int("num_heads", data.get("num_heads", 1))
    c["in_shape"] = _shape("in_shape", data["in_shape"])
    c["out_shape"] = _shape("out_shape", data["out_shape"])
    c["grid_in"] = _choice("grid_in", data.get("grid_in", "equiangular"), GRIDS)
    c["grid_out"] = _choice("grid_out", data.get("grid_out", "equiangular"), GRIDS)
    c["bias"] = _bool("bias", data.get("bias", True))
    k = data.get("k_channels")
    o = data.get("out_channels")
    c["k_channels"] = c["in_channels"] if k is None else _int("k_channels", k)
    c["out_channels"] = c["in_channels"] if o is None else _int("out_channels", o)
    c["use_qknorm"] = _bool("use_qknorm", data.get("use_qknorm", False))
    c["drop_rate"] = _float("drop_rate", data.get("drop_rate", 0.0), 0.0, 1.0, open_max=True)

    scale = data.get("scale")
    scale_is_tensor = _bool("scale_is_tensor", data.get("scale_is_tensor", False))
    if "scale" in state:  # a learnable scale: an nn.Parameter registered under 'scale'
        t = state["scale"]
        if t.numel() != 1:
            raise ExportError(f"the state_dict's 'scale' has shape {tuple(t.shape)}; one value is supported")
        value = float(t.detach().double().reshape(-1)[0])
        if scale is not None and not isinstance(scale, bool) and isinstance(scale, (int, float)) and float(scale) != value:
            raise ExportError(f"--config scale = {scale!r} contradicts the state_dict's 'scale' = {value!r}")
        scale, scale_is_tensor = value, True
    if scale is not None:
        c["scale"] = _float("scale", scale)
    elif scale_is_tensor:
        raise ExportError("scale_is_tensor = true needs the scale value (--config \"scale\") or a 'scale' tensor in the "
                          "state_dict")
    c["scale_is_tensor"] = scale_is_tensor

    hi, wi = c["in_shape"]
    ho, wo = c["out_shape"]
    if neighborhood:  # drop_rate stays 0: NeighborhoodAttentionS2 has no dropout
        if wi % wo and wo % wi:
            raise ExportError(f"nlon_in = {wi} and nlon_out = {wo}: one must be a multiple of the other")
        upsample = wi % wo != 0  # the upsampling (scatter) mode: its default cutoff is the input grid's
        if hi < 2 or ho < 2:
            raise ExportError(f"in_shape {c['in_shape']} / out_shape {c['out_shape']}: at least 2 latitudes are needed")
        cutoff = data.get("theta_cutoff")
        if cutoff is not None:
            c["theta_cutoff"] = _float("theta_cutoff", cutoff)
            if c["theta_cutoff"] <= 0.0:
                raise ExportError(f"theta_cutoff must be positive, got {cutoff!r}")
        elif release < (0, 9, 3):
            # Before 0.9.3 the default was pi / (nlat - 1) of the coarser grid (the output grid, the input grid when
            # upsampling) on every grid type; 0.9.3 uses the largest colatitude gap of that grid, which the library
            # computes when theta_cutoff is absent.
            c["theta_cutoff"] = math.pi / ((hi if upsample else ho) - 1)
            which = "nlat_in" if upsample else "nlat_out"
            note(f"theta_cutoff: torch-harmonics {c['torch_harmonics_version']}'s default pi/({which}-1) = {c['theta_cutoff']!r} is stored")
    else:
        if wi % wo:
            raise ExportError(f"nlon_in = {wi} must be a multiple of nlon_out = {wo} (AttentionS2)")
        if c["drop_rate"] > 0.0 and release < (0, 9, 2):
            raise ExportError(f"torch-harmonics {c['torch_harmonics_version']}: AttentionS2 applies dropout even in eval mode when "
                              "drop_rate > 0 (fixed in 0.9.2), so its output is random and cannot be reproduced")
    for key in ("k_channels", "out_channels"):
        if c[key] % c["num_heads"]:
            raise ExportError(f"num_heads = {c['num_heads']} does not divide {key} = {c[key]}")
    return c


def attention_shapes(c, state):
    ck, cin, cout = c["k_channels"], c["in_channels"], c["out_channels"]
    s = OrderedDict([("q_weights", (ck, cin, 1, 1)), ("k_weights", (ck, cin, 1, 1)), ("v_weights", (cout, cin, 1, 1)),
                     ("proj_weights", (cout, cout, 1, 1))])
    if c["bias"]:
        s.update([("q_bias", (ck,)), ("k_bias", (ck,)), ("v_bias", (cout,)), ("proj_bias", (cout,))])
    if c["use_qknorm"]:
        s.update([("q_norm_weights", (ck // c["num_heads"],)), ("k_norm_weights", (ck // c["num_heads"],))])
    return s  # a learnable 'scale' tensor is carried by the config (scale, scale_is_tensor), not by /weights


def attention_hints(c, state):
    hints = []
    if not c["bias"] and "q_bias" in state:
        hints.append("biases present: bias = true")
    if c["bias"] and "q_weights" in state and "q_bias" not in state:
        hints.append("no biases: bias = false")
    if not c["use_qknorm"] and "q_norm_weights" in state:
        hints.append("q_norm_weights present: use_qknorm = true")
    q, v = state.get("q_weights"), state.get("v_weights")
    if q is not None and v is not None and q.dim() == 4 and v.dim() == 4:
        hints.append(f"from the weights: in_channels {q.shape[1]}, k_channels {q.shape[0]}, out_channels {v.shape[0]}")
    return hints


def describe_attention(c):
    extra = ""
    if "theta_cutoff" in c:
        extra = f", theta_cutoff {c['theta_cutoff']:.6g}"
    return (f"torch-harmonics {c['torch_harmonics_version']}, {c['in_shape'][0]}x{c['in_shape'][1]} {c['grid_in']} -> "
            f"{c['out_shape'][0]}x{c['out_shape'][1]} {c['grid_out']}, channels in/k/out {c['in_channels']}/"
            f"{c['k_channels']}/{c['out_channels']}, {c['num_heads']} head(s), bias {int(c['bias'])}, qk-norm "
            f"{int(c['use_qknorm'])}" + (f", scale {c['scale']:.6g}" if "scale" in c else "") + extra)


# --------------------------------------------------------------------------------------------------
# Tables (--tables) and the family objects for cli.py
# --------------------------------------------------------------------------------------------------

def disco_tables(config, release):
    """The official module's DISCO filter tables, from the installed torch-harmonics (which must be `release`)."""
    try:
        import torch_harmonics
        from torch_harmonics.examples.models import SphericalTransformer
    except Exception as exc:  # ImportError, or a compiled extension that does not load
        raise ExportError(f"--tables needs torch-harmonics {release} importable here ({common._first_line(exc)})")
    installed = parse_release(torch_harmonics.__version__, "the installed torch-harmonics")
    if "%d.%d.%d" % installed != release:
        raise ExportError(f"--tables: the installed torch-harmonics is {torch_harmonics.__version__} but the model was "
                          f"trained with {release}; the tables must come from the training release")
    import warnings
    import numpy as np

    args = {k: (tuple(v) if isinstance(v, list) else v) for k, v in config.items()
            if k in TRANSFORMER_DEFAULTS and k != "theta_cutoff"}
    args["theta_cutoff"] = config.get("theta_cutoff")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the 'morlet' alias warns in 0.9.3
        model = SphericalTransformer(**args)
    tables = OrderedDict()
    for part in ("encoder", "decoder"):
        conv = getattr(model, part).conv
        idx = np.stack([conv.psi_ker_idx.cpu().numpy(), conv.psi_row_idx.cpu().numpy(),
                        conv.psi_col_idx.cpu().numpy()]).astype(np.int64)
        tables[f"{part}.psi_idx"] = idx
        tables[f"{part}.psi_vals"] = conv.psi_vals.detach().cpu().numpy()  # the buffer's dtype (float64 in 0.9.3)
    return tables


def write_tables(path, tables):
    import h5py
    import os
    try:
        with h5py.File(str(path), "r+") as f:
            g = f.create_group("tables")
            for key, array in tables.items():
                g.create_dataset(key, data=array)
    except OSError as exc:
        if os.path.exists(str(path)):
            os.unlink(str(path))
        raise ExportError(f"cannot write the tables into {path}: {common._first_line(exc)}")


def unwrap_checkpoint(obj, name):
    """torch-harmonics' example trainers save model.state_dict() (with 'module.' under DDP), which
    common.unwrap_container takes; their debugging dump log_weights_and_grads() saves {'iteration', 'grads',
    'weights'}, whose 'weights' holds the parameters only (no persistent buffers such as a spectral position
    embedding)."""
    if isinstance(obj, dict) and "weights" in obj and "grads" in obj and isinstance(obj["weights"], dict):
        note(f"{name}: a weights-and-grads dump of the torch-harmonics examples; its 'weights' (parameters only) are used")
        return obj["weights"]
    return obj


def _validate(expected, state, context, hints):
    try:
        return common.validate_state(expected, state, context)
    except ExportError as exc:
        if hints:
            raise ExportError(str(exc) + "\n  hints: " + "; ".join(hints))
        raise


class _Family:
    DEFAULT_SOURCE = "NVIDIA/torch-harmonics@unknown"
    CONFIG_KINDS = CONFIG_KINDS
    unwrap_checkpoint = staticmethod(unwrap_checkpoint)
    write_tables = staticmethod(write_tables)

    def __init__(self, family):
        self.FAMILY = family

    @staticmethod
    def default_source(config):
        return f"NVIDIA/torch-harmonics@v{config['torch_harmonics_version']}"

    def build(self, state, config_data, config_origin, layout):  # the plain interface: no preset, no tables
        import argparse
        return self.build_from_args(state, config_data, config_origin,
                                    argparse.Namespace(layout=layout, preset=None, torch_harmonics_version=None,
                                                       tables=False))

    def _common_args(self, args):
        if getattr(args, "layout", "auto") not in (None, "auto"):
            raise ExportError(f"--layout {args.layout} does not apply to {self.FAMILY}")


class _Transformer(_Family):
    def build_from_args(self, state, config_data, config_origin, args):
        self._common_args(args)
        release, _ = release_from_args(args)
        config = transformer_config(config_data, config_origin, getattr(args, "preset", None), release)
        era = "preset " + args.preset if getattr(args, "preset", None) else "SphericalTransformer arguments"
        return config, transformer_shapes(config), f"the SphericalTransformer configuration ({describe_transformer(config)})", era

    @staticmethod
    def validate_state(expected, state, context, config):
        return _validate(expected, state, context, transformer_hints(config, state))

    @staticmethod
    def tables(config, args):
        return disco_tables(config, config["torch_harmonics_version"]) if getattr(args, "tables", False) else None

    @staticmethod
    def io_dims(config):
        return config["in_chans"], config["out_chans"]

    describe = staticmethod(describe_transformer)


class _Attention(_Family):
    def __init__(self, family, neighborhood):
        super().__init__(family)
        self.neighborhood = neighborhood

    def build_from_args(self, state, config_data, config_origin, args):
        self._common_args(args)
        if getattr(args, "preset", None):
            raise ExportError(f"--preset applies to sphere_transformer only, not to {self.FAMILY}")
        release, _ = release_from_args(args)
        config = attention_config(config_data, config_origin, state, release, self.neighborhood)
        what = "NeighborhoodAttentionS2" if self.neighborhood else "AttentionS2"
        return config, attention_shapes(config, state), f"the {what} configuration ({describe_attention(config)})", \
            f"{what} arguments"

    @staticmethod
    def validate_state(expected, state, context, config):
        # a learnable scale (nn.Parameter 'scale') went into the config as scale / scale_is_tensor
        weights = OrderedDict((k, v) for k, v in state.items() if k != "scale")
        return _validate(expected, weights, context, attention_hints(config, state))

    def tables(self, config, args):
        if getattr(args, "tables", False):
            note(f"--tables: {self.FAMILY} has no DISCO layer; nothing to add")
        return None

    @staticmethod
    def io_dims(config):
        return config["in_channels"], config["out_channels"]

    describe = staticmethod(describe_attention)


TRANSFORMER = _Transformer("sphere_transformer")
ATTENTION = _Attention("s2_attention", neighborhood=False)
NEIGHBORHOOD = _Attention("s2_neighborhood_attention", neighborhood=True)
