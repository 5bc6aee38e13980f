"""share/tools/surrogate-export: re-export of the golden cases, config formats, refusals.

Run from the repository root: /usr/bin/python3 -m unittest discover -s tests/python -v
Most exports run in-process (surrogate_export.main) to keep the suite fast; a few run the tool itself.
"""

import contextlib
import copy
import io
import json
import os
import shutil
import stat
import subprocess
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
import yaml  # noqa: E402

import surrogate_export  # noqa: E402
from surrogate_export import common  # noqa: E402
from surrogate_export import flare as xflare  # noqa: E402
from surrogate_ref import flare as ref  # noqa: E402

DATA = REPO / "tests" / "data" / "flare"
TOOL = REPO / "share" / "tools" / "surrogate-export"
CASES = json.loads((DATA / "cases.json").read_text())
PROVENANCE = {"created", "exporter"}  # root attributes that legitimately differ between exports


def export(*argv):
    """In-process export: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = surrogate_export.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def read_model(path):
    with h5py.File(path, "r") as f:
        root = {k: ref._as_scalar(v) for k, v in f.attrs.items()}
        config = {k: (ref._as_scalar(v), np.asarray(v).dtype.kind) for k, v in f["config"].attrs.items()}
        data = {}
        for group in ("weights", "normalization", "fields"):
            if group in f:
                for key in f[group]:
                    data[f"{group}/{key}"] = f[group][key][()]
    return root, config, data


def elasticity_checkpoint(dirpath):
    """The elasticity checkpoint is not committed (size): rebuild the bare state_dict from model.h5."""
    with h5py.File(DATA / "elasticity" / "model.h5", "r") as f:
        state = OrderedDict((k, torch.from_numpy(f["weights"][k][()])) for k in f["weights"])
        config = {k: ref._as_scalar(v) for k, v in f["config"].attrs.items()}
    model = ref.FLAREModel(config)
    model.load_state_dict(state, strict=True)
    path = Path(dirpath) / "checkpoint.pt"
    torch.save(model.state_dict(), path)  # official key order
    return path


class ExporterTestBase(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="surrogate-export-test-")
        self.tmp = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def case_args(self, name, out="model.h5"):
        case = CASES[name]
        args = []
        it = iter(case["export_args"])
        for flag in it:
            value = next(it)
            if flag in ("--checkpoint",):
                value = (DATA / name / value) if case["checkpoint"] else elasticity_checkpoint(self.tmp)
            elif flag in ("--config", "--normalization", "--fields"):
                value = DATA / name / value
            args += [flag, value]
        return args + ["-o", self.tmp / out]

    def assert_refused(self, argv, *fragments):
        rc, out, err = export(*argv)
        self.assertEqual(rc, 2, f"exit {rc}; stderr: {err}")
        self.assertIn("surrogate-export: error:", err)
        self.assertNotIn("Traceback", err)
        for fragment in fragments:
            self.assertIn(fragment, err)
        return err

    def load_container(self, name):
        return torch.load(str(DATA / name / "checkpoint.pt"), map_location="cpu")

    def save(self, obj, fname="ckpt.pt"):
        path = self.tmp / fname
        torch.save(obj, path)
        return path


class ReexportTest(ExporterTestBase):
    def test_reexport_equals_committed(self):
        for name in CASES:
            with self.subTest(case=name):
                rc, out, err = export(*self.case_args(name, out=f"{name}.h5"))
                self.assertEqual(rc, 0, err)
                self.assertIn("surrogate-export: wrote", out)
                root_new, cfg_new, data_new = read_model(self.tmp / f"{name}.h5")
                root_old, cfg_old, data_old = read_model(DATA / name / "model.h5")
                self.assertEqual(cfg_new, cfg_old)
                self.assertEqual(sorted(data_new), sorted(data_old))
                for key in data_old:
                    a, b = data_new[key], data_old[key]
                    self.assertEqual(a.dtype, b.dtype, key)
                    self.assertEqual(a.shape, b.shape, key)
                    if a.dtype.kind == "O":
                        self.assertEqual(list(a), list(b), key)
                    else:
                        self.assertEqual(a.tobytes(), b.tobytes(), key)
                for key in set(root_old) | set(root_new):
                    if key not in PROVENANCE:
                        self.assertEqual(root_new.get(key), root_old.get(key), key)
                self.assertEqual(root_new["format"], "surrogate-model")
                self.assertEqual(root_new["format_version"], 1)
                self.assertEqual(root_new["architecture"], "flare")
                self.assertEqual(root_new["weights_variant"], CASES[name]["weights_variant"])
                self.assertEqual(cfg_new["key_layout"][0], CASES[name]["key_layout"])

    def test_mode_follows_umask(self):
        """The model file gets the mode of a new file (0666 less the umask), not mkstemp's owner-only 0600."""
        name = next(iter(CASES))
        for mask in (0o022, 0o077):
            with self.subTest(umask=oct(mask)):
                old = os.umask(mask)
                try:
                    rc, out, err = export(*self.case_args(name, out=f"mode_{mask:o}.h5"))
                finally:
                    os.umask(old)
                self.assertEqual(rc, 0, err)
                mode = stat.S_IMODE(os.stat(self.tmp / f"mode_{mask:o}.h5").st_mode)
                self.assertEqual(mode, 0o666 & ~mask, oct(mode))

    def test_file_types(self):
        with h5py.File(DATA / "qknorm_layernorm" / "model.h5", "r") as f:
            self.assertEqual(f.attrs["format_version"].dtype, np.int64)
            for key, kind in ref.CONFIG_KEYS.items():
                value = f["config"].attrs[key]
                if kind in ("int", "bool"):
                    self.assertEqual(value.dtype, np.int64, key)
                elif kind == "float":
                    self.assertEqual(value.dtype, np.float64, key)
                else:
                    self.assertIsInstance(value, str, key)
            self.assertEqual(set(f["config"].attrs), set(ref.CONFIG_KEYS))
            for key in f["weights"]:
                self.assertEqual(f["weights"][key].dtype, np.float32)
                self.assertIsNone(f["weights"][key].compression)
            for key in f["normalization"]:
                self.assertEqual(f["normalization"][key].dtype, np.float64)
            self.assertEqual([s.decode() for s in f["fields/input_units"][()]], ["m", "m", "K"])
            self.assertEqual(json.loads(f.attrs["source_config"])["model"]["num_latents"], 12)

    def test_elasticity_parameter_count(self):
        rc, out, err = export(*self.case_args("elasticity"))
        self.assertEqual(rc, 0, err)
        self.assertIn("592,641 parameters", out)
        _, _, data = read_model(self.tmp / "model.h5")
        self.assertEqual(sum(v.size for k, v in data.items() if k.startswith("weights/")), 592641)

    def test_prefixes_stripped(self):
        self.assertEqual(common.strip_key("_orig_mod.blocks.0.att.latent_q"), "blocks.0.att.latent_q")
        self.assertEqual(common.strip_key("module._orig_mod.in_proj.fc1.weight"), "in_proj.fc1.weight")
        self.assertEqual(common.strip_key("blocks.3.module.att._orig_mod.out_proj.bias"), "blocks.3.att.out_proj.bias")
        self.assertEqual(common.strip_key("blocks.0.modules.x"), "blocks.0.modules.x")
        for name in ("default", "qknorm_layernorm", "paper"):
            with h5py.File(DATA / name / "model.h5", "r") as f:
                for key in f["weights"]:
                    self.assertNotIn("_orig_mod", key)
                    self.assertFalse(key.startswith("module."), key)
        container = self.load_container("default")
        self.assertTrue(all(k.startswith("_orig_mod.") for k in container["model_state"]))
        self.assertTrue(all(k.startswith("_orig_mod.") for k in container["ema_shadow"]))

    def test_ema_and_raw(self):
        container = self.load_container("default")
        key = "blocks.1.att.latent_q"
        raw, ema = container["model_state"]["_orig_mod." + key], container["ema_shadow"]["_orig_mod." + key]
        self.assertFalse(torch.equal(raw, ema))
        base = self.case_args("default")[:-2]
        results = {}
        for choice in (None, "ema", "raw"):
            out = self.tmp / f"{choice}.h5"
            argv = base + (["--weights", choice] if choice else []) + ["-o", out]
            rc, _, err = export(*argv)
            self.assertEqual(rc, 0, err)
            with h5py.File(out, "r") as f:
                results[choice] = (f.attrs["weights_variant"], f["weights"][key][()])
        self.assertEqual(results[None][0], "ema")
        self.assertEqual(results["ema"][0], "ema")
        self.assertEqual(results["raw"][0], "raw")
        np.testing.assert_array_equal(results[None][1], ema.numpy())
        np.testing.assert_array_equal(results["ema"][1], ema.numpy())
        np.testing.assert_array_equal(results["raw"][1], raw.numpy())

    def test_paper_layout_detected(self):
        with h5py.File(DATA / "paper" / "model.h5", "r") as f:
            self.assertEqual(f["config"].attrs["key_layout"], "paper")
            self.assertIn("out_proj.mlp.fc2.weight", f["weights"])
            self.assertIn("blocks.1.ln2.bias", f["weights"])
        self.assertEqual(xflare.detect_layout(["blocks.0.ln1.weight", "out_proj.mlp.fc1.weight"]), "paper")
        self.assertEqual(xflare.detect_layout(["blocks.0.norm1.weight", "out_proj.1.fc.weight"]), "current")
        with self.assertRaises(common.ExportError) as cm:
            xflare.detect_layout(["blocks.0.ln1.weight", "blocks.0.norm2.weight"])
        self.assertIn("contradictory", str(cm.exception))
        with self.assertRaises(common.ExportError) as cm:
            xflare.detect_layout(["encoder.weight"])
        self.assertIn("unknown key layout", str(cm.exception))

    def test_installed_layout_and_cli(self):
        """The tool itself: --help, an export, a refusal (exit 2, no traceback), from an install tree."""
        prefix = self.tmp / "prefix" / "share" / "surrogate"
        (prefix / "tools").mkdir(parents=True)
        shutil.copy2(TOOL, prefix / "tools" / "surrogate-export")
        for pkg in ("surrogate_export", "surrogate_ref"):
            shutil.copytree(REPO / "share" / "python" / pkg, prefix / "python" / pkg,
                            ignore=shutil.ignore_patterns("__pycache__"))
        tool = prefix / "tools" / "surrogate-export"
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        res = subprocess.run([sys.executable, str(tool), "--help"], capture_output=True, text=True, env=env)
        self.assertEqual(res.returncode, 0, res.stderr)
        for option in ("--family", "--checkpoint", "--config", "--weights", "--normalization", "--fields",
                       "--source", "--layout", "--unsafe-load", "--output"):
            self.assertIn(option, res.stdout)
        res = subprocess.run([sys.executable, str(tool), *map(str, self.case_args("paper"))],
                             capture_output=True, text=True, env=env, cwd=str(self.tmp))
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertTrue((self.tmp / "model.h5").is_file())
        res = subprocess.run([sys.executable, str(tool), "--family", "flare", "--checkpoint",
                              str(self.tmp / "nope.pt"), "-o", str(self.tmp / "x.h5")],
                             capture_output=True, text=True, env=env)
        self.assertEqual(res.returncode, 2)
        self.assertIn("does not exist", res.stderr)
        self.assertNotIn("Traceback", res.stderr)


