"""HEPT family (Graph-COM/HEPT: ``example/transformer.py`` and ``src/models/baselines/transformer.py``, class
``Transformer``).

Plain state_dicts as the repository saves them (the shipped ``example/ckpt/tracking-60k-model.pt``).
The layout is detected from the keys: ``attns.{l}.attn.e2lsh.beta`` exists only in the ``src/`` code
(zero padding with ``+inf`` keys, additive region shift), otherwise ``example`` (padding by duplication,
bit-packed region codes). ``regions`` is stored non-contiguous; its logical values are exported.
``--config``: the ``Transformer`` constructor arguments as JSON (``in_dim``, ``coords_dim``,
``num_classes``, ``dropout``, ``block_size``, ``n_hashes``, ``num_regions``, ``num_heads``, ``h_dim``,
``n_layers``, ``num_w_per_dist``; ``src``: ``attn_type``, ``task``, ``pe_type`` instead of
``num_classes``/``dropout``) or a ``src/configs/*`` YAML (its ``model_kwargs``; ``in_dim``,
``coords_dim``, ``num_classes`` and the ``src`` task then come from the weights: ``pids_enc.weight``
exists only for ``task: pileup``). Semantics: share/docs/hept.md.
"""

from collections import OrderedDict

from .common import ExportError, note

FAMILY = "hept"
DEFAULT_SOURCE = "Graph-COM/HEPT@8d256c1c11c81e24c77d57e80decfeb02df75968"

CONFIG_KINDS = OrderedDict([
    ("layout", "str"), ("in_dim", "int"), ("coords_dim", "int"), ("num_classes", "int"), ("block_size", "int"),
    ("n_hashes", "int"), ("num_regions", "int"), ("num_heads", "int"), ("h_dim", "int"), ("n_layers", "int"),
    ("num_w_per_dist", "int"), ("task", "str"),
])
EXAMPLE_ARGS = ("in_dim", "coords_dim", "num_classes", "dropout", "block_size", "n_hashes", "num_regions",
                "num_heads", "h_dim", "n_layers", "num_w_per_dist")
SRC_ARGS = ("attn_type", "in_dim", "coords_dim", "task", "block_size", "n_hashes", "num_regions", "num_heads",
            "h_dim", "n_layers", "num_w_per_dist", "pe_type")
HYPER = ("block_size", "n_hashes", "num_heads", "h_dim", "n_layers", "num_w_per_dist")
# The pileup task's particle-id embedding (src/models/baselines/transformer.py): Embedding(7, 10) of the
# last input column, so the feature encoder reads in_dim - 1 + 10 channels.
PID_CLASSES, PID_EMBEDDING = 7, 10


def io_dims(config):
    """(input channels, output channels) for --normalization / --fields."""
    return config["in_dim"], config["num_classes"] or config["h_dim"] // 2


def check_normalization(config, normalization):
    """The pileup task's last input channel is a particle-id class looked up in pids_enc.weight after the
    library's input normalisation: it must pass unchanged (mean 0, std 1)."""
    if config.get("task") != "pileup" or "input_mean" not in normalization:
        return
    c = config["in_dim"] - 1
    mean, std = float(normalization["input_mean"][c]), float(normalization["input_std"][c])
    if mean != 0.0 or std != 1.0:
        raise ExportError(f"--normalization: input channel {c} is the pileup task's particle-id class (looked up "
                          f"in pids_enc.weight); its input_mean and input_std must be 0 and 1, not {mean:g} and "
                          f"{std:g}")


def detect_layout(keys):
    return "src" if any(k.endswith(".attn.e2lsh.beta") for k in keys) else "example"


def _shape(state, key):
    if key not in state:
        raise ExportError(f"the state_dict has no {key} (is it a HEPT Transformer?)")
    return tuple(state[key].shape)


def _from_weights(state):
    """in_dim, coords_dim, num_classes (and whether pids_enc makes it a pileup model) as the weights imply."""
    h_dim = _shape(state, "feat_encoder.0.weight")[0]
    in_dim = _shape(state, "feat_encoder.0.weight")[1]
    if "pids_enc.weight" in state:  # the constructor's in_dim counts the class column, not its embedding
        in_dim -= PID_EMBEDDING - 1
    hash_dim = _shape(state, "attns.0.attn.e2lsh.alpha")[1]
    classes = _shape(state, "out_proj.weight")[0] if "out_proj.weight" in state else 0
    return {"in_dim": in_dim, "coords_dim": hash_dim - h_dim, "num_classes": classes}


def _task(state):
    return "pileup" if "pids_enc.weight" in state else "tracking"


