#!/usr/bin/env python3
"""Generates hostile model and point files from valid ones (share/docs/reliability.md, "Bad-input suite").

    make_hostile_files.py OUT FAMILY=MODEL.h5:POINTS.h5 [FAMILY=...]

For every family it copies the valid model and edits one thing per case (an attribute of the wrong class,
rank or range, an absurd size, a dataset whose declared shape is not backed by data, weights of another
type, ...); for FLARE it also writes hostile point files. It writes OUT/<family>/cases.cmake,
one `list(APPEND CASES "name~model~points~regex")` per case, where regex must match the error message
(it names the culprit). run_hostile.cmake runs them under mpirun. Needs Debian's python3-h5py.
"""
import os
import shutil
import sys

import h5py
import numpy as np

BOOL = np.dtype(bool)  # h5py stores numpy booleans as an HDF5 enum over int8


def first_config_int(path):
    """The name of a /config integer attribute that the family reads as a size (the first one present)."""
    with h5py.File(path, "r") as f:
        for name in ("num_blocks", "depth", "c_in", "num_layers", "n_layers", "in_channels", "embed_dim",
                     "channel_dim"):
            if name in f["config"].attrs:
                return name
    raise SystemExit(f"{path}: no known size attribute in /config")


def first_weight(path):
    with h5py.File(path, "r") as f:
        return sorted(f["weights"].keys())[0]


class Cases:
    def __init__(self, out, family, model, points):
        self.dir = os.path.join(out, family)
        os.makedirs(self.dir, exist_ok=True)
        self.model, self.points, self.lines = model, points, []

    def add(self, name, edit, regex, points=None, model=None):
        """A hostile copy of the model (edit(h5py.File) on it), or the given model/points files as they are."""
        path = model or os.path.join(self.dir, name + ".h5")
        if edit is not None:
            shutil.copyfile(self.model, path)
            with h5py.File(path, "r+") as f:
                edit(f)
        self.lines.append(f'list(APPEND CASES "{name}~{path}~{points or self.points}~{regex}")')

    def write(self):
        with open(os.path.join(self.dir, "cases.cmake"), "w") as out:
            out.write("\n".join(self.lines) + "\n")


def set_attr(group, name, value, dtype=None):
    if name in group.attrs:
        del group.attrs[name]
    if dtype is None:
        group.attrs[name] = value
    else:
        group.attrs.create(name, value, dtype=dtype)


def model_cases(c):
    size = first_config_int(c.model)
    weight = first_weight(c.model)
    w = lambda f: f["weights"]
    c.add("bool_array_as_size", lambda f: set_attr(f["config"], size, np.zeros(64, dtype=bool)),
          f"attribute '{size}' in /config.*must be an integer")
    c.add("format_version_array", lambda f: set_attr(f, "format_version", np.array([1, 1], dtype=np.int64)),
          "attribute 'format_version' in the root.*must be an integer")
    c.add("attribute_2d", lambda f: set_attr(f["config"], size, np.ones((2, 2), dtype=np.int64)),
          f"attribute '{size}' of /config.*2-D array")
    c.add("attribute_uint64_huge", lambda f: set_attr(f["config"], size, np.uint64(2**64 - 5)),
          f"attribute '{size}' of /config.*signed 64-bit")
    c.add("size_2p32_plus_16", lambda f: set_attr(f["config"], size, np.int64(2**32 + 16)),
          f"'{size}'.*4294967312")
    c.add("size_negative", lambda f: set_attr(f["config"], size, np.int64(-3)), f"'{size}'")
    c.add("size_huge_count", lambda f: set_attr(f["config"], size, np.int64(2**24)), f"({size}|mis-shaped|weight)")
    c.add("size_float_nan", lambda f: set_attr(f["config"], size, np.float64("nan")), f"'{size}'")
    c.add("config_missing", lambda f: f.__delitem__("config"), "has no /config group")
    c.add("weights_missing", lambda f: f.__delitem__("weights"), "has no /weights group")

    def int32_weight(f):
        data = np.asarray(w(f)[weight])
        del w(f)[weight]
        w(f).create_dataset(weight, data=data.astype(np.int32))
    c.add("weight_int32", int32_weight, f"/weights/{weight} must hold 32-bit .*found 32-bit integers")

    def float16_weight(f):
        data = np.asarray(w(f)[weight])
        del w(f)[weight]
        w(f).create_dataset(weight, data=data.astype(np.float16))
    c.add("weight_float16", float16_weight, f"/weights/{weight} must hold 32-bit .*found 16-bit floats")

    def unbacked(f):  # 8 GB declared, nothing written
        w(f).create_dataset("hostile_unbacked", shape=(2_000_000_000,), dtype=np.float32, chunks=(1024,))
    c.add("weight_unbacked_8gb", unbacked, "/weights/hostile_unbacked.*not backed")

    def forty_gb(f):
        w(f).create_dataset("hostile_40gb", shape=(10_000_000_000,), dtype=np.float32, chunks=(1024,))
    c.add("weight_declared_40gb", forty_gb, "/weights/hostile_40gb.*exceeds the accepted maximum")

    def overflow(f):
        w(f).create_dataset("hostile_overflow", shape=(2**40, 2**40), dtype=np.float32, chunks=(1, 16))
    c.add("weight_shape_overflow", overflow, "/weights/hostile_overflow.*exceeds the accepted maximum")

    def nan_weight(f):
        data = np.asarray(w(f)[weight]).astype(np.float32)
        data.flat[0] = np.nan
        w(f)[weight][...] = data
    c.add("weight_nan", nan_weight, f"(NaN or Inf values.*{weight}|{weight} has a non-finite)")

    def wrong_shape(f):
        data = np.asarray(w(f)[weight])
        del w(f)[weight]
        w(f).create_dataset(weight, data=np.zeros(data.size + 1, dtype=np.float32))
    c.add("weight_misshaped", wrong_shape, f"(mis-shaped tensors.*{weight}|{weight} has [0-9]+ values, expected)")
    c.add("architecture_unknown", lambda f: set_attr(f, "architecture", "perceiver"), "unknown architecture 'perceiver'")
    c.add("opaque_attribute", lambda f: set_attr(f["config"], "hostile_opaque", np.void(b"abcd")),
          "attribute 'hostile_opaque'.*unsupported attribute type")


