"""surrogate-export --family erwin: the ShapeNet-Car wrapper (detected from its keys, /config wrapper =
shapenet_car, its tensors kept) and the graph rule (/config graph, graph_k, ...) recorded from the config
object. The official wrapper's training container tests/data/erwin/erwin_shapenet_car_checkpoint.pt must
re-export to exactly the weights of the golden model file the C++ tests read.

Run from the repository root: /usr/bin/python3 -m unittest discover -s tests/python -v
"""

import contextlib
import io
import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.dont_write_bytecode = True
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "share" / "python"))

import h5py  # noqa: E402
import numpy as np  # noqa: E402

import surrogate_export  # noqa: E402

DATA = REPO / "tests" / "data" / "erwin"
MODEL = {"c_in": 8, "c_hidden": [16, 16], "ball_sizes": [16, 16], "enc_num_heads": [2, 2], "enc_depths": [2, 2],
         "dec_num_heads": [2], "dec_depths": [2], "strides": [1], "rotate": 45, "mlp_ratio": 2,
         "dimensionality": 3, "mp_steps": 2}


def export(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = surrogate_export.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def attr(v):
    v = np.asarray(v)
    if v.dtype.kind in "SO":
        x = v.item()
        return x.decode() if isinstance(x, bytes) else x
    return v.tolist()


class ShapenetWrapperExport(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def run_export(self, config, name="out.h5"):
        path = self.dir / "config.json"
        path.write_text(json.dumps(config))
        out = self.dir / name
        rc, _, err = export("--family", "erwin", "--checkpoint", DATA / "erwin_shapenet_car_checkpoint.pt",
                            "--config", path, "-o", out)
        return rc, err, out

    def test_wrapper_and_knn_rule(self):
        rc, err, out = self.run_export({"model": MODEL, "knn": 8})
        self.assertEqual(rc, 0, err)
        with h5py.File(out, "r") as a, h5py.File(DATA / "erwin_shapenet_car.h5", "r") as b:
            config = {k: attr(v) for k, v in a["config"].attrs.items()}
            self.assertEqual(config["wrapper"], "shapenet_car")
            self.assertEqual(config["graph"], "knn")
            self.assertEqual(config["graph_k"], 8)
            self.assertEqual(set(a["weights"]), set(b["weights"]))
            for k in b["weights"]:
                np.testing.assert_array_equal(a["weights"][k][()], b["weights"][k][()], err_msg=k)
            for k, v in b["config"].attrs.items():
                self.assertEqual(attr(a["config"].attrs[k]), attr(v), k)

    def test_graph_rules(self):
        rc, err, out = self.run_export(dict(MODEL, graph="radius", graph_radius=0.25, graph_max_num_neighbors=16))
        self.assertEqual(rc, 0, err)
        with h5py.File(out, "r") as f:
            c = {k: attr(v) for k, v in f["config"].attrs.items()}
        self.assertEqual((c["graph"], c["graph_radius"], c["graph_max_num_neighbors"]), ("radius", 0.25, 16))
        rc, err, out = self.run_export(MODEL, "none.h5")  # no rule: recorded as absent, with a note
        self.assertEqual(rc, 0, err)
        self.assertIn("edges must be given", err)
        with h5py.File(out, "r") as f:
            self.assertNotIn("graph", f["config"].attrs)
        for bad, message in ((dict(MODEL, graph="delaunay"), "graph = 'delaunay'"),
                             (dict(MODEL, graph="knn"), "graph_k"),
                             (dict(MODEL, graph="radius", graph_radius=-1), "graph_radius"),
                             ({"model": MODEL, "knn": 8, "graph": "radius"}, "contradicts")):
            rc, err, _ = self.run_export(bad, "bad.h5")
            self.assertNotEqual(rc, 0)
            self.assertIn(message, err)


if __name__ == "__main__":
    unittest.main()
