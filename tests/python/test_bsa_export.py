"""surrogate-export --family bsa: synthetic checkpoints (the golden models of tests/data/bsa in the official
containers: torch.compile prefixes, the compiled sparse module inside each layer, the ShapeNet-Car wrapper),
the configuration as TransformerConfig takes it, refusals; the reference on an exported file.

Run from the repository root: /usr/bin/python3 -m unittest discover -s tests/python -v
"""

import contextlib
import io
import json
import sys
import tempfile
import unittest
from collections import OrderedDict
from pathlib import Path

sys.dont_write_bytecode = True
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "share" / "python"))

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import surrogate_export  # noqa: E402
from surrogate_ref.bsa import BSAModel, SPARSE_OPTIONS  # noqa: E402

DATA = REPO / "tests" / "data" / "bsa"
FIELDS = ("c_in", "c_hidden", "depth", "num_heads", "block_size", "mlp_ratio", "dimensionality", "ball_size",
          "should_rotate", "rotation_angle", "attention_type")


def export(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = surrogate_export.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def scalar(v):
    v = np.asarray(v)
    if v.dtype.kind in "SO":
        x = v.item()
        return x.decode() if isinstance(x, bytes) else x
    return v.item()


def read_case(name):
    with h5py.File(DATA / f"bsa_{name}.h5", "r") as f:
        config = {k: scalar(v) for k, v in f["config"].attrs.items()}
        weights = OrderedDict((k, f["weights"][k][()]) for k in f["weights"])
        golden = {k: f["golden"][k][()] for k in f["golden"]}
    return config, weights, golden


def transformer_config(config):
    """The official TransformerConfig (with attention_kwargs) of a canonical /config."""
    out = {k: config[k] for k in FIELDS}
    out["should_rotate"] = bool(out["should_rotate"])
    if config["attention_type"] == "sparse":
        out["attention_kwargs"] = {k: config[k] for k in SPARSE_OPTIONS}
        for k in ("use_compress_mlp", "use_group_selection", "should_mask_blocks_in_ball", "use_token_gated_attention",
                  "use_coarse_q_attn", "use_coarse_q_importance"):
            out["attention_kwargs"][k] = bool(out["attention_kwargs"][k])
    elif config["attention_type"] == "ball":
        out["attention_kwargs"] = {"ball_size": config["attention_ball_size"]}
    else:
        out["attention_kwargs"] = None
    return out


def compiled_keys(weights):
    """Keys as a compiled model with compiled sparse modules saves them."""
    out = OrderedDict()
    for k, v in weights.items():
        parts = k.split(".")
        if len(parts) > 3 and parts[0] == "layers" and parts[2] == "attn":
            k = ".".join(parts[:3] + ["_orig_mod"] + parts[3:])
        out["_orig_mod." + k] = torch.from_numpy(np.ascontiguousarray(v))
    return out


class BSAExport(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def save(self, state, name="ckpt.pt"):
        path = self.dir / name
        torch.save(state, path)
        return path

    def test_compiled_checkpoint_round_trip(self):
        for name in ("sparse_rot", "means_static", "ball", "global"):
            with self.subTest(case=name):
                config, weights, _ = read_case(name)
                ckpt = self.save(compiled_keys(weights))
                cfg = self.dir / "config.json"
                cfg.write_text(json.dumps({"TransformerConfig": transformer_config(config)}))
                out = self.dir / f"{name}.h5"
                rc, stdout, err = export("--family", "bsa", "--checkpoint", ckpt, "--config", cfg, "-o", out)
                self.assertEqual(rc, 0, err)
                self.assertIn("bsa model", stdout)
                with h5py.File(out, "r") as f:
                    self.assertEqual(scalar(f.attrs["architecture"]), "bsa")
                    got = {k: scalar(v) for k, v in f["config"].attrs.items()}
                    self.assertEqual(set(got), set(config))
                    for k in config:
                        self.assertEqual(got[k], config[k], k)
                    self.assertEqual(set(f["weights"]), set(weights))
                    for k in weights:
                        np.testing.assert_array_equal(f["weights"][k][()], weights[k])

    def test_exported_file_runs_in_the_reference(self):
        config, weights, golden = read_case("sparse_rot")
        ckpt = self.save({"state_dict": compiled_keys(weights)})
        flat = dict(transformer_config(config))
        flat.update(flat.pop("attention_kwargs"))  # the options flat, as YAML
        cfg = self.dir / "config.yaml"
        cfg.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in flat.items()))
        out = self.dir / "m.h5"
        rc, _, err = export("--family", "bsa", "--checkpoint", ckpt, "--config", cfg, "-o", out)
        self.assertEqual(rc, 0, err)
        with h5py.File(out, "r") as f:
            cfg_out = {k: scalar(v) for k, v in f["config"].attrs.items()}
            state = {k: torch.from_numpy(f["weights"][k][()]) for k in f["weights"]}
        model = BSAModel(cfg_out)
        model.load_official_state_dict(state)
        model = model.double()
        with torch.no_grad():
            y = model(torch.from_numpy(golden["features"]).double(), torch.from_numpy(golden["positions"]).double(),
                      golden["tree_idx"], golden["tree_mask"].astype(bool), golden["rot"],
                      len(golden["sample_sizes"])).numpy()
        self.assertLess(np.abs(y - golden["output_f64"]).max(), 1e-9 * np.abs(golden["output_f64"]).max())

    def test_shapenet_wrapper_is_detected_and_exported(self):
        config, weights, _ = read_case("global")
        D, cin, d = config["c_hidden"], config["c_in"], config["dimensionality"]
        rng = np.random.default_rng(0)
        state = OrderedDict(("_orig_mod.main_model." + k[len("_orig_mod."):], v)
                            for k, v in compiled_keys(weights).items())
        wrapper = {"pos_enc.linear.weight": (cin // 2, d), "pred_head.0.weight": (D, D), "pred_head.0.bias": (D,),
                   "pred_head.2.weight": (1, D), "pred_head.2.bias": (1,)}
        config = dict(config, c_in=4)  # the wrapper needs an even c_in: use a model with c_in 4
        state["_orig_mod.main_model.embed.weight"] = torch.zeros(D, 4)
        wrapper["pos_enc.linear.weight"] = (2, d)
        for k, shape in wrapper.items():
            state["_orig_mod." + k] = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
        ckpt = self.save(state)
        out = self.dir / "w.h5"
        rc, stdout, err = export("--family", "bsa", "--checkpoint", ckpt, "--config",
                                 json.dumps(transformer_config(config)), "-o", out)
        self.assertEqual(rc, 0, err)
        self.assertIn("wrapper shapenet_car", stdout)
        with h5py.File(out, "r") as f:
            self.assertEqual(scalar(f["config"].attrs["wrapper"]), "shapenet_car")
            for k in wrapper:
                self.assertIn(k, f["weights"])
            self.assertIn("layers.1.attn.qkv.weight", f["weights"])
        # Another wrapper (a Linear embedding of the positions) is refused, as is an incomplete one.
        other = OrderedDict(state)
        other["_orig_mod.embedding_model.weight"] = torch.zeros(4, 3)
        rc, _, err = export("--family", "bsa", "--checkpoint", self.save(other, "o.pt"), "--config",
                            json.dumps(transformer_config(config)), "-o", self.dir / "o.h5")
        self.assertEqual(rc, 2)
        self.assertIn("embedding_model.weight", err)
        partial = OrderedDict(state)
        del partial["_orig_mod.pred_head.2.bias"]
        rc, _, err = export("--family", "bsa", "--checkpoint", self.save(partial, "p.pt"), "--config",
                            json.dumps(transformer_config(config)), "-o", self.dir / "p.h5")
        self.assertEqual(rc, 2)
        self.assertIn("pred_head.2.bias", err)

    def test_refusals_name_the_problem(self):
        config, weights, _ = read_case("means_static")
        tc = transformer_config(config)
        ckpt = self.save(compiled_keys(weights))

        def refused(cfg, fragment, path=ckpt):
            rc, _, err = export("--family", "bsa", "--checkpoint", path, "--config", json.dumps(cfg), "-o",
                                self.dir / "x.h5")
            self.assertEqual(rc, 2, err)
            self.assertIn(fragment, err)

        refused(dict(tc, attention_type="lucidrains_sparse"), "lucidrains")
        refused(dict(tc, attention_kwargs=dict(tc["attention_kwargs"], window=3)), "window")
        refused(dict(tc, num_layers=3), "num_layers")
        refused({k: v for k, v in tc.items() if k != "depth"}, "depth")
        # Options that change the keys are checked against them (block means vs compression MLPs).
        refused(dict(tc, attention_kwargs=dict(tc["attention_kwargs"], use_compress_mlp=True)),
                "layers.0.attn.k_compress_mlp.0.weight")
        # Block-level importance without group selection (unsupported by the library).
        refused(dict(tc, attention_kwargs=dict(tc["attention_kwargs"], use_group_selection=False)), "use_group_selection")
        refused(dict(tc, depth=4), "layers.3")
        missing = OrderedDict(compiled_keys(weights))
        del missing["_orig_mod.layers.1.attn._orig_mod.gated_attention.gates"]
        refused(tc, "layers.1.attn.gated_attention.gates", self.save(missing, "m.pt"))
        rc, _, err = export("--family", "bsa", "--checkpoint", ckpt, "-o", self.dir / "x.h5")
        self.assertEqual(rc, 2)
        self.assertIn("--config is required", err)


if __name__ == "__main__":
    unittest.main()
