"""FLARE family (vpuri3/FLARE.py, ``pdebench/models/flare.py``, class ``FLAREModel``).

Turns the experiment's config (three config.yaml generations, or a JSON of constructor arguments of
either key layout) plus the weight shapes into the canonical /config of model-format.md §4.1.
"""

import re
from collections import OrderedDict

from surrogate_ref.compat import FLOAT32_EPS
from surrogate_ref.flare import CONFIG_KEYS, complete_config, expected_state_shapes

from .common import ExportError, note

FAMILY = "flare"
DEFAULT_SOURCE = "vpuri3/FLARE.py@unknown"
CONFIG_KINDS = CONFIG_KEYS

# RMSNorm eps of the newest FLARE.py (nested config.yaml, pdebench/config.py): nn.RMSNorm(dim, eps=1e-6).
NESTED_ERA_RMSNORM_EPS = 1e-6

# Constructor arguments (name -> default) of FLAREModel, current layout (33108d6) ...
CURRENT_CTOR = OrderedDict([
    ("in_dim", None), ("out_dim", None), ("channel_dim", 64), ("num_blocks", 8), ("num_heads", None),
    ("act", None), ("rmsnorm", False), ("out_proj_norm", True), ("num_layers_in_out_proj", 2),
    ("attn_scale", 1.0), ("num_latents", None), ("num_layers_k_proj", 3), ("num_layers_v_proj", 3),
    ("k_proj_mlp_ratio", 1.0), ("v_proj_mlp_ratio", 1.0), ("num_layers_ffn", 3), ("ffn_mlp_ratio", 1.0),
    ("qk_norm", False),
])
# ... and paper layout (684dcfe ... de5ba64).
PAPER_CTOR = OrderedDict([
    ("in_dim", None), ("out_dim", None), ("channel_dim", 64), ("num_blocks", 8), ("num_latents", None),
    ("num_heads", None), ("act", None), ("num_layers_kv_proj", 3), ("num_layers_mlp", 3),
    ("num_layers_in_out_proj", 2), ("mlp_ratio", 1.0), ("kv_proj_ratio", 1.0), ("in_out_proj_ratio", 1.0),
    ("out_proj_ln", True),
])
COMMON_NAMES = set(CURRENT_CTOR) & set(PAPER_CTOR)

# config.yaml defaults: paper-era flat Config (model_type 2), 2026 flat Config (model_type 'flare'),
# nested FlareConfig (model: {model: flare}).
PAPER_YAML = OrderedDict([
    ("channel_dim", 64), ("num_blocks", 8), ("num_heads", 8), ("num_latents", 64), ("act", None),
    ("num_layers_kv_proj", 3), ("num_layers_mlp", 3), ("num_layers_in_out_proj", 2), ("mlp_ratio", 1.0),
    ("kv_proj_ratio", 1.0), ("in_out_proj_ratio", 1.0), ("out_proj_ln", True),
])
CURRENT_YAML = OrderedDict([
    ("channel_dim", 64), ("num_blocks", 8), ("num_heads", 8), ("act", None), ("rmsnorm", False),
    ("out_proj_norm", True), ("num_layers_in_out_proj", 2), ("attn_scale", "one"), ("num_latents", 64),
    ("num_layers_k_proj", 3), ("num_layers_v_proj", 3), ("k_proj_mlp_ratio", 1.0), ("v_proj_mlp_ratio", 1.0),
    ("num_layers_ffn", 3), ("ffn_mlp_ratio", 1.0), ("qk_norm", False),
])


def _pick(data, defaults):
    return OrderedDict((k, data.get(k, d)) for k, d in defaults.items())


def _spec_from_current(values, era):
    return {
        "era": era, "layout": "current",
        "in_dim": values.get("in_dim"), "out_dim": values.get("out_dim"),
        "channel_dim": values["channel_dim"], "num_blocks": values["num_blocks"],
        "num_heads": values["num_heads"], "num_latents": values["num_latents"], "act": values["act"],
        "rmsnorm": values["rmsnorm"], "out_proj_norm": values["out_proj_norm"], "qk_norm": values["qk_norm"],
        "attn_scale": values["attn_scale"], "num_layers_in_out_proj": values["num_layers_in_out_proj"],
        "num_layers_k_proj": values["num_layers_k_proj"], "num_layers_v_proj": values["num_layers_v_proj"],
        "num_layers_ffn": values["num_layers_ffn"], "k_ratio": values["k_proj_mlp_ratio"],
        "v_ratio": values["v_proj_mlp_ratio"], "ffn_ratio": values["ffn_mlp_ratio"], "in_out_ratio": None,
    }


