"""Command line of ``surrogate-export``: PyTorch checkpoint -> surrogate model file (format v1)."""

import argparse
import importlib
import os
import sys
from pathlib import Path

from . import common
from .common import ExportError

# Family name -> module (next to this file; "module:object" for a family object inside a module) providing
# FAMILY, DEFAULT_SOURCE, CONFIG_KINDS, build(state, config_data, config_origin, layout) (or
# build_from_args(state, config_data, config_origin, args)) and describe(config); optional hooks:
# unwrap_checkpoint, prepare_state, io_dims, default_source(config), tables(config, args) /
# write_tables(path, tables).
FAMILIES = {
    "flare": "surrogate_export.flare",
    "erwin": "surrogate_export.erwin",
    "bsa": "surrogate_export.bsa",
    "hept": "surrogate_export.hept",
    "sequoia": "surrogate_export.sequoia",
    "sphere_transformer": "surrogate_export.sphere:TRANSFORMER",
    "s2_attention": "surrogate_export.sphere:ATTENTION",
    "s2_neighborhood_attention": "surrogate_export.sphere:NEIGHBORHOOD",
}

DESCRIPTION = """\
Convert a PyTorch checkpoint of an attention surrogate into a surrogate model file (HDF5, format
version 1, see share/docs/model-format.md) that the C++ library loads without Python.
The checkpoint is validated completely: every missing, unexpected or mis-shaped tensor is reported."""

