"""Erwin family (maxxxzdn/erwin, ``models/erwin.py`` / ``models/erwin_flash.py``, class ``ErwinTransformer``).

Turns the constructor arguments (a JSON/YAML object: ``c_in``, ``c_hidden`` (list), ``ball_sizes``,
``enc_num_heads``, ``enc_depths``, ``dec_num_heads``, ``dec_depths``, ``strides``, ``rotate`` and
optionally ``decode``, ``mlp_ratio``, ``dimensionality``, ``mp_steps``) plus the weights into the
canonical /config described in share/docs/balltree.md (section "Erwin forward",
Configuration). The two official files use the same key names for different
q/k/v layouts; the variant is detected from the message-passing keys (``message_fns`` in erwin.py,
``fused_message_update`` in erwin_flash.py) or given with ``--layout erwin|erwin_flash`` (required when
``mp_steps = 0``, where nothing in the keys tells them apart).

The ShapeNet-Car wrapper of the official experiments (``experiments/wrappers/shapenet.py``: keys
``main_model.*`` plus ``pos_enc.linear.weight``, ``pred_head.0.*``, ``pred_head.2.*``) is detected from
the keys and recorded as ``wrapper = "shapenet_car"``; its tensors keep their names, the Erwin keys lose
``main_model.``. The message-passing graph rule the model was trained with is recorded from the config
object (``graph`` = knn | radius | none, ``graph_k``, ``graph_radius``, ``graph_max_num_neighbors``,
``graph_loop``, or the experiments' ``knn: K``), at its top level or next to the constructor arguments.
"""

from collections import OrderedDict

from surrogate_ref.erwin import check_config, complete_config, expected_state_shapes

from .common import ExportError, note

FAMILY = "erwin"
DEFAULT_SOURCE = "maxxxzdn/erwin@unknown"
LAYOUTS = ("erwin", "erwin_flash")

CONFIG_KINDS = OrderedDict([
    ("c_in", "int"), ("c_hidden", "ints"), ("ball_sizes", "ints"), ("enc_num_heads", "ints"),
    ("enc_depths", "ints"), ("dec_num_heads", "ints"), ("dec_depths", "ints"), ("strides", "ints"),
    ("rotate", "float"), ("mlp_ratio", "int"), ("dimensionality", "int"), ("mp_steps", "int"),
    ("variant", "str"), ("wrapper", "str"), ("graph", "str"), ("graph_k", "int"), ("graph_radius", "float"),
    ("graph_max_num_neighbors", "int"), ("graph_loop", "int"),
])
CTOR = ("c_in", "c_hidden", "ball_sizes", "enc_num_heads", "enc_depths", "dec_num_heads", "dec_depths",
        "strides", "rotate", "decode", "mlp_ratio", "dimensionality", "mp_steps")
REQUIRED = ("c_in", "c_hidden", "ball_sizes", "enc_num_heads", "enc_depths", "dec_num_heads", "dec_depths",
            "strides", "rotate")
# Keys of the ShapeNet-Car wrapper (experiments/wrappers/shapenet.py) around the model (`main_model.`).
WRAPPER_PREFIXES = ("pos_enc.", "pred_head.")
SHAPENET_KEYS = ("pos_enc.linear.weight", "pred_head.0.weight", "pred_head.0.bias", "pred_head.2.weight",
                 "pred_head.2.bias")
GRAPH_KEYS = ("graph", "graph_k", "graph_radius", "graph_max_num_neighbors", "graph_loop", "knn")


def io_dims(config):
    """(input channels, output channels) for --normalization / --fields."""
    if config.get("wrapper") == "shapenet_car":
        return 0, 1  # the inputs are the positions only; one output (the pressure)
    return config["c_in"], config["c_hidden"][0]