def fill_weight(name, value):
    def edit(f):
        f["weights"][name][...] = np.full(f["weights"][name].shape, value, dtype=np.float32)
    return edit


def family_specific(c, family):
    cfg = lambda f: f["config"]
    if family == "flare":
        c.add("attn_scale_inf", lambda f: set_attr(cfg(f), "attn_scale", np.float64("inf")), "'attn_scale'.*finite")
        c.add("layernorm_eps_inf", lambda f: set_attr(cfg(f), "layernorm_eps", np.float64("inf")),
              "'layernorm_eps'.*finite")
        c.add("rmsnorm_bool_array", lambda f: set_attr(cfg(f), "rmsnorm", np.zeros(64, dtype=bool)),
              "'rmsnorm'.*must be an integer")
    elif family == "erwin":
        c.add("mp_steps_int_max", lambda f: set_attr(cfg(f), "mp_steps", np.int64(2**31 - 1)), "mp_steps")
        c.add("enc_depths_huge", lambda f: set_attr(cfg(f), "enc_depths",
                                                    np.full(len(cfg(f).attrs["enc_depths"]), 10**6, dtype=np.int64)),
              "enc_depths")
        c.add("c_hidden_2p32", lambda f: set_attr(cfg(f), "c_hidden",
                                                  np.full(len(cfg(f).attrs["c_hidden"]), 2**32 + 16, dtype=np.int64)),
              "'c_hidden'.*4294967312")
        c.add("rotate_nan", lambda f: set_attr(cfg(f), "rotate", np.float64("nan")), "'rotate'.*finite")
    elif family == "bsa":
        c.add("depth_1e9", lambda f: set_attr(cfg(f), "depth", np.int64(10**9)), "'depth'")
        c.add("depth_2e6", lambda f: set_attr(cfg(f), "depth", np.int64(2 * 10**6)), "depth = 2000000")
    elif family == "hept":
        c.add("regions_negative", fill_weight("regions", -1.0), "hept/regions_negative.h5': tensor 'regions' holds -1.*positive")
        c.add("block_size_huge", lambda f: set_attr(cfg(f), "block_size", np.int64(2**40)), "'block_size'")
    elif family in ("sphere", "s2"):
        if "img_size" in cfg(c_file := h5py.File(c.model, "r")).attrs:
            c_file.close()
            c.add("img_size_huge", lambda f: set_attr(cfg(f), "img_size", np.array([2**20, 2**21], dtype=np.int64)),
                  "'img_size'.*two integers")
            # A large grid against a small point file: refused from the two files, before the model builds
            # its tables (which took 115 s on this grid), well within the case's 60 s.
            c.add("grid_4096x8192", lambda f: set_attr(cfg(f), "img_size", np.array([4096, 8192], dtype=np.int64)),
                  "sample 0 has [0-9]+ points, the sphere_transformer model's 4096 x 8192 grid has 33554432")
            c.add("num_layers_huge", lambda f: set_attr(cfg(f), "num_layers", np.int64(10**7)), "num_layers")
        else:
            c_file.close()
            c.add("in_shape_huge", lambda f: set_attr(cfg(f), "in_shape", np.array([2**20, 2**21], dtype=np.int64)),
                  "'in_shape'.*two integers")
            c.add("grid_4096x8192", lambda f: (set_attr(cfg(f), "in_shape", np.array([4096, 8192], dtype=np.int64)),
                                               set_attr(cfg(f), "out_shape", np.array([4096, 8192], dtype=np.int64))),
                  "sample 0 has [0-9]+ points, the s2_[a-z_]+ model's 4096 x 8192 grid has 33554432")
            c.add("scale_zero", lambda f: set_attr(cfg(f), "scale", np.float64(0.0)), "'scale'.*positive")
            c.add("k_channels_zero", lambda f: set_attr(cfg(f), "k_channels", np.int64(0)), "'k_channels'")