def _spec_from_paper(values, era):
    return {
        "era": era, "layout": "paper",
        "in_dim": values.get("in_dim"), "out_dim": values.get("out_dim"),
        "channel_dim": values["channel_dim"], "num_blocks": values["num_blocks"],
        "num_heads": values["num_heads"], "num_latents": values["num_latents"], "act": values["act"],
        "rmsnorm": False, "out_proj_norm": values["out_proj_ln"], "qk_norm": False, "attn_scale": 1.0,
        "num_layers_in_out_proj": values["num_layers_in_out_proj"],
        "num_layers_k_proj": values["num_layers_kv_proj"], "num_layers_v_proj": values["num_layers_kv_proj"],
        "num_layers_ffn": values["num_layers_mlp"], "k_ratio": values["kv_proj_ratio"],
        "v_ratio": values["kv_proj_ratio"], "ffn_ratio": values["mlp_ratio"],
        "in_out_ratio": values["in_out_proj_ratio"],
    }


def parse_config(data, origin):
    """Recognise the config generation and return a layout-neutral spec (see _spec_from_*)."""
    if isinstance(data.get("model"), dict):  # (c) nested: model: {model: flare, ...}
        model = data["model"]
        name = model.get("model", "flare")
        if name != "flare":
            raise ExportError(f"{origin}: model.model is {name!r}; this is not a FLARE experiment")
        return _spec_from_current(_pick(model, CURRENT_YAML), "nested config.yaml")
    if "model_type" in data:
        mt = data["model_type"]
        if isinstance(mt, int) and not isinstance(mt, bool):  # (a) paper era: 2 = FLARE
            if mt != 2:
                raise ExportError(f"{origin}: model_type is {mt}; FLARE is model_type 2 in paper-era configs")
            return _spec_from_paper(_pick(data, PAPER_YAML), "paper-era config.yaml")
        if mt != "flare":
            raise ExportError(f"{origin}: model_type is {mt!r}; this is not a FLARE experiment")
        return _spec_from_current(_pick(data, CURRENT_YAML), "2026 flat config.yaml")  # (b)
    # Otherwise: the constructor arguments of FLAREModel (either layout); unknown names are refused.
    names = set(data)
    unknown = sorted(names - set(CURRENT_CTOR) - set(PAPER_CTOR))
    if unknown:
        raise ExportError(f"{origin}: unknown FLAREModel constructor argument(s): {', '.join(unknown)} "
                          "(a config.yaml needs model_type or a model: mapping)")
    current_only = sorted(names & (set(CURRENT_CTOR) - COMMON_NAMES))
    paper_only = sorted(names & (set(PAPER_CTOR) - COMMON_NAMES))
    if current_only and paper_only:
        raise ExportError(f"{origin}: mixes current-layout arguments ({', '.join(current_only)}) with "
                          f"paper-layout arguments ({', '.join(paper_only)})")
    if paper_only:
        return _spec_from_paper(_pick(data, PAPER_CTOR), "constructor arguments (paper layout)")
    spec = _spec_from_current(_pick(data, CURRENT_CTOR), "constructor arguments")
    spec["layout"] = "current" if current_only else None
    return spec


# --------------------------------------------------------------------------------------------------
# Layout detection and resolution against the weight shapes
# --------------------------------------------------------------------------------------------------

_CURRENT_MARKS = (re.compile(r"^blocks\.\d+\.norm[12]\."), re.compile(r"^out_proj\.[01]\."))
_PAPER_MARKS = (re.compile(r"^blocks\.\d+\.ln[12]\."), re.compile(r"^out_proj\.(ln|mlp)\."))


