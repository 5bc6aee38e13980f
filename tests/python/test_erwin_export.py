"""surrogate-export --family erwin: the golden models of tests/data/erwin re-exported from checkpoints in
the official containers, variant detection, refusals; and the reference share/python/surrogate_ref/erwin.py
on the exported files against the official outputs stored there.

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
from surrogate_ref.erwin import ErwinModel  # noqa: E402

DATA = REPO / "tests" / "data" / "erwin"
CTOR_KEYS = ("c_in", "c_hidden", "ball_sizes", "enc_num_heads", "enc_depths", "dec_num_heads", "dec_depths",
             "strides", "rotate", "mlp_ratio", "dimensionality", "mp_steps")


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
    return v.tolist()


def read_case(name):
    with h5py.File(DATA / f"erwin_{name}.h5", "r") as f:
        config = {k: scalar(v) for k, v in f["config"].attrs.items()}
        weights = OrderedDict((k, f["weights"][k][()]) for k in f["weights"])
        golden = {k: f["golden"][k][()] for k in f["golden"]}
    return config, weights, golden


def ctor_args(config):
    args = {k: config[k] for k in CTOR_KEYS}
    for k in ("c_hidden", "ball_sizes", "enc_num_heads", "enc_depths", "dec_num_heads", "dec_depths", "strides"):
        args[k] = [int(v) for v in np.atleast_1d(args[k])]
    return args


def training_checkpoint(path, weights, prefix="_orig_mod.main_model.", extra=None):
    """Erwin's training container: model_state_dict of the torch.compile'd task wrapper, plus BatchNorm
    counters and the optimizer state."""
    state = OrderedDict()
    for k, v in weights.items():
        state[prefix + k] = torch.from_numpy(np.array(v))
        if k.endswith("running_var"):
            state[prefix + k[: -len("running_var")] + "num_batches_tracked"] = torch.tensor(7)
    for k, v in (extra or {}).items():
        state[k] = v
    torch.save({"model_state_dict": state, "optimizer_state_dict": {"state": {}}, "global_step": 3}, path)


class ErwinExport(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def roundtrip(self, name, *options):
        config, weights, golden = read_case(name)
        ckpt = self.dir / f"{name}.pt"
        training_checkpoint(ckpt, weights)
        out = self.dir / f"{name}.h5"
        rc, stdout, stderr = export("--family", "erwin", "--checkpoint", ckpt, "--config",
                                    json.dumps(ctor_args(config)), "-o", out, *options)
        self.assertEqual(rc, 0, stderr)
        with h5py.File(out, "r") as f:
            self.assertEqual(scalar(f.attrs["architecture"]), "erwin")
            exported_config = {k: scalar(v) for k, v in f["config"].attrs.items()}
            exported = OrderedDict((k, f["weights"][k][()]) for k in f["weights"])
        self.assertEqual(exported_config, config)
        self.assertEqual(sorted(exported), sorted(weights))
        for k in weights:
            np.testing.assert_array_equal(exported[k], weights[k], err_msg=k)
        return exported_config, exported, golden, stdout

    def reference_output(self, config, weights, golden, dtype):
        model = ErwinModel(config)
        model.load_official_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})
        model = model.to(dtype)
        rots = None
        if config["rotate"] > 0:
            rots = [golden[f"rot_{i}"] for i in range(len(np.atleast_1d(config["ball_sizes"])))]
        edges = torch.from_numpy(golden["edge_index"]) if "edge_index" in golden else None
        with torch.no_grad():
            return model(torch.from_numpy(golden["features"]).to(dtype), torch.from_numpy(golden["positions"]).to(dtype),
                         edges, golden["tree_idx"], golden["tree_mask"], rots).numpy()

    def test_roundtrip_and_reference_against_official(self):
        for name in ("mpnn_rot", "mpnn_norot"):
            config, weights, golden, stdout = self.roundtrip(name)
            self.assertIn("erwin key layout", stdout)
            y64 = self.reference_output(config, weights, golden, torch.float64)
            y32 = self.reference_output(config, weights, golden, torch.float32)
            scale = np.abs(golden["output_f64"]).max()
            # The file's float64 output was made by this reference: equal to rounding of float64.
            self.assertLess(np.abs(y64 - golden["output_f64"]).max(), 1e-10 * scale, name)
            # Against the official float32 output: float32 rounding (measured <= 1.1e-5 with max|y| ~ 11-16).
            self.assertLess(np.abs(y32 - golden["output"]).max(), 4e-6 * scale, name)
            self.assertLess(np.abs(y64 - golden["output"]).max(), 4e-6 * scale, name)

    def test_flash_layout_is_detected(self):
        config, _, _, stdout = self.roundtrip("flash_ref")
        self.assertEqual(config["variant"], "erwin_flash")
        self.assertIn("erwin_flash key layout", stdout)

    def test_layout_needed_without_message_passing(self):
        config, weights, _ = read_case("plain_rot_2d")
        ckpt = self.dir / "p.pt"
        training_checkpoint(ckpt, weights)
        args = json.dumps(ctor_args(config))
        rc, _, err = export("--family", "erwin", "--checkpoint", ckpt, "--config", args, "-o", self.dir / "p.h5")
        self.assertEqual(rc, 2)
        self.assertIn("--layout erwin", err)
        self.roundtrip("plain_rot_2d", "--layout", "erwin")

    def test_refusals(self):
        config, weights, _ = read_case("mpnn_rot")
        args = ctor_args(config)
        ckpt = self.dir / "m.pt"
        training_checkpoint(ckpt, weights)
        out = self.dir / "m.h5"

        def refused(*options, config_args=args, checkpoint=ckpt):
            rc, _, err = export("--family", "erwin", "--checkpoint", checkpoint, "--config", json.dumps(config_args),
                                "-o", out, *options)
            self.assertEqual(rc, 2, err)
            self.assertFalse(out.exists())
            return err

        self.assertIn("keys are in the erwin layout", refused("--layout", "erwin_flash"))
        self.assertIn("FLARE layout", refused("--layout", "paper"))
        self.assertIn("missing rotate", refused(config_args={k: v for k, v in args.items() if k != "rotate"}))
        self.assertIn("unknown ErwinTransformer argument", refused(config_args=dict(args, radius=0.1)))
        self.assertIn("older erwin.py", refused(config_args=dict(args, c_hidden=16)))
        self.assertIn("decode = False", refused(config_args=dict(args, decode=False)))
        # A configuration that does not match the weights: every mis-shaped tensor is named.
        err = refused(config_args=dict(args, mlp_ratio=4))
        self.assertIn("encoder.0.blocks.0.swiglu.w1.weight", err)
        # A missing tensor is named.
        partial = OrderedDict((k, v) for k, v in weights.items() if k != "bottleneck.blocks.1.BMSA.sigma_att")
        ckpt2 = self.dir / "partial.pt"
        training_checkpoint(ckpt2, partial)
        self.assertIn("bottleneck.blocks.1.BMSA.sigma_att", refused(checkpoint=ckpt2))
        # The ShapeNet-Car wrapper is refused with its keys named.
        ckpt3 = self.dir / "shapenet.pt"
        training_checkpoint(ckpt3, weights, extra={"_orig_mod.pos_enc.linear.weight": torch.zeros(2, 3),
                                                   "_orig_mod.pred_head.0.weight": torch.zeros(16, 16)})
        self.assertIn("ShapeNet-Car wrapper", refused(checkpoint=ckpt3))


if __name__ == "__main__":
    unittest.main()