def unwrap_main_model(state):
    """Strip the ``main_model.`` component of a task wrapper; keep the ShapeNet-Car wrapper's tensors, refuse
    any other wrapper's."""
    if not any(k.startswith("main_model.") for k in state):
        return state
    wrapper = [k for k in state if not k.startswith("main_model.")]
    if wrapper and set(wrapper) != set(SHAPENET_KEYS):
        shapenet = all(k.startswith(WRAPPER_PREFIXES) for k in wrapper)
        if shapenet:
            missing = sorted(set(SHAPENET_KEYS) - set(wrapper))
            extra = sorted(set(wrapper) - set(SHAPENET_KEYS))
            raise ExportError("this checkpoint holds an incomplete or unknown variant of the ShapeNet-Car wrapper "
                              "(pos_enc, pred_head) around the Erwin model: "
                              + (f"missing {', '.join(missing)}" if missing else "")
                              + ("; " if missing and extra else "") + (f"unexpected {', '.join(extra)}" if extra else ""))
        raise ExportError("this checkpoint holds a task wrapper around the Erwin model (keys outside 'main_model.': "
                          + ", ".join(sorted(wrapper)[:6]) + ("…" if len(wrapper) > 6 else "")
                          + "); the library runs the ErwinTransformer and the ShapeNet-Car wrapper only")
    return OrderedDict((k[len("main_model."):] if k.startswith("main_model.") else k, v) for k, v in state.items())


def graph_options(data, origin):
    """The graph rule from a config object (top level or model arguments); {} when none is given."""
    g = {k: data[k] for k in GRAPH_KEYS if k in data}
    if not g:
        return {}
    if "knn" in g:
        if "graph" in g and g["graph"] != "knn":
            raise ExportError(f"--config ({origin}): knn = {g['knn']} contradicts graph = {g['graph']!r}")
        if g["knn"] in (None, 0, False):
            g = {"graph": "none"}
        else:
            g = dict(g, graph="knn", graph_k=int(g.pop("knn")))
    kind = g.get("graph", "none")
    if kind not in ("knn", "radius", "none"):
        raise ExportError(f"--config ({origin}): graph = {kind!r} (expected knn, radius or none)")
    if kind == "knn" and not (isinstance(g.get("graph_k"), int) and g["graph_k"] >= 1):
        raise ExportError(f"--config ({origin}): graph = knn needs an integer graph_k >= 1")
    if kind == "radius" and not (isinstance(g.get("graph_radius"), (int, float)) and g["graph_radius"] > 0):
        raise ExportError(f"--config ({origin}): graph = radius needs a positive graph_radius")
    if "graph_loop" in g:
        g["graph_loop"] = 1 if g["graph_loop"] else 0
    if kind == "none":
        return {"graph": "none"}
    return g


def detect_layout(keys):
    flash = any(".fused_message_update." in k for k in keys)
    plain = any(".message_fns." in k for k in keys)
    if flash and plain:
        raise ExportError("the state_dict mixes erwin.py ('message_fns') and erwin_flash.py "
                          "('fused_message_update') message-passing keys")
    if flash:
        return "erwin_flash"
    if plain:
        return "erwin"
    return None


