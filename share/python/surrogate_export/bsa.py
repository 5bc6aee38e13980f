"""BSA family (Ball Sparse Attention: ``erwinxnsa/models/transformer.py``, class ``Transformer`` with the
dataclass ``TransformerConfig``; the operator ``NativeSparseAttention``).

The configuration is given as the official class takes it: ``{"TransformerConfig": {...}}`` (YAML or
JSON) or the same fields flat: ``c_in``, ``c_hidden``, ``depth``, ``num_heads`` and optionally
``block_size``, ``mlp_ratio``, ``dimensionality``, ``ball_size``, ``should_rotate``, ``rotation_angle``,
``attention_type`` (``sparse``, ``ball`` or ``global``; the official default is ``global``) and
``attention_kwargs`` (the NativeSparseAttention keyword options for ``sparse``, ``{"ball_size": m}`` for
``ball``). The NativeSparseAttention options may also be given flat. The canonical /config is flat
(share/docs/model-format.md §4.4).

Keys: the ``_orig_mod.`` components of ``torch.compile`` are removed wherever they are (the whole model,
and the sparse module that TransformerLayer compiles: ``layers.{l}.attn._orig_mod.qkv.weight`` becomes
``layers.{l}.attn.qkv.weight``); the ShapeNet-Car wrapper (``main_model.`` + ``pos_enc.linear.weight``,
``pred_head.0/2``) is detected from its keys and exported with them (/config ``wrapper =
"shapenet_car"``).
"""

from collections import OrderedDict

from surrogate_ref.bsa import CONFIG_KEYS, SPARSE_OPTIONS, check_config, expected_state_shapes

from .common import ExportError, note

FAMILY = "bsa"
DEFAULT_SOURCE = "britacatalin/bsa@unknown"

_KIND = {"rotation_angle": "float", "compress_mlp_expand_factor": "float", "attention_type": "str", "wrapper": "str",
         "should_rotate": "bool", "use_compress_mlp": "bool", "use_group_selection": "bool",
         "should_mask_blocks_in_ball": "bool", "use_token_gated_attention": "bool", "use_coarse_q_attn": "bool",
         "use_coarse_q_importance": "bool"}
CONFIG_KINDS = OrderedDict((k, _KIND.get(k, "int")) for k in CONFIG_KEYS)
TRANSFORMER_FIELDS = ("c_in", "c_hidden", "depth", "num_heads", "block_size", "mlp_ratio", "dimensionality",
                      "ball_size", "should_rotate", "rotation_angle", "attention_type", "attention_kwargs")
REQUIRED = ("c_in", "c_hidden", "depth", "num_heads")
# Keys of the ShapeNet-Car wrapper (experiments/wrappers/shapenet.py) around the model (`main_model.`).
WRAPPER_KEYS = ("pos_enc.linear.weight", "pred_head.0.weight", "pred_head.0.bias", "pred_head.2.weight",
                "pred_head.2.bias")


def io_dims(config):
    """(input channels, output channels) for --normalization / --fields."""
    if config["wrapper"] == "shapenet_car":
        return config["dimensionality"], 1
    return config["c_in"], config["c_hidden"]


def prepare_state(state):
    """Removes the ``main_model.`` component of the ShapeNet-Car wrapper and keeps the wrapper's keys;
    refuses other wrappers."""
    if not any(k.startswith("main_model.") for k in state):
        return state
    outside = sorted(k for k in state if not k.startswith("main_model."))
    unknown = [k for k in outside if k not in WRAPPER_KEYS]
    if unknown:
        raise ExportError("this checkpoint holds a task wrapper around the BSA model that is not the ShapeNet-Car "
                          "wrapper with random Fourier features (keys outside 'main_model.': "
                          + ", ".join(unknown[:6]) + ("…" if len(unknown) > 6 else "") + ")")
    out = OrderedDict()
    for k, v in state.items():
        out[k[len("main_model."):] if k.startswith("main_model.") else k] = v
    return out


def _wrapper_of(keys):
    present = [k for k in WRAPPER_KEYS if k in keys]
    if not present:
        return "none"
    if len(present) != len(WRAPPER_KEYS):
        missing = [k for k in WRAPPER_KEYS if k not in keys]
        raise ExportError("the ShapeNet-Car wrapper is incomplete: missing " + ", ".join(missing))
    return "shapenet_car"