def parse_config(data, origin, layout, state):
    if not isinstance(data, dict):
        raise ExportError(f"--config ({origin}) must be an object of Transformer arguments or a src/configs YAML")
    derived = _from_weights(state)
    if isinstance(data.get("model_kwargs"), dict):  # src/configs/*.yaml
        name = data.get("model_name", "trans_hept")
        if name != "trans_hept":
            raise ExportError(f"--config ({origin}): model_name {name!r} is not trans_hept")
        data = dict(data["model_kwargs"], **derived)
        if layout == "src":  # the src constructor has no num_classes (out_proj comes with the task)
            data.pop("num_classes")
            data.update(attn_type="hept", task=_task(state))
        elif data.pop("pe_type", "none") != "none":
            raise ExportError(f"--config ({origin}): pe_type {data['pe_type']!r} is not supported")
    allowed = SRC_ARGS if layout == "src" else EXAMPLE_ARGS
    unknown = sorted(k for k in data if k not in allowed)
    if unknown:
        raise ExportError(f"--config ({origin}): unknown {layout} Transformer argument(s) {', '.join(unknown)}; "
                          f"expected {', '.join(allowed)}")
    cfg = dict(derived)
    for key, value in data.items():
        if key in derived and value != derived[key] and not (key == "num_classes" and not value and not derived[key]):
            raise ExportError(f"--config ({origin}): {key} = {value!r} but the weights give {derived[key]}")
    missing = [k for k in HYPER if k not in data]
    if missing:
        raise ExportError(f"--config ({origin}): missing {', '.join(missing)}")
    for key in HYPER + ("num_regions",):
        if key in data:
            if not isinstance(data[key], int) or isinstance(data[key], bool) or data[key] < 1:
                raise ExportError(f"--config ({origin}): {key} must be a positive integer, got {data[key]!r}")
            cfg[key] = data[key]
    cfg.setdefault("num_regions", 0)
    if layout == "src":
        if data.get("attn_type", "hept") != "hept":
            raise ExportError(f"--config ({origin}): attn_type {data['attn_type']!r}: only hept is this family")
        if data.get("pe_type", "none") != "none":
            raise ExportError(f"--config ({origin}): pe_type {data['pe_type']!r} is not supported (the configs use none)")
        task = data.get("task", "tracking")
        if task not in ("tracking", "pileup"):
            raise ExportError(f"--config ({origin}): task {task!r} is not supported (tracking or pileup)")
        if task != _task(state):
            raise ExportError(f"--config ({origin}): task {task!r} but the weights are those of task "
                              f"{_task(state)!r} (pids_enc.weight is present exactly for pileup)")
        if task == "pileup" and derived["num_classes"] != 1:
            raise ExportError(f"--config ({origin}): task pileup needs out_proj.weight of shape (1, h_dim/2)")
        cfg["task"] = task
    elif "dropout" in data:
        note("dropout is inactive at inference and not exported")
    return cfg


def expected_shapes(cfg):
    h, H, L, cd = cfg["h_dim"], cfg["num_heads"], cfg["n_layers"], cfg["coords_dim"]
    s = OrderedDict()
    s["regions"] = (cfg["n_hashes"], 2, H)
    pileup = cfg.get("task") == "pileup"
    if pileup:
        s["pids_enc.weight"] = (PID_CLASSES, PID_EMBEDDING)
    s["feat_encoder.0.weight"] = (h, cfg["in_dim"] - 1 + PID_EMBEDDING if pileup else cfg["in_dim"])
    s["feat_encoder.0.bias"] = (h,)
    s["feat_encoder.2.weight"], s["feat_encoder.2.bias"] = (h, h), (h,)
    for l in range(L):
        p = f"attns.{l}."
        for name in ("w_q", "w_k", "w_v"):
            s[p + name + ".weight"] = (H * h, h)
        s[p + "attn.out_linear.weight"], s[p + "attn.out_linear.bias"] = (h, H * h), (h,)
        s[p + "attn.e2lsh.alpha"] = (H, h + cd, cfg["n_hashes"])
        if cfg["layout"] == "src":
            s[p + "attn.e2lsh.beta"] = (1, cfg["n_hashes"])
        for name in ("norm1", "norm2"):
            s[p + name + ".weight"], s[p + name + ".bias"] = (h,), (h,)
        for name in ("ff.0", "ff.2"):
            s[p + name + ".weight"], s[p + name + ".bias"] = (h, h), (h,)
        s[p + "w_rpe.weight"], s[p + "w_rpe.bias"] = (H * h, cfg["num_w_per_dist"] * (cd - 1)), (H * h,)
    s["W.weight"] = (h // 2, h * (L + 1))
    widths = [h // 2, 256, 256, 256, 256, h // 2]
    for j in range(5):
        s[f"mlp_out.lins.{j}.weight"], s[f"mlp_out.lins.{j}.bias"] = (widths[j + 1], widths[j]), (widths[j + 1],)
    for j in range(4):
        s[f"mlp_out.norms.{j}.weight"], s[f"mlp_out.norms.{j}.bias"] = (256,), (256,)
    if cfg["num_classes"]:
        s["out_proj.weight"], s["out_proj.bias"] = (cfg["num_classes"], h // 2), (cfg["num_classes"],)
    return s


def describe(cfg):
    task = ", pileup task" if cfg.get("task") == "pileup" else ""
    return (f"{cfg['layout']} layout{task}, in_dim {cfg['in_dim']}, coords_dim {cfg['coords_dim']}, "
            f"h_dim {cfg['h_dim']}, {cfg['n_layers']} layers, {cfg['num_heads']} heads, {cfg['n_hashes']} hashes, "
            f"block {cfg['block_size']}" + (f", {cfg['num_classes']} classes" if cfg["num_classes"] else ""))


def build(state, config_data, config_origin, layout_choice):
    """Family entry point: (stripped state, parsed config) -> (canonical config, expected shapes)."""
    layout = detect_layout(state.keys())
    if layout_choice not in (None, "auto", layout):
        raise ExportError(f"--layout {layout_choice}: the keys are those of the {layout} layout"
                          if layout_choice in ("example", "src") else
                          f"--layout {layout_choice} does not apply to hept (example or src, detected from the keys)")
    if config_data is None:
        raise ExportError("--config is required for hept: block_size, n_hashes and num_w_per_dist cannot be read "
                          "from the weights")
    cfg = parse_config(config_data, config_origin, layout, state)
    cfg["layout"] = layout
    if cfg["h_dim"] % 2:
        raise ExportError(f"--config ({config_origin}): h_dim {cfg['h_dim']} must be even (output width h_dim/2)")
    config = OrderedDict((k, cfg[k]) for k in CONFIG_KINDS if k in cfg)  # task: src only
    return config, expected_shapes(config), f"the HEPT {layout} configuration ({describe(config)})", f"{layout}/ Transformer"