def parse_config(data, origin):
    if not isinstance(data, dict):
        raise ExportError(f"--config ({origin}) must be an object of ErwinTransformer arguments")
    graph = graph_options(data, origin)
    if isinstance(data.get("model"), dict):  # {"model": {...constructor args...}}
        data = data["model"]
        graph = dict(graph_options(data, origin), **graph)
    data = {k: v for k, v in data.items() if k not in GRAPH_KEYS}
    unknown = sorted(k for k in data if k not in CTOR)
    if unknown:
        raise ExportError(f"--config ({origin}): unknown ErwinTransformer argument(s) {', '.join(unknown)}; "
                          f"expected {', '.join(CTOR)}")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ExportError(f"--config ({origin}): missing {', '.join(missing)} (ball sizes and the rotation "
                          "angle cannot be read from the weights)")
    if not isinstance(data["c_hidden"], (list, tuple)):
        raise ExportError(f"--config ({origin}): c_hidden = {data['c_hidden']!r} is a number: that is the "
                          "layout of an older erwin.py (channels doubled per level), not supported; the "
                          "current ErwinTransformer takes a list")
    if not data.get("decode", True):
        raise ExportError(f"--config ({origin}): decode = False (bottleneck output) is not supported")
    for key in ("c_hidden", "ball_sizes", "enc_num_heads", "enc_depths", "dec_num_heads", "dec_depths", "strides"):
        if not isinstance(data[key], (list, tuple)) or not all(isinstance(v, int) for v in data[key]):
            raise ExportError(f"--config ({origin}): {key} must be a list of integers, got {data[key]!r}")
    rotate = data["rotate"]
    if isinstance(rotate, bool):  # erwin_flash.py annotates rotate as bool; True is 1 degree there
        note("rotate is a boolean; the official code uses it as the angle in degrees (True = 1)")
    cfg = {k: v for k, v in data.items() if k != "decode"}
    cfg["rotate"] = float(rotate)
    return complete_config(cfg), graph


def describe(cfg):
    return (f"{cfg['variant']}, c_in {cfg['c_in']}, c_hidden {cfg['c_hidden']}, ball_sizes {cfg['ball_sizes']}, "
            f"strides {cfg['strides']}, depths {cfg['enc_depths']}/{cfg['dec_depths']}, rotate {cfg['rotate']:g}, "
            f"mp_steps {cfg['mp_steps']}, d {cfg['dimensionality']}")


def build(state, config_data, config_origin, layout_choice):
    """Family entry point: (stripped state, parsed config) -> (canonical config, expected shapes)."""
    if config_data is None:
        raise ExportError("--config is required for erwin: ball_sizes and rotate cannot be read from the weights")
    found = detect_layout(state.keys())
    if layout_choice in (None, "auto"):
        if found is None:
            raise ExportError("cannot tell models/erwin.py from models/erwin_flash.py by the keys (no "
                              "message-passing step): give --layout erwin or --layout erwin_flash")
        layout = found
    elif layout_choice in LAYOUTS:
        if found is not None and found != layout_choice:
            raise ExportError(f"--layout {layout_choice} was given but the keys are in the {found} layout")
        layout = layout_choice
    else:
        raise ExportError(f"--layout {layout_choice} is a FLARE layout; erwin takes auto, erwin or erwin_flash")
    spec, graph = parse_config(config_data, config_origin)
    spec["variant"] = layout
    try:
        config = check_config(spec)
    except ValueError as exc:
        raise ExportError(f"--config ({config_origin}): {exc}")
    wrapper = "pos_enc.linear.weight" in state
    if wrapper:
        config["wrapper"] = "shapenet_car"
    config.update(graph)
    if config["mp_steps"] > 0 and config.get("graph", "none") == "none":
        note("no graph rule in --config (graph/graph_k or knn): the model's edges must be given at predict time")
    config = OrderedDict((k, config[k]) for k in CONFIG_KINDS if k in config)
    expected = expected_state_shapes(config)
    if wrapper:
        if config["c_in"] % 2:
            raise ExportError(f"the ShapeNet-Car wrapper needs an even c_in (cos and sin halves), got {config['c_in']}")
        d, half = config["c_hidden"][0], config["c_in"] // 2
        expected.update({"pos_enc.linear.weight": (half, config["dimensionality"]), "pred_head.0.weight": (d, d),
                         "pred_head.0.bias": (d,), "pred_head.2.weight": (1, d), "pred_head.2.bias": (1,)})
    context = f"the Erwin configuration ({describe(config)}{', ShapeNet-Car wrapper' if wrapper else ''})"
    return config, expected, context, "ErwinTransformer arguments"


def prepare_state(state):
    """Family hook applied to the stripped state before build(): removes the ``main_model.`` prefix."""
    return unwrap_main_model(state)
