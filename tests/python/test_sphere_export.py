"""surrogate-export --family sphere_transformer | s2_attention | s2_neighborhood_attention: the schema of
share/docs/model-format.md §4.3 on synthetic state_dicts (keys and shapes written out here from the official
torch-harmonics 0.9.3 modules, independently of the exporter's tables), presets, containers, refusals, and the
golden model files of tests/data/sphere/models re-exported from their own weights.

Runs without torch-harmonics (Debian's python3 with torch 1.13):
    /usr/bin/python3 -m unittest discover -s tests/python -v
"""

import contextlib
import importlib.util
import io
import json
import math
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

MODELS = REPO / "tests" / "data" / "sphere" / "models"
HAVE_TH = importlib.util.find_spec("torch_harmonics") is not None


def export(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = surrogate_export.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def scalar(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return v


def read(path):
    with h5py.File(path, "r") as f:
        root = {k: scalar(v) for k, v in f.attrs.items()}
        config = {k: f["config"].attrs[k] for k in f["config"].attrs}
        weights = OrderedDict((k, f["weights"][k][()]) for k in f["weights"])
        tables = {k: f["tables"][k][()] for k in f["tables"]} if "tables" in f else {}
    return root, config, weights, tables


def transformer_state(E=16, cin=2, cout=3, layers=2, K=9, h=9, w=16, norm="instance_norm", pos="spectral",
                      bias=False, mlp=True, hidden=32, drop=False, seed=0):
    """A SphericalTransformer state_dict as torch-harmonics 0.9.3 names it (checked against the official module
    when the golden data were made)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    s = OrderedDict()
    if pos in ("spectral", "sequence", "learnable latlon"):
        s["pos_embed.position_embeddings"] = r(1, E, h, w)
    elif pos == "learnable lat":
        s["pos_embed.position_embeddings"] = r(1, E, h, 1)
    s["encoder.conv.weight"] = r(E, cin, K)
    for i in range(layers):
        b = f"blocks.{i}."
        for n in ("norm0", "norm1"):
            if norm == "instance_norm":
                s[b + n + ".weight"], s[b + n + ".bias"] = r(E), r(E)
            elif norm == "layer_norm":
                s[b + n + ".norm.weight"], s[b + n + ".norm.bias"] = r(E), r(E)
        for n in ("q", "k", "v", "proj"):
            s[b + f"self_attn.{n}_weights"] = r(E, E, 1, 1)
        if bias:
            for n in ("q", "k", "v", "proj"):
                s[b + f"self_attn.{n}_bias"] = r(E)
        if mlp:
            s[b + "mlp.fwd.0.weight"], s[b + "mlp.fwd.0.bias"] = r(hidden, E, 1, 1), r(hidden)
            s[b + ("mlp.fwd.3.weight" if drop else "mlp.fwd.2.weight")] = r(E, hidden, 1, 1)
    s["decoder.conv.weight"] = r(cout, E, K)
    return s


SMALL = {"img_size": [17, 32], "scale_factor": 2, "in_chans": 2, "out_chans": 3, "embed_dim": 16, "num_layers": 2,
         "encoder_kernel_shape": [5, 4], "filter_basis_type": "piecewise linear", "normalization_layer": "instance_norm",
         "attention_mode": "global"}


class SphereExport(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def save(self, state, name="m.pt"):
        path = self.dir / name
        torch.save(state, path)
        return path

    def run_ok(self, family, state, config=None, *options, name="m"):
        ckpt = self.save(state, name + ".pt")
        out = self.dir / (name + ".h5")
        args = ["--family", family, "--checkpoint", ckpt, "-o", out, *options]
        if config is not None:
            args += ["--config", json.dumps(config)]
        if "--torch-harmonics-version" not in options:
            args += ["--torch-harmonics-version", "0.9.3"]
        rc, stdout, stderr = export(*args)
        self.assertEqual(rc, 0, stderr)
        return read(out), stdout, stderr

    def refused(self, family, state, config=None, *options):
        ckpt = self.save(state, "bad.pt")
        out = self.dir / "bad.h5"
        args = ["--family", family, "--checkpoint", ckpt, "-o", out, *options]
        if config is not None:
            args += ["--config", json.dumps(config)]
        if "--torch-harmonics-version" not in options:
            args += ["--torch-harmonics-version", "0.9.3"]
        rc, _, err = export(*args)
        self.assertEqual(rc, 2, err)
        self.assertFalse(out.exists())
        return err

    # ---- sphere_transformer -------------------------------------------------------------------------

    def test_transformer_schema(self):
        state = transformer_state()
        (root, config, weights, tables), stdout, _ = self.run_ok("sphere_transformer", state, SMALL)
        self.assertEqual(root["architecture"], "sphere_transformer")
        self.assertEqual(root["source"], "NVIDIA/torch-harmonics@v0.9.3")
        self.assertEqual(root["format"], "surrogate-model")
        self.assertEqual(tables, {})
        expect = {"torch_harmonics_version": "0.9.3", "img_size": [17, 32], "grid": "equiangular",
                  "grid_internal": "legendre-gauss", "scale_factor": 2, "in_chans": 2, "out_chans": 3, "embed_dim": 16,
                  "num_layers": 2, "activation_function": "gelu", "encoder_kernel_shape": [5, 4],
                  "filter_basis_type": "piecewise linear", "basis_norm_mode": "nodal", "num_heads": 1, "use_mlp": 1,
                  "mlp_ratio": 2.0, "drop_rate": 0.0, "drop_path_rate": 0.0, "normalization_layer": "instance_norm",
                  "residual_prediction": 0, "pos_embed": "spectral", "upsample_sht": 0, "attention_mode": "global",
                  "bias": 0}
        self.assertEqual({k: scalar(v) for k, v in config.items()}, expect)  # theta_cutoff absent = None
        # types: integers and booleans int64, floats float64, int arrays int64
        for key in ("scale_factor", "embed_dim", "use_mlp", "bias"):
            self.assertEqual(config[key].dtype, np.int64, key)
        for key in ("mlp_ratio", "drop_rate"):
            self.assertEqual(config[key].dtype, np.float64, key)
        for key in ("img_size", "encoder_kernel_shape"):
            self.assertEqual(config[key].dtype, np.int64, key)
        self.assertEqual(sorted(weights), sorted(state))
        for k, v in state.items():
            np.testing.assert_array_equal(weights[k], v.numpy(), err_msg=k)
            self.assertEqual(weights[k].dtype, np.float32)
        self.assertIn("global attention", stdout)

    def test_transformer_upsample_sht_is_recorded(self):
        # the SHT decoder has no state_dict entries of its own (its tables are non-persistent buffers): the
        # same weights, upsample_sht = 1 in /config
        state = transformer_state()
        (_, config, weights, _), _, _ = self.run_ok("sphere_transformer", state, dict(SMALL, upsample_sht=True))
        self.assertEqual(scalar(config["upsample_sht"]), 1)
        self.assertEqual(config["upsample_sht"].dtype, np.int64)
        self.assertEqual(sorted(weights), sorted(state))

    def test_defaults_are_the_constructor_defaults(self):
        # no --config: SphericalTransformer() of 0.9.3 (img 128x256, scale 3 -> 43x85, embed 256, morlet (3, 3),
        # neighbourhood attention, no norm, spectral embedding)
        state = transformer_state(E=256, cin=3, cout=3, layers=4, K=9, h=43, w=85, norm="none", hidden=512)
        (_, config, _, _), _, _ = self.run_ok("sphere_transformer", state)
        c = {k: scalar(v) for k, v in config.items()}
        self.assertEqual(c["img_size"], [128, 256])
        self.assertEqual(c["scale_factor"], 3)
        self.assertEqual(c["filter_basis_type"], "morlet")
        self.assertEqual(c["attention_mode"], "neighborhood")
        self.assertEqual(c["normalization_layer"], "none")

    def test_presets(self):
        # s2ntransformer_sc2_layers4_e128 at a reduced grid and depth: 17x32 -> 9x16, K = (5//2)*4 + 1 = 9
        state = transformer_state(E=128, cin=3, cout=3, layers=1, K=9, h=9, w=16, hidden=256)
        (_, config, _, _), _, _ = self.run_ok("sphere_transformer", state, {"img_size": [17, 32], "num_layers": 1},
                                              "--preset", "s2ntransformer_sc2_layers4_e128")
        c = {k: scalar(v) for k, v in config.items()}
        for key, value in {"embed_dim": 128, "attention_mode": "neighborhood", "scale_factor": 2,
                           "encoder_kernel_shape": [5, 4], "filter_basis_type": "piecewise linear",
                           "normalization_layer": "instance_norm", "pos_embed": "spectral", "bias": 0,
                           "grid_internal": "legendre-gauss", "num_heads": 1, "mlp_ratio": 2.0}.items():
            self.assertEqual(c[key], value, key)
        self.assertNotIn("theta_cutoff", c)
        (_, config, _, _), _, _ = self.run_ok("sphere_transformer", state, {"img_size": [17, 32], "num_layers": 1},
                                              "--preset", "s2transformer_sc2_layers4_e128", name="g")
        self.assertEqual(scalar(config["attention_mode"]), "global")
        self.assertIn("is not a model-zoo name",
                      self.refused("sphere_transformer", state, None, "--preset", "s2transformer_sc3_layers9"))

    def test_variants(self):
        # layer norm (norm0.norm.*), learnable lat embedding (h, 1), biases, drop_rate > 0 (fwd.3), residual,
        # isotropic kernel (3,) -> K = 2, theta_cutoff, morlet (3, 3) -> K = 9, zernike (4,) -> K = 10
        state = transformer_state(cin=3, cout=3, K=2, norm="layer_norm", pos="learnable lat", bias=True, drop=True)
        cfg = dict(SMALL, in_chans=3, normalization_layer="layer_norm", pos_embed="learnable lat", bias=True,
                   drop_rate=0.1, residual_prediction=True, encoder_kernel_shape=[3], theta_cutoff=0.7,
                   attention_mode="neighborhood", num_heads=2)
        (_, config, weights, _), _, _ = self.run_ok("sphere_transformer", state, cfg)
        self.assertEqual(scalar(config["theta_cutoff"]), 0.7)
        self.assertEqual(scalar(config["encoder_kernel_shape"]), [3])
        self.assertIn("blocks.1.mlp.fwd.3.weight", weights)
        state = transformer_state(K=9, norm="none", pos="none", mlp=False)
        cfg = dict(SMALL, normalization_layer="none", pos_embed="none", use_mlp=False, encoder_kernel_shape=[3, 3],
                   filter_basis_type="morlet")
        self.run_ok("sphere_transformer", state, cfg, name="morlet")
        state = transformer_state(K=10, pos="learnable latlon", hidden=24)
        cfg = dict(SMALL, pos_embed="learnable latlon", encoder_kernel_shape=[4], filter_basis_type="zernike",
                   mlp_ratio=1.5)
        self.run_ok("sphere_transformer", state, cfg, name="zernike")

    def test_transformer_refusals(self):
        state = transformer_state()
        partial = OrderedDict((k, v) for k, v in state.items() if k != "blocks.1.self_attn.v_weights")
        err = self.refused("sphere_transformer", partial, SMALL)
        self.assertIn("missing (1): blocks.1.self_attn.v_weights", err)
        bad = OrderedDict(state)
        bad["decoder.conv.weight"] = torch.zeros(3, 16, 8)
        err = self.refused("sphere_transformer", bad, SMALL)
        self.assertIn("decoder.conv.weight: expected (3, 16, 9), found (3, 16, 8)", err)
        # drop_rate > 0 was used in training: the MLP's second layer is fwd.3
        err = self.refused("sphere_transformer", transformer_state(drop=True), SMALL)
        self.assertIn("blocks.0.mlp.fwd.3.weight", err)
        self.assertIn("drop_rate > 0", err)
        err = self.refused("sphere_transformer", transformer_state(norm="layer_norm"), SMALL)
        self.assertIn("normalization_layer = 'layer_norm'", err)
        err = self.refused("sphere_transformer", state, dict(SMALL, num_layers=3))
        self.assertIn("num_layers = 2", err)
        err = self.refused("sphere_transformer", state, SMALL, "--torch-harmonics-version", "0.9.0")
        self.assertIn("before 0.9.1", err)
        self.assertIn("0.8.0", self.refused("sphere_transformer", state, SMALL, "--torch-harmonics-version", "v0.8.0"))
        self.assertIn("not a torch-harmonics release",
                      self.refused("sphere_transformer", state, SMALL, "--torch-harmonics-version", "latest"))
        self.assertIn("unknown SphericalTransformer argument(s) heads",
                      self.refused("sphere_transformer", state, dict(SMALL, heads=2)))
        self.assertIn("filter_basis_type", self.refused("sphere_transformer", state, dict(SMALL, filter_basis_type="x")))
        self.assertIn("plain integer", self.refused("sphere_transformer", state, dict(SMALL, encoder_kernel_shape=5)))
        self.assertIn("num_heads = 3 does not divide embed_dim", self.refused("sphere_transformer", state,
                                                                               dict(SMALL, num_heads=3)))
        self.assertIn("in_chans == out_chans", self.refused("sphere_transformer", state,
                                                             dict(SMALL, residual_prediction=True)))
        # 0.9.1: AttentionS2 applied dropout in eval mode
        err = self.refused("sphere_transformer", transformer_state(drop=True), dict(SMALL, drop_rate=0.1),
                           "--torch-harmonics-version", "0.9.1")
        self.assertIn("dropout even in eval mode", err)
        self.assertIn("--layout", self.refused("sphere_transformer", state, SMALL, "--layout", "paper"))
        if not HAVE_TH:
            err = self.refused("sphere_transformer", state, SMALL, "--tables")
            self.assertIn("--tables needs torch-harmonics", err)

    @unittest.skipIf(HAVE_TH, "torch-harmonics is installed: its release is the default")
    def test_release_required_without_torch_harmonics(self):
        ckpt = self.save(transformer_state())
        rc, _, err = export("--family", "sphere_transformer", "--checkpoint", ckpt, "--config", json.dumps(SMALL),
                            "-o", self.dir / "x.h5")
        self.assertEqual(rc, 2)
        self.assertIn("--torch-harmonics-version is required", err)

    def test_containers(self):
        state = transformer_state()
        # DistributedDataParallel (torch-harmonics' trainers save model.state_dict() of the DDP wrapper)
        ddp = OrderedDict(("module." + k, v) for k, v in state.items())
        (_, _, weights, _), _, _ = self.run_ok("sphere_transformer", ddp, SMALL, name="ddp")
        self.assertEqual(sorted(weights), sorted(state))
        # the examples' weights-and-grads dump: parameters under 'weights'
        dump = {"iteration": 3, "grads": {k: torch.zeros_like(v) for k, v in state.items()}, "weights": state}
        (_, _, weights, _), _, stderr = self.run_ok("sphere_transformer", dump, SMALL, name="dump")
        self.assertEqual(sorted(weights), sorted(state))
        self.assertIn("weights-and-grads dump", stderr)

    # ---- s2_attention / s2_neighborhood_attention ---------------------------------------------------

    @staticmethod
    def attention_state(cin=8, ck=6, cout=10, bias=True, qknorm=False, heads=2, scale=None):
        g = torch.Generator().manual_seed(3)
        r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
        s = OrderedDict([("q_weights", r(ck, cin, 1, 1)), ("k_weights", r(ck, cin, 1, 1)),
                         ("v_weights", r(cout, cin, 1, 1)), ("proj_weights", r(cout, cout, 1, 1))])
        if bias:
            s.update([("q_bias", r(ck)), ("k_bias", r(ck)), ("v_bias", r(cout)), ("proj_bias", r(cout))])
        if qknorm:
            s.update([("q_norm_weights", r(ck // heads)), ("k_norm_weights", r(ck // heads))])
        if scale is not None:
            s["scale"] = torch.tensor(scale)
        return s

    def test_attention_schema(self):
        cfg = {"in_channels": 8, "num_heads": 2, "in_shape": [8, 16], "out_shape": [8, 16], "grid_in": "lobatto",
               "grid_out": "lobatto", "k_channels": 6, "out_channels": 10, "use_qknorm": True}
        state = self.attention_state(qknorm=True)
        (root, config, weights, _), _, _ = self.run_ok("s2_attention", state, cfg)
        self.assertEqual(root["architecture"], "s2_attention")
        c = {k: scalar(v) for k, v in config.items()}
        self.assertEqual(c, {"torch_harmonics_version": "0.9.3", "in_channels": 8, "num_heads": 2, "in_shape": [8, 16],
                             "out_shape": [8, 16], "grid_in": "lobatto", "grid_out": "lobatto", "bias": 1,
                             "k_channels": 6, "out_channels": 10, "use_qknorm": 1, "drop_rate": 0.0,
                             "scale_is_tensor": 0})
        self.assertEqual(sorted(weights), sorted(state))
        # a learnable scale (nn.Parameter 'scale') goes into the config, not into /weights
        state = self.attention_state(bias=False, scale=0.45, cin=6, ck=6, cout=6)
        cfg = {"in_channels": 6, "num_heads": 1, "in_shape": [12, 24], "out_shape": [6, 12], "bias": False}
        (_, config, weights, _), _, _ = self.run_ok("s2_attention", state, cfg, name="scale")
        self.assertEqual(scalar(config["scale_is_tensor"]), 1)
        self.assertAlmostEqual(scalar(config["scale"]), 0.45, places=7)
        self.assertNotIn("scale", weights)
        # a float scale
        (_, config, _, _), _, _ = self.run_ok("s2_attention", self.attention_state(bias=False, cin=6, ck=6, cout=6),
                                              dict(cfg, scale=0.3), name="float")
        self.assertEqual(scalar(config["scale"]), 0.3)
        self.assertEqual(scalar(config["scale_is_tensor"]), 0)

    def test_neighborhood_schema_and_cutoff(self):
        cfg = {"in_channels": 8, "num_heads": 2, "in_shape": [10, 20], "out_shape": [10, 20], "k_channels": 6,
               "out_channels": 10}
        (root, config, _, _), _, _ = self.run_ok("s2_neighborhood_attention", self.attention_state(), cfg)
        self.assertEqual(root["architecture"], "s2_neighborhood_attention")
        self.assertNotIn("theta_cutoff", config)  # None: the 0.9.3 default, computed by the library
        self.assertEqual(scalar(config["drop_rate"]), 0.0)
        (_, config, _, _), _, _ = self.run_ok("s2_neighborhood_attention", self.attention_state(),
                                              dict(cfg, theta_cutoff=0.45), name="c")
        self.assertEqual(scalar(config["theta_cutoff"]), 0.45)
        # 0.9.1 / 0.9.2 used pi / (nlat_out - 1) on every grid: stored explicitly
        (_, config, _, _), _, _ = self.run_ok("s2_neighborhood_attention", self.attention_state(),
                                              dict(cfg, grid_in="legendre-gauss", grid_out="legendre-gauss"),
                                              "--torch-harmonics-version", "0.9.2", name="old")
        self.assertEqual(scalar(config["theta_cutoff"]), math.pi / 9)
        self.assertEqual(scalar(config["torch_harmonics_version"]), "0.9.2")

    def test_neighborhood_upsampling(self):
        # the upsampling (scatter) mode: query grid finer than the key grid (nlon_out a multiple of nlon_in)
        cfg = {"in_channels": 8, "num_heads": 2, "in_shape": [9, 16], "out_shape": [17, 32], "grid_in": "equiangular",
               "grid_out": "legendre-gauss", "k_channels": 6, "out_channels": 10, "use_qknorm": True}
        state = self.attention_state(qknorm=True)
        (_, config, weights, _), _, _ = self.run_ok("s2_neighborhood_attention", state, cfg, name="up")
        self.assertEqual(scalar(config["in_shape"]), [9, 16])
        self.assertEqual(scalar(config["out_shape"]), [17, 32])
        self.assertNotIn("theta_cutoff", config)  # the 0.9.3 default (of the input grid), computed by the library
        self.assertEqual(sorted(weights), sorted(state))
        # 0.9.1 / 0.9.2: pi / (nlat_in - 1), the coarser (input) grid's, stored explicitly
        (_, config, _, _), _, _ = self.run_ok("s2_neighborhood_attention", state, cfg, "--torch-harmonics-version",
                                              "0.9.2", name="up_old")
        self.assertEqual(scalar(config["theta_cutoff"]), math.pi / 8)

    def test_attention_refusals(self):
        state = self.attention_state()
        cfg = {"in_channels": 8, "num_heads": 2, "in_shape": [8, 16], "out_shape": [8, 16], "k_channels": 6,
               "out_channels": 10}
        self.assertIn("q_bias", self.refused("s2_attention", OrderedDict((k, v) for k, v in state.items()
                                                                          if k != "q_bias"), cfg))
        err = self.refused("s2_attention", state, dict(cfg, k_channels=4))
        self.assertIn("q_weights: expected (4, 8, 1, 1), found (6, 8, 1, 1)", err)
        self.assertIn("k_channels 6", err)  # the hint read from the weights
        self.assertIn("missing in_channels", self.refused("s2_attention", state, {"num_heads": 2, "in_shape": [8, 16],
                                                                                 "out_shape": [8, 16]}))
        self.assertIn("--config is required", self.refused("s2_attention", state))
        self.assertIn("multiple of nlon_out", self.refused("s2_attention", state, dict(cfg, out_shape=[8, 12])))
        self.assertIn("does not divide k_channels", self.refused("s2_attention", state, dict(cfg, num_heads=4)))
        self.assertIn("unknown AttentionS2 argument(s) theta_cutoff",
                      self.refused("s2_attention", state, dict(cfg, theta_cutoff=0.3)))
        self.assertIn("unknown NeighborhoodAttentionS2 argument(s) drop_rate",
                      self.refused("s2_neighborhood_attention", state, dict(cfg, drop_rate=0.1)))
        self.assertIn("one must be a multiple of the other",
                      self.refused("s2_neighborhood_attention", state, dict(cfg, out_shape=[8, 12])))
        self.assertIn("before 0.9.1", self.refused("s2_neighborhood_attention", state, cfg,
                                                   "--torch-harmonics-version", "0.8.0"))
        self.assertIn("--preset applies to sphere_transformer only",
                      self.refused("s2_attention", state, cfg, "--preset", "s2transformer_sc2_layers4_e128"))

    def test_help_lists_the_families(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = surrogate_export.main(["--help"])
        self.assertEqual(rc, 0)
        text = out.getvalue()
        for word in ("sphere_transformer", "s2_attention", "s2_neighborhood_attention", "--preset",
                     "--torch-harmonics-version", "--tables"):
            self.assertIn(word, text)

    # ---- the golden model files ---------------------------------------------------------------------

    def test_golden_model_files_are_reproduced(self):
        cases = sorted(p.name for p in MODELS.iterdir() if (p / "model.h5").exists()) if MODELS.exists() else []
        self.assertGreaterEqual(len(cases), 9)
        for name in cases:
            root, config, weights, tables = read(MODELS / name / "model.h5")
            with h5py.File(MODELS / name / "io.h5", "r") as f:
                argv = json.loads(scalar(f.attrs["exporter_args"]))
            state = OrderedDict((k, torch.from_numpy(np.array(v))) for k, v in weights.items())
            if scalar(config.get("scale_is_tensor", 0)):
                state["scale"] = torch.tensor(np.float32(scalar(config["scale"])))
            ckpt = self.save(state, name + ".pt")
            out = self.dir / (name + ".h5")
            argv = [a for a in argv if a != "--tables"]  # torch-harmonics is not needed for the rest
            argv[argv.index("--checkpoint") + 1] = str(ckpt)
            argv[argv.index("-o") + 1] = str(out)
            rc, _, err = export(*argv)
            self.assertEqual(rc, 0, f"{name}: {err}")
            root2, config2, weights2, _ = read(out)
            self.assertEqual(root2["architecture"], root["architecture"], name)
            self.assertEqual({k: scalar(v) for k, v in config2.items()}, {k: scalar(v) for k, v in config.items()}, name)
            self.assertEqual(sorted(weights2), sorted(weights), name)
            if "--tables" in json.loads(scalar(h5py.File(MODELS / name / "io.h5", "r").attrs["exporter_args"])):
                self.assertEqual(sorted(tables), ["decoder.psi_idx", "decoder.psi_vals", "encoder.psi_idx",
                                                  "encoder.psi_vals"], name)
                for part in ("encoder", "decoder"):
                    self.assertEqual(tables[f"{part}.psi_idx"].shape[0], 3)
                    self.assertEqual(tables[f"{part}.psi_idx"].dtype, np.int64)
                    self.assertEqual(tables[f"{part}.psi_vals"].shape, (tables[f"{part}.psi_idx"].shape[1],))


if __name__ == "__main__":
    unittest.main()