class ConfigFormatTest(ExporterTestBase):
    def config_of(self, name):
        return read_model(DATA / name / "model.h5")[1]

    def export_with(self, name, config, **extra):
        argv = ["--family", "flare", "--checkpoint", DATA / name / "checkpoint.pt", "--config", config,
                "-o", self.tmp / "out.h5"]
        for flag, value in extra.items():
            argv += ["--" + flag.replace("_", "-"), value]
        rc, out, err = export(*argv)
        self.assertEqual(rc, 0, err)
        return read_model(self.tmp / "out.h5")[1], out, err

    def test_committed_formats(self):
        # (b) 2026 flat config.yaml, (c) nested config.yaml, (a) paper-era config.yaml, JSON file
        self.assertIn("model_type: flare", (DATA / "default" / "config.yaml").read_text())
        self.assertIn("model_type: 2", (DATA / "paper" / "config.yaml").read_text())
        self.assertIn("  model: flare", (DATA / "qknorm_layernorm" / "config.yaml").read_text())
        for name, era in (("default", "2026 flat config.yaml"), ("qknorm_layernorm", "nested config.yaml"),
                          ("paper", "paper-era config.yaml"), ("options", "constructor arguments")):
            with self.subTest(case=name):
                cfg, out, _ = self.export_with(name, DATA / name / CASES[name]["config"])
                self.assertEqual(cfg, self.config_of(name))
                self.assertIn(era, out)

    def test_inline_json_and_attn_scale_strings(self):
        args = json.loads((DATA / "options" / "config.json").read_text())
        args["attn_scale"] = "sqrt"
        cfg, _, _ = self.export_with("options", json.dumps(args))
        self.assertEqual(cfg, self.config_of("options"))
        self.assertEqual(cfg["attn_scale"][0], 8 ** -0.5)
        args["attn_scale"] = "one"
        cfg, _, _ = self.export_with("options", json.dumps(args))
        self.assertEqual(cfg["attn_scale"][0], 1.0)
        # a flat 2026 config.yaml keeps the strings too
        flat = yaml.safe_load((DATA / "default" / "config.yaml").read_text())
        flat["attn_scale"] = "sqrt"
        path = self.tmp / "config.yaml"
        path.write_text(yaml.safe_dump(flat))
        cfg, _, _ = self.export_with("default", path)
        self.assertEqual(cfg["attn_scale"][0], 8 ** -0.5)

    def test_paper_json_and_num_heads_default(self):
        paper = yaml.safe_load((DATA / "paper" / "config.yaml").read_text())
        args = {k: paper[k] for k in ("channel_dim", "num_blocks", "num_latents", "mlp_ratio", "out_proj_ln")}
        args["num_heads"] = None  # -> channel_dim // 8 = 4
        cfg, _, err = self.export_with("paper", json.dumps(args))
        self.assertEqual(cfg, self.config_of("paper"))
        self.assertIn("channel_dim // 8", err)

    def test_num_latents_from_weights(self):
        args = json.loads((DATA / "options" / "config.json").read_text())
        del args["num_latents"]
        cfg, _, _ = self.export_with("options", json.dumps(args))
        self.assertEqual(cfg["num_latents"][0], 8)

    def test_nested_head_width_rule(self):
        """Nested configs (newest FLARE.py) switch 'one' to 'sqrt' when E > 16; rmsnorm eps is 1e-6 there."""
        spec = xflare.parse_config({"model": {"model": "flare", "channel_dim": 64, "num_heads": 2,
                                              "attn_scale": "one", "rmsnorm": True, "num_latents": 4,
                                              "num_blocks": 1}}, "config.yaml")
        model = ref.FLAREModel(dict(in_dim=2, out_dim=1, channel_dim=64, num_heads=2, num_latents=4,
                                    num_blocks=1, rmsnorm=True))
        with contextlib.redirect_stderr(io.StringIO()):
            cfg = xflare.resolve(spec, model.state_dict(), "current")
        self.assertEqual(cfg["attn_scale"], 32 ** -0.5)
        self.assertEqual(cfg["rmsnorm_eps"], 1e-6)

    def test_paper_era_hidden_width_bug(self):
        """Checkpoints of 2025-08-18..24 used in_dim * in_out_proj_ratio as the in/out MLP width."""
        model = ref.FLAREModel(dict(in_dim=2, out_dim=1, channel_dim=16, num_heads=2, num_latents=4,
                                    num_blocks=1, key_layout="paper", in_proj_hidden_dim=8, out_proj_hidden_dim=8))
        ckpt = self.save(model.state_dict())
        config = json.dumps(dict(channel_dim=16, num_blocks=1, num_heads=2, num_latents=4, in_out_proj_ratio=4.0))
        rc, _, err = export("--family", "flare", "--checkpoint", ckpt, "--config", config, "-o", self.tmp / "o.h5")
        self.assertEqual(rc, 0, err)
        self.assertIn("6aa4496", err)
        cfg = read_model(self.tmp / "o.h5")[1]
        self.assertEqual(cfg["in_proj_hidden_dim"][0], 8)
        self.assertEqual(cfg["out_proj_hidden_dim"][0], 8)
        # the same widths with ratio 1.0 match neither 16 nor 2: refused, naming both values
        config = json.dumps(dict(channel_dim=16, num_blocks=1, num_heads=2, num_latents=4, in_out_proj_ratio=1.0))
        self.assert_refused(["--family", "flare", "--checkpoint", ckpt, "--config", config, "-o", self.tmp / "p.h5"],
                            "in_proj_hidden_dim: the weights have 8", "= 16")


