"""Sequoia family (HySonLab/HierAttention ``point_cloud/``: ``TreeTransformerSeg`` of
``part_segmentation/model/TreeTransformerSeg.py`` and ``TreeTransformerCls`` of
``classification/model/TreeTransformerCls.py``).

Containers: the segmentation script's ``{"model_state_dict": ...}`` and the classification script's bare
state_dict of an ``nn.DataParallel`` model (every key prefixed ``module.``, removed like any ``module.`` /
``_orig_mod.`` component). The model is detected from the keys (``_init.projections.0.conv.local_nn`` =
classification's PointConv, ``_init.projections.0.0`` = segmentation's Linear). The widths (``dim``,
``c``, ``depth``, ``layers``, ``heads``, ``n_class``, ``n_part``, ``dim_cls``) are read from the weights;
``--config`` gives what they do not hold: ``divide`` (``TREE.divide``) and, for classification,
``selection`` (``TREE.selection``). The config is the ``args`` namespace the models take, as a JSON object
or the repository's YAML (sections ``TREE``, ``MODEL``, ``DATA``, ``TRAIN`` … flattened, a later section
overriding an earlier one, as its ``load_cfg_from_cfg_file`` does); values it gives for the widths are
checked against the weights. share/docs/sequoia.md, model-format.md "Sequoia".
"""

from collections import OrderedDict

from .common import ExportError, note

FAMILY = "sequoia"
DEFAULT_SOURCE = "HySonLab/HierAttention@unknown"
CONFIG_KINDS = OrderedDict([
    ("model_class", "str"), ("c", "int"), ("dim", "int"), ("heads", "int"), ("depth", "int"), ("layers", "int"),
    ("divide", "int"), ("n_class", "int"), ("n_part", "int"), ("dim_cls", "int"), ("selection", "str"),
])
SEG, CLS = "TreeTransformerSeg", "TreeTransformerCls"
SECTIONS = ("TREE", "MODEL", "DATA", "TRAIN", "TEST", "Distributed", "DISTRIBUTED")
FROM_WEIGHTS = ("c", "dim", "heads", "depth", "layers", "n_class", "n_part", "dim_cls")


def detect_model(keys):
    cls = any(k.startswith("_init.projections.0.conv.local_nn.") for k in keys)
    seg = any(k.startswith("_init.projections.0.0.") for k in keys)
    if cls == seg:
        raise ExportError("cannot tell TreeTransformerSeg from TreeTransformerCls: expected either "
                          "'_init.projections.0.0.weight' (segmentation) or "
                          "'_init.projections.0.conv.local_nn.lins.0.weight' (classification) in the state_dict")
    return CLS if cls else SEG


def _shape(state, key):
    if key not in state:
        raise ExportError(f"the state_dict has no {key!r}, needed to read the model's widths")
    return tuple(state[key].shape)


def widths_from_state(state, model):
    """The constructor arguments the weights determine."""
    first = "_init.projections.0.conv.local_nn.lins.0.weight" if model == CLS else "_init.projections.0.0.weight"
    dim, c_in = _shape(state, first)
    out = {"dim": dim, "c": c_in - 3 if model == CLS else c_in}
    projections = {int(k.split(".")[2]) for k in state if k.startswith("_init.projections.")}
    out["depth"] = max(projections)  # projections 0 .. depth (levels: points, voxel levels, root)
    out["layers"] = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("enc."))
    e = _shape(state, "enc.0.attn2a.parents_attns.0.pe_mlp.3.weight")[0]
    if e <= 0 or dim % e:
        raise ExportError(f"head width {e} of parents_attns.0 does not divide dim {dim}")
    out["heads"] = dim // e
    head_in = _shape(state, "cls.0.weight")[1]
    if model == SEG:
        out["n_class"] = head_in - dim
        out["n_part"] = _shape(state, "cls.3.weight")[0]
    else:
        out["dim_cls"] = head_in
        classes = _shape(state, "cls.3.weight")[0]
        if classes != 40:
            raise ExportError(f"cls.3.weight has {classes} rows; TreeTransformerCls has 40 classes (hard-coded)")
    return out


def flatten_config(data, origin):
    """The ``args`` namespace: a flat object, or the YAML's sections merged in file order."""
    if not isinstance(data, dict):
        raise ExportError(f"--config ({origin}) must be an object")
    if any(isinstance(v, dict) for v in data.values()):
        flat = {}
        for name, section in data.items():
            if isinstance(section, dict):
                flat.update(section)
            else:
                flat[name] = section
        return flat
    return dict(data)


