"""surrogate-export --family sequoia: the golden models of tests/data/sequoia in the official containers
(the segmentation script's {'model_state_dict': ...}; the classification script's bare state_dict of a
DataParallel model, every key prefixed 'module.'), both models detected from the keys, --config as the
args namespace in JSON or as the repository's sectioned YAML, refusals.

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

DATA = REPO / "tests" / "data" / "sequoia"


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


def read_model(kind):
    with h5py.File(DATA / f"sequoia_{kind}.h5", "r") as f:
        config = {k: scalar(v) for k, v in f["config"].attrs.items()}
        weights = OrderedDict((k, f["weights"][k][()]) for k in f["weights"])
        model_class = scalar(f.attrs["model_class"])
    return config, weights, model_class


def state_dict(weights, prefix="", batches=True):
    out = OrderedDict()
    for k, v in weights.items():
        out[prefix + k] = torch.from_numpy(np.array(v))
        if batches and k.endswith("running_var"):  # BatchNorm's counter, as torch saves it
            out[prefix + k[: -len("running_var")] + "num_batches_tracked"] = torch.tensor(7, dtype=torch.int64)
    return out


SEG_YAML = """\
TREE:
  depth: 3
  divide: 3
MODEL:
  arch: tree
  c: 3
  dim: 4
  heads: 2
  layers: 1
  n_class: 4
  n_part: 6
TRAIN:
  arch: pointtransformer_seg
  batch_size: 16
"""


class SequoiaExport(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def check_file(self, path, kind):
        config, weights, model_class = read_model(kind)
        with h5py.File(path, "r") as f:
            self.assertEqual(scalar(f.attrs["architecture"]), "sequoia")
            self.assertEqual(scalar(f.attrs["model_class"]), model_class)
            got = {k: scalar(v) for k, v in f["config"].attrs.items()}
            for key in ("c", "dim", "heads", "depth", "layers", "divide"):
                self.assertEqual(got[key], config[key], key)
            if kind == "seg":
                self.assertEqual((got["n_class"], got["n_part"]), (config["n_class"], config["n_part"]))
            else:
                self.assertEqual((got["dim_cls"], got["selection"]), (config["dim_cls"], config["selection"]))
            self.assertEqual(sorted(f["weights"]), sorted(weights))
            for k, v in weights.items():
                np.testing.assert_array_equal(f["weights"][k][()], v, err_msg=k)

    def test_segmentation_container_and_yaml(self):
        _, weights, _ = read_model("seg")
        ckpt = self.dir / "best_model.pth"
        torch.save({"epoch": 3, "class_avg_iou": 0.5, "model_state_dict": state_dict(weights),
                    "optimizer_state_dict": {}}, ckpt)
        (self.dir / "shapenet_config.yaml").write_text(SEG_YAML)
        out = self.dir / "seg.h5"
        rc, stdout, stderr = export("--family", "sequoia", "--checkpoint", ckpt, "--config",
                                    self.dir / "shapenet_config.yaml", "-o", out)
        self.assertEqual(rc, 0, stderr)
        self.assertIn("TreeTransformerSeg", stdout)
        self.check_file(out, "seg")

    def test_classification_dataparallel_and_json(self):
        _, weights, _ = read_model("cls")
        ckpt = self.dir / "best_model_weights.t7"
        torch.save(state_dict(weights, "module."), ckpt)
        out = self.dir / "cls.h5"
        args = json.dumps({"depth": 2, "divide": 3, "selection": "root", "dim_cls": 16, "c": 3, "dim": 4,
                           "heads": 2, "layers": 2, "num_point": 8})
        rc, stdout, stderr = export("--family", "sequoia", "--checkpoint", ckpt, "--config", args, "-o", out)
        self.assertEqual(rc, 0, stderr)
        self.assertIn("TreeTransformerCls", stdout)
        self.check_file(out, "cls")

    def test_refusals(self):
        _, weights, _ = read_model("cls")
        ckpt = self.dir / "cls.pt"
        torch.save(state_dict(weights, "module."), ckpt)
        out = self.dir / "x.h5"
        cases = [
            ((), "--config is required"),
            (("--config", json.dumps({"selection": "root"})), "no 'divide'"),
            (("--config", json.dumps({"divide": 3})), "no 'selection'"),
            (("--config", json.dumps({"divide": 3, "selection": "leaf"})), "not the width of the 'leaf' level"),
            (("--config", json.dumps({"divide": 3, "selection": "root", "dim": 8})), "contradicts the weights"),
        ]
        for extra, message in cases:
            rc, _, stderr = export("--family", "sequoia", "--checkpoint", ckpt, "-o", out, *extra)
            self.assertEqual(rc, 2, extra)
            self.assertIn(message, stderr, extra)
        broken = state_dict(weights)
        del broken["enc.1.mlp3as.2.0.weight"]  # the dead MLP is part of the official state_dict too
        torch.save(broken, ckpt)
        rc, _, stderr = export("--family", "sequoia", "--checkpoint", ckpt, "-o", out, "--config",
                               json.dumps({"divide": 3, "selection": "root"}))
        self.assertEqual(rc, 2)
        self.assertIn("enc.1.mlp3as.2.0.weight", stderr)
        neither = OrderedDict((k, v) for k, v in state_dict(weights).items() if not k.startswith("_init."))
        torch.save(neither, ckpt)
        rc, _, stderr = export("--family", "sequoia", "--checkpoint", ckpt, "-o", out, "--config",
                               json.dumps({"divide": 3, "selection": "root"}))
        self.assertEqual(rc, 2)
        self.assertIn("cannot tell TreeTransformerSeg from TreeTransformerCls", stderr)


if __name__ == "__main__":
    unittest.main()