class RefusalTest(ExporterTestBase):
    def options_argv(self, ckpt, config=None, out="out.h5"):
        return ["--family", "flare", "--checkpoint", ckpt, "--config", config or DATA / "options" / "config.json",
                "-o", self.tmp / out]

    def options_state(self):
        return torch.load(str(DATA / "options" / "checkpoint.pt"), map_location="cpu")

    def test_unknown_key(self):
        state = self.options_state()
        state["blocks.0.att.extra.weight"] = torch.zeros(3)
        self.assert_refused(self.options_argv(self.save(state)), "unexpected (1)", "blocks.0.att.extra.weight")
        self.assertFalse((self.tmp / "out.h5").exists())

    def test_missing_keys_all_listed(self):
        state = self.options_state()
        gone = ["blocks.1.norm2.weight", "blocks.0.att.q_norm.weight", "out_proj.1.fc.bias"]
        for key in gone:
            del state[key]
        self.assert_refused(self.options_argv(self.save(state)), "missing (3)", *gone)

    def test_misshaped_tensor(self):
        state = self.options_state()
        state["blocks.1.att.v_proj.fc1.weight"] = torch.zeros(16, 31)
        self.assert_refused(self.options_argv(self.save(state)),
                            "blocks.1.att.v_proj.fc1.weight: expected (16, 32), found (16, 31)")

    def test_report_combines_everything(self):
        state = self.options_state()
        del state["blocks.0.norm1.weight"]
        state["foo"] = torch.zeros(1)
        state["blocks.0.att.out_proj.bias"] = torch.zeros(33)
        self.assert_refused(self.options_argv(self.save(state)), "missing (1): blocks.0.norm1.weight",
                            "unexpected (1): foo", "blocks.0.att.out_proj.bias: expected (32,), found (33,)")

    def test_num_batches_tracked_dropped(self):
        state = self.options_state()
        state["blocks.0.bn.num_batches_tracked"] = torch.tensor(5)
        rc, _, err = export(*self.options_argv(self.save(state)))
        self.assertEqual(rc, 0, err)

    def test_ema_without_shadow(self):
        self.assert_refused(self.options_argv(DATA / "options" / "checkpoint.pt") + ["--weights", "ema"],
                            "--weights ema", "no 'ema_shadow'")
        self.assert_refused(["--family", "flare", "--checkpoint", DATA / "qknorm_layernorm" / "checkpoint.pt",
                             "--config", DATA / "qknorm_layernorm" / "config.yaml", "--weights", "ema",
                             "-o", self.tmp / "o.h5"], "no 'ema_shadow'")

    def test_inconsistent_config(self):
        ckpt = DATA / "options" / "checkpoint.pt"
        args = json.loads((DATA / "options" / "config.json").read_text())
        bad = dict(args, num_heads=5)
        self.assert_refused(self.options_argv(ckpt, json.dumps(bad)), "num_heads 5 does not divide channel_dim 32")
        bad = dict(args, k_proj_mlp_ratio=1.0)
        self.assert_refused(self.options_argv(ckpt, json.dumps(bad)),
                            "k_proj_hidden_dim: the weights have 64", "= 32")
        bad = dict(args, num_latents=16)
        self.assert_refused(self.options_argv(ckpt, json.dumps(bad)), "num_latents: the config gives 16")
        bad = dict(args, in_dim=4)
        self.assert_refused(self.options_argv(ckpt, json.dumps(bad)), "in_dim: the config gives 4, the weights have 3")
        bad = dict(args, num_blocks=3)
        self.assert_refused(self.options_argv(ckpt, json.dumps(bad)), "num_blocks: the config gives 3")
        bad = dict(args, act="relu")
        self.assert_refused(self.options_argv(ckpt, json.dumps(bad)), "act must be")
        bad = dict(args, num_layers_ffn=1)  # the weights have none: reported as missing tensors
        self.assert_refused(self.options_argv(ckpt, json.dumps(bad)), "missing (4)", "blocks.0.mlp.fcs.0.weight")
        paper = yaml.safe_load((DATA / "paper" / "config.yaml").read_text())
        path = self.tmp / "config.yaml"
        path.write_text(yaml.safe_dump(paper))
        self.assert_refused(self.options_argv(ckpt, path), "(paper-era config.yaml) describes the paper layout",
                            "current key layout")
        paper["model_type"] = 0
        path.write_text(yaml.safe_dump(paper))
        self.assert_refused(self.options_argv(ckpt, path), "model_type is 0")

    def test_unknown_constructor_argument(self):
        args = json.loads((DATA / "options" / "config.json").read_text())
        args["dropout"] = 0.1
        path = self.tmp / "args.json"
        path.write_text(json.dumps(args))
        self.assert_refused(self.options_argv(DATA / "options" / "checkpoint.pt", path),
                            "unknown FLAREModel constructor argument(s): dropout")
        args = json.loads((DATA / "options" / "config.json").read_text())
        args["mlp_ratio"] = 1.0  # paper-layout name mixed with current-layout names
        self.assert_refused(self.options_argv(DATA / "options" / "checkpoint.pt", json.dumps(args)), "mixes")

    def test_normalization(self):
        argv = self.options_argv(DATA / "options" / "checkpoint.pt")
        path = self.tmp / "norm.json"
        path.write_text(json.dumps({"input_mean": [0, 0], "input_std": [1, 1]}))
        self.assert_refused(argv + ["--normalization", path], "input_mean has 2 values", "in_dim = 3")
        path.write_text(json.dumps({"output_mean": [0, 0], "output_std": [1, 0]}))
        self.assert_refused(argv + ["--normalization", path], "output_std holds zeros")
        path.write_text(json.dumps({"output_mean": [0, 0]}))
        self.assert_refused(argv + ["--normalization", path], "come in pairs")
        npz = self.tmp / "stats.npz"
        np.savez(npz, output_mean=np.array([1.0, 2.0]), output_std=np.array([3.0, 4.0]))
        rc, _, err = export(*argv, "--normalization", npz)
        self.assertEqual(rc, 0, err)
        with h5py.File(self.tmp / "out.h5", "r") as f:
            self.assertEqual(f["normalization/output_std"][()].tolist(), [3.0, 4.0])
            self.assertNotIn("input_mean", f["normalization"])

    def test_fields_length(self):
        path = self.tmp / "fields.json"
        path.write_text(json.dumps({"outputs": [{"name": "p"}]}))
        self.assert_refused(self.options_argv(DATA / "options" / "checkpoint.pt") + ["--fields", path],
                            "fields outputs lists 1 channels but the model has 2")

    def test_not_a_checkpoint(self):
        path = self.tmp / "notes.pt"
        path.write_text("this is not a checkpoint\n")
        self.assert_refused(self.options_argv(path), "is not a PyTorch checkpoint")
        self.assert_refused(self.options_argv(self.save([1, 2, 3])), "holds a list")
        self.assert_refused(self.options_argv(self.save({"epoch": 3, "opt": {}})), "holds no model weights")

    def test_nonexistent_files(self):
        self.assert_refused(self.options_argv(self.tmp / "missing.pt"), "missing.pt does not exist")
        self.assert_refused(self.options_argv(DATA / "options" / "checkpoint.pt", self.tmp / "nope.yaml"),
                            "config file", "does not exist")
        self.assert_refused(["--family", "flare", "--checkpoint", DATA / "options" / "checkpoint.pt",
                             "--config", DATA / "options" / "config.json", "-o", self.tmp / "no" / "dir.h5"],
                            "output directory")

    def test_wrong_family_and_usage(self):
        self.assert_refused(["--family", "nosuchfamily", "--checkpoint", DATA / "options" / "checkpoint.pt",
                             "-o", self.tmp / "o.h5"], "unknown family 'nosuchfamily'", "erwin", "flare")
        self.assert_refused(["--family", "flare", "-o", self.tmp / "o.h5"], "--checkpoint")
        self.assert_refused(["--family", "flare", "--checkpoint", DATA / "options" / "checkpoint.pt",
                             "-o", self.tmp / "o.h5"], "--config is required")
        self.assert_refused(["--family", "flare", "--checkpoint", DATA / "options" / "checkpoint.pt",
                             "--config", DATA / "options" / "config.json", "--source", "FLARE", "-o",
                             self.tmp / "o.h5"], "owner/repo@commit")

    def test_forced_wrong_layout(self):
        self.assert_refused(self.options_argv(DATA / "options" / "checkpoint.pt") + ["--layout", "paper"],
                            "--layout paper was given but the keys are in the current layout")
        args = {"channel_dim": 32, "num_blocks": 2, "num_heads": 4, "num_latents": 16}
        self.assert_refused(["--family", "flare", "--checkpoint", DATA / "default" / "checkpoint.pt", "--config",
                             json.dumps(args), "--layout", "paper", "-o", self.tmp / "o.h5"],
                            "--layout paper was given but the keys are in the current layout")
        rc, _, err = export("--family", "flare", "--checkpoint", DATA / "default" / "checkpoint.pt", "--config",
                            json.dumps(args), "--layout", "current", "-o", self.tmp / "o.h5")
        self.assertEqual(rc, 0, err)

    def test_container_variants(self):
        state = self.options_state()
        prefixed = OrderedDict(("module._orig_mod." + k, v) for k, v in state.items())
        for obj in ({"state_dict": prefixed}, {"model": state, "epoch": 3}):
            rc, _, err = export(*self.options_argv(self.save(obj)))
            self.assertEqual(rc, 0, err)
            with h5py.File(self.tmp / "out.h5", "r") as f:
                self.assertEqual(f.attrs["weights_variant"], "state_dict")
        clash = OrderedDict(state)
        clash["module.in_proj.fc.bias"] = clash["in_proj.fc.bias"]
        self.assert_refused(self.options_argv(self.save(clash)), "two keys map to 'in_proj.fc.bias'")
        container = copy.copy(self.load_container("default"))
        container["ema_shadow"] = dict(container["ema_shadow"], **{"_orig_mod.stray": torch.zeros(1)})
        self.assert_refused(["--family", "flare", "--checkpoint", self.save(container), "--config",
                             DATA / "default" / "config.yaml", "-o", self.tmp / "o.h5"],
                            "ema_shadow holds tensors that model_state does not have: stray")


if __name__ == "__main__":
    unittest.main()