EPILOG = """\
examples:
  surrogate-export --family flare --checkpoint out/pdebench/exp/ckpt10/model.pt \\
      --config out/pdebench/exp/config.yaml --normalization stats.json -o elasticity.h5
  surrogate-export --family flare --checkpoint weights.pt \\
      --config '{"in_dim": 2, "out_dim": 1, "channel_dim": 64, "num_heads": 8, "num_latents": 64}' -o m.h5
  surrogate-export --family sphere_transformer --preset s2ntransformer_sc2_layers4_e128 \\
      --checkpoint checkpoint.pt --torch-harmonics-version 0.9.3 -o s2n.h5
  surrogate-export --family s2_attention --checkpoint att.pt --torch-harmonics-version 0.9.3 \\
      --config '{"in_channels": 16, "num_heads": 2, "in_shape": [16, 32], "out_shape": [16, 32]}' -o att.h5

exit status: 0 on success, 2 when the arguments or the checkpoint are refused (one message on stderr)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: exit 2 with one line (argparse's default, made explicit)
        self.print_usage(sys.stderr)
        raise SystemExit(_fail(message))


def _fail(message):
    print(f"surrogate-export: error: {message}", file=sys.stderr)
    return 2


def make_parser():
    p = _Parser(prog="surrogate-export", description=DESCRIPTION, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", required=True, metavar="NAME",
                   help="model family of the checkpoint; supported: " + ", ".join(sorted(FAMILIES)))
    p.add_argument("--checkpoint", required=True, metavar="FILE",
                   help="the PyTorch file: a FLARE.py trainer snapshot (dict with 'model_state' and optionally "
                        "'ema_shadow'), a bare state_dict, or a dict holding one under 'state_dict' or 'model'. "
                        "'module.' and '_orig_mod.' key components (DataParallel, torch.compile) are removed")
    p.add_argument("--config", metavar="YAML|JSON|FILE",
                   help="the hyperparameters: the experiment's config.yaml (any generation written by the "
                        "official trainer; training fields are ignored), or a JSON object of the model class's "
                        "constructor arguments, inline or as a .json file (unknown names are refused). Widths "
                        "are read from the weights and checked against the config's ratios")
    p.add_argument("--weights", choices=("ema", "raw"),
                   help="which weights of a trainer snapshot to export: 'ema' (each parameter from "
                        "'ema_shadow', the rest from 'model_state'; the default when 'ema_shadow' exists) or "
                        "'raw' ('model_state'). Recorded in the file's @weights_variant")
    p.add_argument("--normalization", metavar="JSON|NPZ",
                   help="normalisation statistics: input_mean, input_std (length in_dim), output_mean, "
                        "output_std (length out_dim), each pair optional; std is the exact divisor used in "
                        "training (finite, non-zero). The library applies them: callers pass physical values")
    p.add_argument("--fields", metavar="JSON",
                   help='channel names and units: {"inputs": [{"name": "x", "unit": "m"}, ...], '
                        '"outputs": [...]}, lengths in_dim / out_dim')
    p.add_argument("--source", metavar="OWNER/REPO@COMMIT",
                   help="the code that trained the model, recorded in @source (default for flare: "
                        "vpuri3/FLARE.py@unknown)")
    p.add_argument("--layout", choices=("auto", "current", "paper", "erwin", "erwin_flash", "example", "src"), default="auto",
                   help="key layout of the state_dict. flare: 'current' (blocks.N.norm1, out_proj.1; FLARE.py "
                        "from 2026-02) or 'paper' (blocks.N.ln1, out_proj.mlp; 2025-08..09). erwin: 'erwin' "
                        "(models/erwin.py: interleaved q/k/v, distance bias) or 'erwin_flash' "
                        "(models/erwin_flash.py: grouped q/k/v, no bias). hept: 'example' or 'src' (e2lsh.beta). 'auto' (default) detects it from the "
                        "keys and refuses contradictory or unknown keys")
    p.add_argument("--unsafe-load", action="store_true",
                   help="load the checkpoint with full pickle (torch.load(weights_only=False)) when the safe "
                        "loader (weights_only=True, used on torch >= 2) refuses it; only for files you trust. "
                        "torch < 2 always loads with full pickle (its weights-only loader cannot read the "
                        "trainer's snapshots)")
    p.add_argument("--preset", metavar="NAME",
                   help="sphere_transformer: start from a torch-harmonics model-zoo configuration "
                        "(examples/model_registry.py), e.g. s2transformer_sc2_layers4_e128 (global attention) or "
                        "s2ntransformer_sc2_layers4_e128 (neighbourhood attention); --config overrides its arguments")
    p.add_argument("--torch-harmonics-version", metavar="RELEASE",
                   help="sphere_transformer, s2_attention, s2_neighborhood_attention: the torch-harmonics release "
                        "the model was trained with (default: the installed one, if any). Releases before 0.9.1 "
                        "are refused (their neighbourhood-attention scale and DISCO normalisation differ)")
    p.add_argument("--tables", action="store_true",
                   help="sphere_transformer: also store the DISCO filter tables (psi) of the encoder and decoder "
                        "in /tables, computed by the installed torch-harmonics (which must be that release)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.h5", help="the model file to write")
    return p


def _source(text, default):
    if text is None:
        return default
    owner_repo, _, commit = text.partition("@")
    if owner_repo.count("/") != 1 or not commit or any(c.isspace() for c in text):
        raise ExportError(f"--source must look like owner/repo@commit (or owner/repo@unknown), got {text!r}")
    return text


def run(args):
    if args.family not in FAMILIES:
        raise ExportError(f"unknown family {args.family!r}; supported: {', '.join(sorted(FAMILIES))}")
    module_name, _, object_name = FAMILIES[args.family].partition(":")
    family = importlib.import_module(module_name)
    if object_name:
        family = getattr(family, object_name)
    source = _source(args.source, family.DEFAULT_SOURCE)
    out = Path(args.output)
    ckpt = Path(args.checkpoint)
    if out.exists() and ckpt.exists() and os.path.samefile(str(out), str(ckpt)):
        raise ExportError("the output file is the checkpoint itself")
    if out.exists() and out.is_dir():
        raise ExportError(f"output {out} is a directory")

    config_data, config_origin = (None, None)
    if args.config is not None:
        config_data, config_origin = common.read_config(args.config)

    obj = common.load_checkpoint(args.checkpoint, unsafe=args.unsafe_load)
    if hasattr(family, "unwrap_checkpoint"):
        obj = family.unwrap_checkpoint(obj, ckpt.name)
    model_state, ema_shadow, kind = common.unwrap_container(obj, ckpt.name)
    state, variant = common.select_weights(model_state, ema_shadow, kind, args.weights)
    if args.weights == "raw" and kind != "trainer":
        common.note("--weights raw on a bare state_dict: its tensors are exported as they are")

    if hasattr(family, "prepare_state"):
        state = family.prepare_state(state)
    if hasattr(family, "build_from_args"):
        config, expected, context, era = family.build_from_args(state, config_data, config_origin, args)
    else:
        config, expected, context, era = family.build(state, config_data, config_origin, args.layout)
    weights = (family.validate_state(expected, state, context, config) if hasattr(family, "validate_state")
               else common.validate_state(expected, state, context))
    if args.source is None and hasattr(family, "default_source"):
        source = family.default_source(config)
    tables = family.tables(config, args) if hasattr(family, "tables") else None
    in_dim, out_dim = (family.io_dims(config) if hasattr(family, "io_dims")
                       else (config["in_dim"], config["out_dim"]))
    normalization = (common.load_normalization(args.normalization, in_dim, out_dim)
                     if args.normalization else None)
    if normalization and hasattr(family, "check_normalization"):
        family.check_normalization(config, normalization)
    fields = common.load_fields(args.fields, in_dim, out_dim) if args.fields else None

    root = {
        "architecture": family.FAMILY,
        "source": source,
        "exporter": common.EXPORTER,
        "checkpoint": ckpt.name,
        "weights_variant": variant,
        "source_config": common.config_json(config_data),
        "created": common.utc_now(),
    }
    if hasattr(family, "root_attributes"):
        root.update(family.root_attributes(config))
    common.write_model_file(out, root, config, family.CONFIG_KINDS, weights, normalization, fields)
    if tables:
        family.write_tables(out, tables)

    count = common.count_parameters(weights)
    what = "trainer snapshot" if kind == "trainer" else "state_dict"
    extras = []
    if normalization:
        extras.append("normalization " + ", ".join(normalization))
    if fields:
        extras.append("fields " + ", ".join(fields))
    layout = config.get("key_layout", config.get("variant"))
    if tables:
        extras.append("tables " + ", ".join(tables))
    print(f"surrogate-export: wrote {out}: {family.FAMILY} model, "
          + (f"{layout} key layout, " if layout else "") +
          f"'{variant}' weights from the {what} {ckpt.name}, {count:,} parameters in {len(weights)} tensors; "
          f"config from {config_origin or 'defaults'} ({era}): {family.describe(config)}; "
          + ("; ".join(extras) if extras else "no normalization, no field names") + f"; source {source}.")
    return 0


def main(argv=None):
    """Entry point; returns the exit status (0 success, 2 refused)."""
    parser = make_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already reported)
        return int(exc.code or 0)
    try:
        return run(args)
    except ExportError as exc:
        return _fail(str(exc))
    except ModuleNotFoundError as exc:
        return _fail(_missing(exc))


def _missing(exc):
    return (f"Python module {exc.name!r} is not available to {sys.executable}; the exporter needs torch, "
            "numpy, h5py and PyYAML")