def detect_layout(keys):
    current = sorted(k for k in keys if any(m.match(k) for m in _CURRENT_MARKS))
    paper = sorted(k for k in keys if any(m.match(k) for m in _PAPER_MARKS))
    if current and paper:
        raise ExportError(f"contradictory key layout: current-layout keys (e.g. {current[0]}) and paper-layout "
                          f"keys (e.g. {paper[0]}) in one checkpoint")
    if current:
        return "current"
    if paper:
        return "paper"
    sample = ", ".join(sorted(keys)[:5]) or "no keys"
    raise ExportError("unknown key layout: neither blocks.N.norm1 / out_proj.1 (current) nor blocks.N.ln1 / "
                      f"out_proj.mlp (paper) keys found (first keys: {sample}); is this a FLARE checkpoint?")


def _shape(state, key):
    t = state.get(key)
    return tuple(t.shape) if t is not None else None


def _mlp_hidden(state, prefix, num_layers):
    if num_layers == -1:
        return None
    s = _shape(state, prefix + "fc1.weight")
    return s[0] if s and len(s) == 2 else None


def _mlp_io(state, prefix):
    for name in ("fc1", "fc"):
        s = _shape(state, f"{prefix}{name}.weight")
        if s and len(s) == 2:
            return s[1]
    return None


def _mlp_out(state, prefix):
    for name in ("fc2", "fc"):
        s = _shape(state, f"{prefix}{name}.weight")
        if s and len(s) == 2:
            return s[0]
    return None


def _int(spec, key, errors, allow_none=False, minimum=None):
    value = spec[key]
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(f"{key} must be an integer, got {value!r}")
        return None
    if minimum is not None and value < minimum:
        errors.append(f"{key} must be >= {minimum}, got {value}")
        return None
    return value


def _ratio(spec, key, name, errors):
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        errors.append(f"{name} must be a positive number, got {value!r}")
        return None
    return float(value)


def _bool(spec, key, errors):
    value = spec[key]
    if not isinstance(value, bool):
        errors.append(f"{key} must be true or false, got {value!r}")
        return False
    return value