def parse_config(data, origin):
    if not isinstance(data, dict):
        raise ExportError(f"--config ({origin}) must be an object of TransformerConfig fields")
    if isinstance(data.get("TransformerConfig"), dict):
        data = data["TransformerConfig"]
    elif isinstance(data.get("model"), dict):
        data = data["model"]
    known = set(TRANSFORMER_FIELDS) | set(SPARSE_OPTIONS)
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        raise ExportError(f"--config ({origin}): unknown TransformerConfig field(s) {', '.join(unknown)}; expected "
                          f"{', '.join(TRANSFORMER_FIELDS)} (or NativeSparseAttention options)")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ExportError(f"--config ({origin}): missing {', '.join(missing)}")
    cfg = {k: v for k, v in data.items() if k != "attention_kwargs"}
    kind = cfg.get("attention_type", "global")
    if kind == "lucidrains_sparse":
        raise ExportError(f"--config ({origin}): attention_type 'lucidrains_sparse' (the lucidrains NSA port) is "
                          "not supported")
    kwargs = data.get("attention_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ExportError(f"--config ({origin}): attention_kwargs must be an object or null")
    if kind == "sparse":
        bad = sorted(k for k in kwargs if k not in SPARSE_OPTIONS)
        if bad:
            raise ExportError(f"--config ({origin}): attention_kwargs {', '.join(bad)} are not NativeSparseAttention "
                              f"options ({', '.join(SPARSE_OPTIONS)})")
        clash = sorted(k for k in kwargs if k in cfg and cfg[k] != kwargs[k])
        if clash:
            raise ExportError(f"--config ({origin}): {', '.join(clash)} given twice with different values")
        cfg.update(kwargs)
    elif kind == "ball":
        if set(kwargs) - {"ball_size"}:
            raise ExportError(f"--config ({origin}): attention_type 'ball' takes only attention_kwargs.ball_size")
        cfg["attention_ball_size"] = int(kwargs.get("ball_size", 256))
    elif kwargs:
        note(f"attention_kwargs {sorted(kwargs)} are ignored by attention_type {kind!r} (as in the official code)")
    flat_sparse = [k for k in SPARSE_OPTIONS if k in data]
    if flat_sparse and kind != "sparse":
        raise ExportError(f"--config ({origin}): {', '.join(flat_sparse)} only apply to attention_type 'sparse'")
    return cfg


def describe(cfg):
    text = (f"{cfg['attention_type']} attention, c_in {cfg['c_in']}, c_hidden {cfg['c_hidden']}, depth {cfg['depth']}, "
            f"heads {cfg['num_heads']}, ball {cfg['ball_size']}, rotate {cfg['should_rotate']} "
            f"({cfg['rotation_angle']:g} deg), d {cfg['dimensionality']}")
    if cfg["attention_type"] == "sparse":
        text += (f", C {cfg['compress_block_size']}, S {cfg['selected_blocks_number']}, G {cfg['group_selection_size']}, "
                 f"mlp {cfg['use_compress_mlp']}, coarse-q {cfg['use_coarse_q_attn']}/{cfg['use_coarse_q_importance']}, "
                 f"groups {cfg['use_group_selection']}, mask {cfg['should_mask_blocks_in_ball']}, "
                 f"{'token' if cfg['use_token_gated_attention'] else 'static'} gate")
    if cfg["wrapper"] != "none":
        text += f", wrapper {cfg['wrapper']}"
    return text


def build(state, config_data, config_origin, layout_choice):
    """Family entry point: (stripped state, parsed config) -> (canonical config, expected shapes)."""
    if layout_choice not in (None, "auto"):
        raise ExportError(f"--layout {layout_choice} does not apply to bsa (one key layout)")
    if config_data is None:
        raise ExportError("--config is required for bsa: the attention type, ball size and options cannot be read "
                          "from the weights")
    spec = parse_config(config_data, config_origin)
    spec["wrapper"] = _wrapper_of(state.keys())
    try:
        config = check_config(spec)
    except ValueError as exc:
        raise ExportError(f"--config ({config_origin}): {exc}")
    config = OrderedDict((k, config[k]) for k in CONFIG_KEYS)
    expected = expected_state_shapes(config)
    context = f"the BSA configuration ({describe(config)})"
    return config, expected, context, "TransformerConfig"
