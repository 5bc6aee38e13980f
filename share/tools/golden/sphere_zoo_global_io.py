#!/usr/bin/env python3
"""Official output of the model zoo's s2transformer_sc2_layers4_e128 (GLOBAL attention) on the weights of the
golden file zoo_s2ntransformer_e128_reduced (the neighbourhood variant: the same configuration and the same
state_dict names, only attention_mode differs), for the CUDA wide-head tests.

Instantiates torch_harmonics.examples.models.SphericalTransformer with the zoo preset's arguments (as
sphere_model_golden.py: img_size 25x48, one layer) and attention_mode "global", loads every tensor of
<models>/zoo_s2ntransformer_e128_reduced/model.h5's /weights group into it (strict: all parameters and
persistent buffers present, nothing unexpected), runs the file's io.h5 input and writes

    <out>   input (copied), output (float32, eval mode), output_f64 (the module in float64 with the
            encoder/decoder float32 casts bypassed, as sphere_model_golden.py does)

Run with the virtual environment that has torch-harmonics:
    VENV/bin/python share/tools/golden/sphere_zoo_global_io.py \
        tests/data/sphere/models tests/data/sphere/zoo_s2transformer_e128_global_io.h5
Only the package's public classes are called; nothing of it is copied here.
"""
import json
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import torch
import torch_harmonics
from torch_harmonics.examples.models import SphericalTransformer

SOURCE = "zoo_s2ntransformer_e128_reduced"


def main():
    models = Path(sys.argv[1])
    out = Path(sys.argv[2])
    torch.set_num_threads(1)
    src = models / SOURCE
    with h5py.File(src / "model.h5", "r") as f:
        cfg = {k: f["config"].attrs[k] for k in f["config"].attrs}
        weights = {k: torch.from_numpy(np.asarray(v)) for k, v in f["weights"].items()}
    with h5py.File(src / "io.h5", "r") as f:
        x = torch.from_numpy(np.asarray(f["input"]))
    ctor = dict(img_size=tuple(int(v) for v in cfg["img_size"]), grid=str(cfg["grid"]),
                grid_internal=str(cfg["grid_internal"]), in_chans=int(cfg["in_chans"]),
                out_chans=int(cfg["out_chans"]), num_layers=int(cfg["num_layers"]),
                scale_factor=int(cfg["scale_factor"]), embed_dim=int(cfg["embed_dim"]),
                activation_function=str(cfg["activation_function"]), residual_prediction=bool(cfg["residual_prediction"]),
                pos_embed=str(cfg["pos_embed"]), use_mlp=bool(cfg["use_mlp"]),
                normalization_layer=str(cfg["normalization_layer"]),
                encoder_kernel_shape=tuple(int(v) for v in cfg["encoder_kernel_shape"]),
                filter_basis_type=str(cfg["filter_basis_type"]), upsample_sht=bool(cfg["upsample_sht"]),
                num_heads=int(cfg["num_heads"]), mlp_ratio=float(cfg["mlp_ratio"]), bias=bool(cfg["bias"]),
                attention_mode="global")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SphericalTransformer(**ctor)
    state = model.state_dict()
    missing = [k for k in state if k not in weights and state[k].is_floating_point() and "psi" not in k
               and "quad_weights" not in k]
    unexpected = [k for k in weights if k not in state]
    if unexpected or any(k in dict(model.named_parameters()) for k in missing):
        raise SystemExit(f"state_dict mismatch: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for k, v in weights.items():
            if state[k].shape != v.shape:
                raise SystemExit(f"{k}: shape {tuple(v.shape)} in the file, {tuple(state[k].shape)} in the module")
            state[k].copy_(v.to(state[k].dtype))
    model.eval()
    with torch.no_grad():
        y32 = model(x)
        enc, dec = model.encoder, model.decoder  # their float32 casts refuse float64: call the convolutions
        enc.forward = lambda t: enc.conv(t)
        dec.forward = lambda t: dec.conv(dec.upsample(t))
        y64 = model.double()(x.double())
    with h5py.File(out, "w") as f:
        f.attrs["torch_harmonics_version"] = str(torch_harmonics.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["source"] = SOURCE + "/model.h5 weights, attention_mode global"
        f.attrs["constructor"] = json.dumps(ctor)
        f.attrs["output_f64_note"] = "the official module in float64 with the encoder/decoder float32 casts bypassed"
        f["input"] = x.numpy().astype(np.float32)
        f["output"] = y32.numpy().astype(np.float32)
        f["output_f64"] = y64.numpy().astype(np.float64)
    gap = float((y32.double() - y64).abs().max())
    print(f"{out}: output {tuple(y32.shape)}, max|y| {float(y64.abs().max()):.3g}, |f32 - f64| {gap:.3g}, "
          f"{out.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