def resolve(spec, state, layout):
    """Canonical config (complete, checked) from the parsed config and the weights (stripped keys)."""
    errors, notes = [], []
    paper = layout == "paper"
    if spec["layout"] is not None and spec["layout"] != layout:
        raise ExportError(f"the config ({spec['era']}) describes the {spec['layout']} layout but the weights use the "
                          f"{layout} key layout; give the matching config (or a JSON of constructor arguments)")
    C = _int(spec, "channel_dim", errors, minimum=1)
    num_blocks = _int(spec, "num_blocks", errors, minimum=1)
    heads = _int(spec, "num_heads", errors, allow_none=True, minimum=1)
    latents = _int(spec, "num_latents", errors, allow_none=True, minimum=1)
    L = {k: _int(spec, k, errors, minimum=-1) for k in
         ("num_layers_in_out_proj", "num_layers_k_proj", "num_layers_v_proj", "num_layers_ffn")}
    flags = {k: _bool(spec, k, errors) for k in ("rmsnorm", "out_proj_norm", "qk_norm")}
    ratios = {k: _ratio(spec, k, n, errors) for k, n in (
        ("k_ratio", "k_proj_mlp_ratio" if not paper else "kv_proj_ratio"),
        ("v_ratio", "v_proj_mlp_ratio" if not paper else "kv_proj_ratio"),
        ("ffn_ratio", "ffn_mlp_ratio" if not paper else "mlp_ratio"))}
    if spec["in_out_ratio"] is not None:
        ratios["in_out_ratio"] = _ratio(spec, "in_out_ratio", "in_out_proj_ratio", errors)
    act = spec["act"] if spec["act"] is not None else "gelu"
    if act not in ("gelu", "silu"):
        errors.append(f"act must be gelu, silu or null (= gelu), got {act!r}")
    if errors:
        raise ExportError("inconsistent config: " + "; ".join(errors))
    if heads is None:
        heads = C // 8
        notes.append(f"num_heads is null: FLARE.py uses channel_dim // 8 = {heads}")
    if heads < 1 or C % heads != 0:
        raise ExportError(f"inconsistent config: num_heads {heads} does not divide channel_dim {C}")
    E = C // heads

    # attn_scale: number, 'one' (1.0) or 'sqrt' (E ** -0.5, as FLARE.py computes it).
    scale = spec["attn_scale"]
    if isinstance(scale, str):
        if scale not in ("one", "sqrt"):
            raise ExportError(f"inconsistent config: attn_scale must be a number, 'one' or 'sqrt', got {scale!r}")
        if scale == "one" and spec["era"] == "nested config.yaml" and E > 16:
            scale = "sqrt"
            notes.append(f"attn_scale 'one' with head width {E} > 16: the FLARE.py version that writes nested "
                         "config.yaml files switches to 'sqrt' in that case")
        scale = (E ** -0.5) if scale == "sqrt" else 1.0
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ExportError(f"inconsistent config: attn_scale must be > 0, got {scale!r}")
    scale = float(scale)

    # Dimensions read from the weights and cross-checked with the config.
    head = "out_proj.mlp." if paper else "out_proj.1."
    in_dim_w, out_dim_w = _mlp_io(state, "in_proj."), _mlp_out(state, head)
    dims = {}
    for key, observed in (("in_dim", in_dim_w), ("out_dim", out_dim_w)):
        given = spec.get(key)
        if given is not None and observed is not None and given != observed:
            errors.append(f"{key}: the config gives {given}, the weights have {observed}")
        dims[key] = observed if observed is not None else given
        if dims[key] is None:
            errors.append(f"{key} is not in the config and cannot be read from the weights")
    q_shape = _shape(state, "blocks.0.att.latent_q")
    if q_shape is not None and len(q_shape) == 2:
        if q_shape[0] != C:
            errors.append(f"channel_dim: the config gives {C}, blocks.0.att.latent_q has {q_shape[0]} rows")
        if latents is not None and q_shape[1] != latents:
            errors.append(f"num_latents: the config gives {latents}, blocks.0.att.latent_q has {q_shape[1]}")
        latents = q_shape[1] if latents is None else latents
    if latents is None:
        errors.append("num_latents is not in the config and blocks.0.att.latent_q is missing")
    blocks_w = {int(m.group(1)) for m in (re.match(r"^blocks\.(\d+)\.", k) for k in state) if m}
    if blocks_w and num_blocks != max(blocks_w) + 1:
        errors.append(f"num_blocks: the config gives {num_blocks}, the weights have {max(blocks_w) + 1} blocks")

    widths = {}
    for key, prefix, rkey, lkey, what in (
            ("k_proj_hidden_dim", "blocks.0.att.k_proj.", "k_ratio", "num_layers_k_proj",
             "kv_proj_ratio" if paper else "k_proj_mlp_ratio"),
            ("v_proj_hidden_dim", "blocks.0.att.v_proj.", "v_ratio", "num_layers_v_proj",
             "kv_proj_ratio" if paper else "v_proj_mlp_ratio"),
            ("ffn_hidden_dim", "blocks.0.mlp.", "ffn_ratio", "num_layers_ffn",
             "mlp_ratio" if paper else "ffn_mlp_ratio")):
        nominal = int(C * ratios[rkey])
        observed = _mlp_hidden(state, prefix, L[lkey])
        if observed is not None and observed != nominal:
            errors.append(f"{key}: the weights have {observed} ({prefix}fc1.weight), the config gives "
                          f"int(channel_dim {C} * {what} {ratios[rkey]}) = {nominal}")
        widths[key] = nominal
    # Input / output MLPs: hidden width C (current), int(C * in_out_proj_ratio) (paper).
    io_ratio = ratios.get("in_out_ratio", 1.0) if paper else 1.0
    nominal = int(C * io_ratio)
    bug = int(dims["in_dim"] * io_ratio) if (paper and dims["in_dim"]) else None
    observed = {"in_proj_hidden_dim": _mlp_hidden(state, "in_proj.", L["num_layers_in_out_proj"]),
                "out_proj_hidden_dim": _mlp_hidden(state, head, L["num_layers_in_out_proj"])}
    seen = {v for v in observed.values() if v is not None}
    if seen and seen != {nominal} and bug is not None and seen == {bug}:
        nominal = bug
        notes.append(f"the input/output MLPs have hidden width {bug} = int(in_dim {dims['in_dim']} * "
                     f"in_out_proj_ratio {io_ratio}): a paper-era checkpoint of 2025-08-18..24, trained "
                     "before FLARE.py commit 6aa4496 fixed this width to channel_dim * in_out_proj_ratio; accepted")
    for key, value in observed.items():
        if value is not None and value != nominal:
            source = f"int({C} * in_out_proj_ratio {io_ratio})" if paper else f"channel_dim {C}"
            errors.append(f"{key}: the weights have {value}, the config gives {source} = {nominal}")
        widths[key] = nominal
    if errors:
        raise ExportError("the config does not match the weights: " + "; ".join(errors))

    config = {
        "in_dim": dims["in_dim"], "out_dim": dims["out_dim"], "channel_dim": C, "num_blocks": num_blocks,
        "num_heads": heads, "num_latents": latents, "act": act, "attn_scale": scale,
        "num_layers_in_out_proj": L["num_layers_in_out_proj"], "num_layers_k_proj": L["num_layers_k_proj"],
        "num_layers_v_proj": L["num_layers_v_proj"], "num_layers_ffn": L["num_layers_ffn"],
        "key_layout": layout, "layernorm_eps": 1e-5,
        "rmsnorm_eps": NESTED_ERA_RMSNORM_EPS if (spec["era"] == "nested config.yaml" and flags["rmsnorm"])
        else FLOAT32_EPS,
    }
    config.update(flags)
    config.update(widths)
    if config["rmsnorm"] and spec["era"] == "nested config.yaml":
        notes.append("rmsnorm with a nested config.yaml: that FLARE.py version builds nn.RMSNorm(eps=1e-6); "
                     "rmsnorm_eps = 1e-6 is written")
    try:
        canonical = complete_config(config)
    except ValueError as exc:
        raise ExportError(f"inconsistent config: {exc}")
    for text in notes:
        note(text)
    return canonical