def sequoia_cases(c, family):
    """NaN must never be hidden: overflowing weights (finite, so accepted) that make NaN/Inf inside the
    network must fail the prediction, per point and per sample; a negative running variance is refused."""
    w = lambda f: f["weights"]

    def fill(name, value):
        def edit(f):
            w(f)[name][...] = np.full(w(f)[name].shape, value, dtype=np.float32)
        return edit

    def negative_variance(name):
        def edit(f):
            data = np.asarray(w(f)[name]).astype(np.float32)
            data.flat[0] = -1.0
            w(f)[name][...] = data
        return edit
    if family == "sequoia_seg":
        # The head's first Linear overflows, its LayerNorm makes NaN; the ReLU after it must keep them.
        c.add("head_overflow_nan", fill("cls.0.weight", 3.0e38),
              "non-finite predictions: output field .* has [0-9]+ NaN/Inf")
        c.add("batchnorm_negative_variance", negative_variance("_init.projections.1.1.running_var"),
              "'_init.projections.1.1.running_var' holds -1.* cannot be negative")
    else:
        # The logits overflow: a per-sample output, checked as the per-point ones are.
        c.add("logits_overflow", fill("cls.3.weight", 3.0e38), "per-sample output value [0-9]+ is NaN/Inf")
        c.add("batchnorm_negative_variance", negative_variance("cls.1.running_var"),
              "'cls.1.running_var' holds -1.* cannot be negative")


def point_cases(c):
    """Hostile point files for the first family's model."""
    def points(name, build):
        path = os.path.join(c.dir, "points_" + name + ".h5")
        shutil.copyfile(c.points, path)
        with h5py.File(path, "r+") as f:
            build(f)
        return path

    def columns_2p32(f):
        del f["features"]
        f.create_dataset("features", shape=(2, 2**32 + 2), dtype=np.float32, chunks=(1, 1024))
    c.add("points_2p32_columns", None, "/features.*(not backed|columns|exceeds the accepted maximum)", points=points("columns", columns_2p32),
          model=c.model)

    def unbacked(f):
        n = f["features"].shape[0]
        del f["features"]
        f.create_dataset("features", shape=(n, 2), dtype=np.float32, chunks=(1, 2))
    c.add("points_unbacked", None, "/features.*not backed", points=points("unbacked", unbacked), model=c.model)

    def target(f):
        n = f["features"].shape[0]
        if "target" in f:
            del f["target"]
        f.create_dataset("target", data=np.zeros((n, 7), dtype=np.float32))
    c.add("points_target_channels", None, "/target has 7 channels but the model predicts",
          points=points("target", target), model=c.model)


def main():
    out, specs = sys.argv[1], sys.argv[2:]
    for spec in specs:
        family, files = spec.split("=", 1)
        model, points = files.split(":", 1)
        c = Cases(out, family, model, points)
        model_cases(c)
        family_specific(c, family)
        if family.startswith("sequoia"):
            sequoia_cases(c, family)
        if family == "flare":
            point_cases(c)
        c.write()
        print(f"{family}: {len(c.lines)} hostile cases in {c.dir}")


if __name__ == "__main__":
    main()