def expected_shapes(cfg):
    """The state_dict keys and shapes of the configured model (reference-models.md §2.6)."""
    s = OrderedDict()
    dim, L, heads = cfg["dim"], cfg["depth"] + 1, cfg["heads"]

    def width(i):
        return dim * 2 ** i

    def bn(p, d):
        for k in ("weight", "bias", "running_mean", "running_var"):
            s[f"{p}.{k}"] = (d,)

    if cfg["model_class"] == SEG:
        s["_init.projections.0.0.weight"] = (dim, cfg["c"])
        s["_init.projections.0.0.bias"] = (dim,)
        bn("_init.projections.0.1", dim)
    else:
        s["_init.projections.0.conv.local_nn.lins.0.weight"] = (dim, cfg["c"] + 3)
        s["_init.projections.0.conv.local_nn.lins.0.bias"] = (dim,)
    for i in range(1, L):
        s[f"_init.projections.{i}.0.weight"] = (width(i), width(i - 1))
        s[f"_init.projections.{i}.0.bias"] = (width(i),)
        bn(f"_init.projections.{i}.1", width(i))
    for layer in range(cfg["layers"]):
        e = f"enc.{layer}."
        s[e + "attn2a.weight"] = (3,)
        for i in range(L):
            d = width(i)
            s[f"{e}mlp1s.{i}.0.weight"] = (d, d)
            bn(f"{e}mlp1s.{i}.1", d)
            s[f"{e}mlp3as.{i}.0.weight"] = (d, d)
            bn(f"{e}mlp3as.{i}.1", d)
            bn(f"{e}attn2bs.{i}.0", d)
            for q in ("linearQ", "linearK", "linearV"):
                s[f"{e}attn2a.{q}.{i}.weight"] = (d, d)
            if i > 0:
                s[f"{e}attn2a.expands_K.{i - 1}.weight"] = (d, width(i - 1))
                s[f"{e}attn2a.expands_V.{i - 1}.weight"] = (d, width(i - 1))
            if i + 1 < L:
                s[f"{e}attn2a.shrinks_K.{i}.weight"] = (d, width(i + 1))
                s[f"{e}attn2a.shrinks_V.{i}.weight"] = (d, width(i + 1))
            for kind in ("parents_attns", "children_attns", "siblings_attns"):
                p = f"{e}attn2a.{kind}.{i}.pe_mlp"
                s[p + ".0.weight"] = (3, 3)
                s[p + ".0.bias"] = (3,)
                bn(p + ".1", 3)
                s[p + ".3.weight"] = (d // heads, 3)
                s[p + ".3.bias"] = (d // heads,)
    if cfg["model_class"] == SEG:
        s["cls.0.weight"] = (512, dim + cfg["n_class"])
        s["cls.0.bias"] = (512,)
        s["cls.1.weight"] = (512,)
        s["cls.1.bias"] = (512,)
        s["cls.3.weight"] = (cfg["n_part"], 512)
        s["cls.3.bias"] = (cfg["n_part"],)
    else:
        s["cls.0.weight"] = (512, cfg["dim_cls"])
        s["cls.0.bias"] = (512,)
        bn("cls.1", 512)
        s["cls.3.weight"] = (40, 512)
        s["cls.3.bias"] = (40,)
    return s


def io_dims(config):
    """(input channels, output channels) for --normalization / --fields: per-point channels."""
    return config["c"], config["n_part"] if config["model_class"] == SEG else 0


def root_attributes(config):
    """Root attributes besides the common ones: the model class (the library reads it there)."""
    return {"model_class": config["model_class"]}


def describe(cfg):
    text = (f"{cfg['model_class']}, c {cfg['c']}, dim {cfg['dim']}, heads {cfg['heads']}, depth {cfg['depth']}, "
            f"divide {cfg['divide']}, {cfg['layers']} block(s)")
    if cfg["model_class"] == SEG:
        return text + f", n_class {cfg['n_class']}, n_part {cfg['n_part']}"
    return text + f", dim_cls {cfg['dim_cls']}, selection {cfg['selection']}"


def build(state, config_data, config_origin, layout_choice):
    """Family entry point: (stripped state, parsed config) -> (canonical config, expected shapes)."""
    if layout_choice not in (None, "auto"):
        raise ExportError(f"--layout {layout_choice} does not apply to sequoia (one key layout per model)")
    model = detect_model(state.keys())
    if config_data is None:
        raise ExportError("--config is required for sequoia: the voxel hierarchy's 'divide' (TREE.divide)"
                          + (" and the head's 'selection' (TREE.selection)" if model == CLS else "")
                          + " are not in the weights")
    args = flatten_config(config_data, config_origin)
    cfg = OrderedDict([("model_class", model)])
    cfg.update(widths_from_state(state, model))
    clash = [f"{k} = {args[k]!r} (weights: {cfg[k]})" for k in FROM_WEIGHTS if k in args and k in cfg
             and args[k] is not None and int(args[k]) != cfg[k]]
    if clash:
        raise ExportError(f"--config ({config_origin}) contradicts the weights: " + "; ".join(clash))
    if "divide" not in args:
        raise ExportError(f"--config ({config_origin}): no 'divide' (TREE.divide, cells per axis per voxel level)")
    cfg["divide"] = int(args["divide"])
    if cfg["divide"] < 2:
        raise ExportError(f"--config ({config_origin}): divide = {cfg['divide']} (at least 2)")
    if model == CLS:
        selection = args.get("selection")
        if selection is None:
            raise ExportError(f"--config ({config_origin}): no 'selection' (TREE.selection: root, inner or leaf)")
        if selection not in ("root", "inner", "leaf"):
            raise ExportError(f"--config ({config_origin}): selection = {selection!r} (root, inner or leaf)")
        level = {"root": cfg["depth"], "inner": cfg["depth"] - 1, "leaf": 0}[selection]
        if cfg["dim_cls"] != cfg["dim"] * 2 ** level:
            raise ExportError(f"the head's input width {cfg['dim_cls']} is not the width of the '{selection}' level "
                              f"({cfg['dim'] * 2 ** level})")
        cfg["selection"] = selection
    if args.get("arch") not in (None, "tree", "TreeTransformerSeg", "TreeTransformerCls"):
        note(f"config arch = {args['arch']!r}; the weights are a {model}")
    context = f"the Sequoia configuration ({describe(cfg)})"
    return cfg, expected_shapes(cfg), context, model