def describe(cfg):
    E = cfg["channel_dim"] // cfg["num_heads"]
    parts = [f"in_dim {cfg['in_dim']}", f"out_dim {cfg['out_dim']}", f"C {cfg['channel_dim']}",
             f"{cfg['num_blocks']} blocks", f"H {cfg['num_heads']} (E {E})", f"M {cfg['num_latents']}",
             f"act {cfg['act']}", f"attn_scale {cfg['attn_scale']:.6g}",
             f"layers in/out {cfg['num_layers_in_out_proj']} k {cfg['num_layers_k_proj']} "
             f"v {cfg['num_layers_v_proj']} ffn {cfg['num_layers_ffn']}",
             f"hidden in {cfg['in_proj_hidden_dim']} out {cfg['out_proj_hidden_dim']} "
             f"k {cfg['k_proj_hidden_dim']} v {cfg['v_proj_hidden_dim']} ffn {cfg['ffn_hidden_dim']}",
             f"rmsnorm {int(cfg['rmsnorm'])}", f"qk_norm {int(cfg['qk_norm'])}",
             f"out_proj_norm {int(cfg['out_proj_norm'])}"]
    return ", ".join(parts)


def build(state, config_data, config_origin, layout_choice):
    """Family entry point: (stripped state, parsed config) -> (canonical config, expected shapes)."""
    if config_data is None:
        raise ExportError("--config is required for flare: num_heads, act and attn_scale cannot be read "
                          "from the weights")
    spec = parse_config(config_data, config_origin)
    if layout_choice in (None, "auto"):
        layout = detect_layout(state.keys())
    else:
        layout = layout_choice
        try:
            found = detect_layout(state.keys())
        except ExportError:
            found = layout
        if found != layout:
            raise ExportError(f"--layout {layout} was given but the keys are in the {found} layout "
                              "(use --layout auto)")
    config = resolve(spec, state, layout)
    expected = expected_state_shapes(config)
    context = f"the FLARE configuration ({layout} layout; {describe(config)})"
    return config, expected, context, spec["era"]
