"""surrogate-export --family hept: the shipped checkpoint (non-contiguous `regions`, exported by its logical
values) with its constructor arguments as JSON and as the src/configs YAML, the src layout detected from
e2lsh.beta, refusals (unknown and missing arguments and keys, contradictions with the weights).

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

CHECKPOINT = REPO / "share" / "models" / "hept" / "tracking-60k-model.pt"
CONFIG = REPO / "share" / "models" / "hept" / "config.json"
GOLDEN = REPO / "tests" / "data" / "hept"
YAML = """model_name: trans_hept
model_kwargs:
  block_size: 100
  n_hashes: 3
  num_regions: 150
  pe_type: none
  num_heads: 8
  h_dim: 24
  n_layers: 4
  num_w_per_dist: 10
loss_name: infonce
"""


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


def read(path):
    with h5py.File(path, "r") as f:
        config = {k: scalar(v) for k, v in f["config"].attrs.items()}
        weights = OrderedDict((k, f["weights"][k][()]) for k in f["weights"])
    return config, weights


class HeptExport(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def save(self, state, name="model.pt"):
        path = self.dir / name
        torch.save(state, path)
        return path

    def test_shipped_checkpoint_with_json_and_yaml(self):
        state = torch.load(CHECKPOINT, map_location="cpu")
        self.assertFalse(state["regions"].is_contiguous())  # the trap the exporter must handle
        _, golden = read(GOLDEN / "hept_checkpoint_tracking.h5")
        golden_config, _ = read(GOLDEN / "hept_checkpoint_tracking.h5")
        yaml_path = self.dir / "tracking_trans_hept.yaml"
        yaml_path.write_text(YAML)
        for config in (CONFIG, yaml_path):
            out = self.dir / f"out_{config.suffix[1:]}.h5"
            rc, stdout, err = export("--family", "hept", "--checkpoint", CHECKPOINT, "--config", config, "-o", out)
            self.assertEqual(rc, 0, err)
            self.assertIn("example layout", stdout)
            cfg, weights = read(out)
            self.assertEqual(list(weights), list(golden))
            for key in golden:  # the golden file's weights are the checkpoint's logical values
                np.testing.assert_array_equal(weights[key], golden[key], err_msg=key)
            np.testing.assert_array_equal(weights["regions"], state["regions"].numpy())
            for key, value in cfg.items():
                self.assertEqual(value, golden_config[key], key)

    def test_src_layout_detected_from_beta(self):
        _, weights = read(GOLDEN / "hept_src_small.h5")
        state = OrderedDict((k, torch.from_numpy(v)) for k, v in weights.items())
        ckpt = self.save(state)
        args = {"attn_type": "hept", "in_dim": 5, "coords_dim": 4, "task": "tracking", "block_size": 32,
                "n_hashes": 3, "num_regions": 12, "num_heads": 2, "h_dim": 8, "n_layers": 2, "num_w_per_dist": 3,
                "pe_type": "none"}
        out = self.dir / "src.h5"
        rc, stdout, err = export("--family", "hept", "--checkpoint", ckpt, "--config", json.dumps(args), "-o", out)
        self.assertEqual(rc, 0, err)
        cfg, exported = read(out)
        self.assertEqual(cfg["layout"], "src")
        self.assertEqual(cfg["task"], "tracking")
        self.assertIn("attns.1.attn.e2lsh.beta", exported)
        # The src/configs YAML: in_dim, coords_dim and the task from the weights.
        yaml_path = self.dir / "tracking_trans_hept.yaml"
        yaml_path.write_text(YAML.replace("block_size: 100", "block_size: 32").replace("num_regions: 150", "num_regions: 12")
                             .replace("num_heads: 8", "num_heads: 2").replace("h_dim: 24", "h_dim: 8")
                             .replace("n_layers: 4", "n_layers: 2").replace("num_w_per_dist: 10", "num_w_per_dist: 3"))
        rc, stdout, err = export("--family", "hept", "--checkpoint", ckpt, "--config", yaml_path, "-o", out)
        self.assertEqual(rc, 0, err)
        self.assertEqual(read(out)[0], cfg)
        # The example arguments do not fit the src layout.
        rc, _, err = export("--family", "hept", "--checkpoint", ckpt, "--config",
                            json.dumps({**{k: v for k, v in args.items() if k not in ("attn_type", "task", "pe_type")},
                                        "num_classes": 0, "dropout": 0.1}), "--layout", "example", "-o", out)
        self.assertEqual(rc, 2)
        self.assertIn("the keys are those of the src layout", err)

    def test_src_pileup_task_detected_from_pids_enc(self):
        golden_config, weights = read(GOLDEN / "hept_src_pileup.h5")
        state = OrderedDict((k, torch.from_numpy(v)) for k, v in weights.items())
        ckpt = self.save(state)
        args = {"attn_type": "hept", "in_dim": 8, "coords_dim": 4, "task": "pileup", "block_size": 32,
                "n_hashes": 3, "num_regions": 12, "num_heads": 2, "h_dim": 8, "n_layers": 2, "num_w_per_dist": 3,
                "pe_type": "none"}
        yaml_path = self.dir / "pileup_trans_hept.yaml"
        yaml_path.write_text("model_name: trans_hept\nmodel_kwargs:\n  block_size: 32\n  n_hashes: 3\n"
                             "  num_regions: 12\n  pe_type: none\n  num_heads: 2\n  h_dim: 8\n  n_layers: 2\n"
                             "  num_w_per_dist: 3\ndataset_name: pileup\n")
        for config in (json.dumps(args), yaml_path):
            out = self.dir / "pileup.h5"
            rc, stdout, err = export("--family", "hept", "--checkpoint", ckpt, "--config", config, "-o", out)
            self.assertEqual(rc, 0, err)
            self.assertIn("src layout, pileup task, in_dim 8", stdout)
            cfg, exported = read(out)
            self.assertEqual((cfg["layout"], cfg["task"], cfg["in_dim"], cfg["num_classes"]), ("src", "pileup", 8, 1))
            self.assertEqual(list(exported), list(weights))
            for key in weights:
                np.testing.assert_array_equal(exported[key], weights[key], err_msg=key)
            for key in ("in_dim", "coords_dim", "block_size", "n_hashes", "num_heads", "h_dim", "n_layers"):
                self.assertEqual(cfg[key], golden_config[key], key)
        # The task must agree with the weights, both ways.
        rc, _, err = export("--family", "hept", "--checkpoint", ckpt, "--config",
                            json.dumps({**args, "task": "tracking"}), "-o", self.dir / "bad.h5")
        self.assertEqual(rc, 2)
        self.assertIn("task 'tracking' but the weights are those of task 'pileup'", err)
        _, src_weights = read(GOLDEN / "hept_src_small.h5")
        tracking = self.save(OrderedDict((k, torch.from_numpy(v)) for k, v in src_weights.items()), "tracking.pt")
        rc, _, err = export("--family", "hept", "--checkpoint", tracking, "--config",
                            json.dumps({**args, "in_dim": 5}), "-o", self.dir / "bad.h5")
        self.assertEqual(rc, 2)
        self.assertIn("task 'pileup' but the weights are those of task 'tracking'", err)
        rc, _, err = export("--family", "hept", "--checkpoint", ckpt, "--config",
                            json.dumps({**args, "task": "jets"}), "-o", self.dir / "bad.h5")
        self.assertEqual(rc, 2)
        self.assertIn("task 'jets' is not supported (tracking or pileup)", err)
        # Input normalisation may scale the features but not the class channel (7).
        stats = {"input_mean": [0.5] * 8, "input_std": [2.0] * 8}
        norm_path = self.dir / "stats.json"
        norm_path.write_text(json.dumps(stats))
        rc, _, err = export("--family", "hept", "--checkpoint", ckpt, "--config", json.dumps(args),
                            "--normalization", norm_path, "-o", self.dir / "bad.h5")
        self.assertEqual(rc, 2)
        self.assertIn("input channel 7 is the pileup task's particle-id class (looked up in pids_enc.weight); "
                      "its input_mean and input_std must be 0 and 1, not 0.5 and 2", err)
        self.assertFalse((self.dir / "bad.h5").exists())
        stats["input_mean"][7], stats["input_std"][7] = 0.0, 1.0
        norm_path.write_text(json.dumps(stats))
        rc, _, err = export("--family", "hept", "--checkpoint", ckpt, "--config", json.dumps(args),
                            "--normalization", norm_path, "-o", self.dir / "normalised.h5")
        self.assertEqual(rc, 0, err)

    def test_refusals(self):
        state = torch.load(CHECKPOINT, map_location="cpu")
        good = json.loads(CONFIG.read_text())
        out = self.dir / "x.h5"
        cases = [
            ({**good, "n_buckets": 4}, state, "unknown example Transformer argument(s) n_buckets"),
            ({k: v for k, v in good.items() if k != "block_size"}, state, "missing block_size"),
            ({**good, "coords_dim": 5}, state, "coords_dim = 5 but the weights give 6"),
            ({**good, "n_layers": 3}, state, "unexpected (16): attns.3.w_q.weight"),
        ]
        extra = OrderedDict(state)
        extra["attns.0.extra.weight"] = torch.zeros(2)
        cases.append((good, extra, "unexpected (1): attns.0.extra.weight"))
        missing = OrderedDict((k, v) for k, v in state.items() if k != "W.weight")
        cases.append((good, missing, "missing (1): W.weight"))
        for config, st, message in cases:
            ckpt = self.save(st, "case.pt")
            rc, _, err = export("--family", "hept", "--checkpoint", ckpt, "--config", json.dumps(config), "-o", out)
            self.assertEqual(rc, 2, message)
            self.assertIn(message, err)
        rc, _, err = export("--family", "hept", "--checkpoint", CHECKPOINT, "-o", out)
        self.assertEqual(rc, 2)
        self.assertIn("--config is required for hept", err)


if __name__ == "__main__":
    unittest.main()
