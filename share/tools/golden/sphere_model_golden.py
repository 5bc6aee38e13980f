#!/usr/bin/env python3
"""Golden whole-model data of the spherical family, from the official torch-harmonics package.

For each case: instantiate the official module (torch_harmonics.examples.models.SphericalTransformer, or
torch_harmonics.AttentionS2 / NeighborhoodAttentionS2 for the bare layers) with a small configuration,
randomise every state_dict tensor (norm weights around 1, biases, the position embedding: nothing is trivially
zero or one), save the state_dict to a temporary directory, export it with OUR exporter
(share/tools/surrogate-export, families sphere_transformer / s2_attention / s2_neighborhood_attention) and
write

    tests/data/sphere/models/<case>/model.h5   the exported model file (with /tables where noted)
    tests/data/sphere/models/<case>/io.h5      input (B, C_in, nlat, nlon) float32 (the query for the bare
                                               layers; key and value too when they live on another grid),
                                               output (the official module, float32, eval mode) and
                                               output_f64 (the same module and input in float64, float64)

Run with the virtual environment that has torch-harmonics (the exporter itself runs under Debian's
/usr/bin/python3 unless --tables needs torch-harmonics):
    VENV/bin/python share/tools/golden/sphere_model_golden.py tests/data/sphere/models [case ...]
Only the package's public classes are called; nothing of it is copied here.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import h5py
import numpy as np
import torch
import torch_harmonics
from torch_harmonics import AttentionS2, InverseRealSHT, NeighborhoodAttentionS2, RealSHT
from torch_harmonics.examples.models import SphericalTransformer

REPO = Path(__file__).resolve().parents[3]
EXPORTER = REPO / "share" / "tools" / "surrogate-export"
SYSTEM_PYTHON = "/usr/bin/python3"
RELEASE = torch_harmonics.__version__.split("+")[0]

SMALL = dict(img_size=[17, 32], grid="equiangular", grid_internal="legendre-gauss", scale_factor=2, embed_dim=16,
             num_layers=2)

# name: (kind, constructor arguments / export config, batch, export with --tables, preset)
CASES = {
    # the model zoo's choices (global attention, instance norm, spectral embedding, piecewise linear (5, 4))
    # at a small size; exported with the DISCO tables
    "st_global_instance_spectral": ("transformer", dict(
        SMALL, in_chans=2, out_chans=3, num_heads=1, attention_mode="global", normalization_layer="instance_norm",
        pos_embed="spectral", encoder_kernel_shape=[5, 4], filter_basis_type="piecewise linear"), 2, True, None),
    # neighbourhood attention, 2 heads, layer norm, learnable latitude embedding, biases, residual prediction,
    # drop_rate > 0 (the MLP's second layer is fwd.3), drop_path_rate > 0 (identity in eval)
    "st_neighborhood_layernorm_lat": ("transformer", dict(
        SMALL, in_chans=3, out_chans=3, num_heads=2, attention_mode="neighborhood", normalization_layer="layer_norm",
        pos_embed="learnable lat", encoder_kernel_shape=[5, 4], filter_basis_type="piecewise linear", bias=True,
        residual_prediction=True, drop_rate=0.1, drop_path_rate=0.1), 1, True, None),
    # global attention, no norm, no position embedding, morlet basis (3, 3), relu, 2 heads, Legendre-Gauss image
    # on an equiangular internal grid; exported WITHOUT tables
    "st_global_none_morlet": ("transformer", dict(
        img_size=[16, 24], grid="legendre-gauss", grid_internal="equiangular", scale_factor=2, embed_dim=16,
        num_layers=2, in_chans=2, out_chans=2, num_heads=2, attention_mode="global", normalization_layer="none",
        pos_embed="none", encoder_kernel_shape=[3, 3], filter_basis_type="morlet", activation_function="relu",
        mlp_ratio=1.5), 2, False, None),
    # neighbourhood attention with an explicit cutoff, scale factor 3, learnable lat-lon embedding, no MLP,
    # isotropic piecewise linear kernel (one entry)
    "st_neighborhood_instance_latlon_cutoff": ("transformer", dict(
        img_size=[19, 36], grid="equiangular", grid_internal="legendre-gauss", scale_factor=3, embed_dim=12,
        num_layers=1, in_chans=1, out_chans=2, num_heads=3, attention_mode="neighborhood",
        normalization_layer="instance_norm", pos_embed="learnable latlon", encoder_kernel_shape=[3],
        filter_basis_type="piecewise linear", use_mlp=False, theta_cutoff=0.9), 1, True, None),
    # the model zoo's s2ntransformer_sc2_layers4_e128 (embed_dim 128, one head of width 128, spectral embedding)
    # at a reduced grid (25x48 -> 13x24: the smallest internal grid whose spectral embedding holds 128 (l, m)
    # channels) and depth (1 layer)
    "zoo_s2ntransformer_e128_reduced": ("transformer", dict(img_size=[25, 48], num_layers=1), 1, True,
                                        "s2ntransformer_sc2_layers4_e128"),
    # bare AttentionS2: self-attention with qk-norm, biases, k/out channels differing from in_channels
    "s2_attention_self_qknorm": ("attention", dict(
        in_channels=8, num_heads=2, in_shape=[8, 16], out_shape=[8, 16], grid_in="lobatto", grid_out="lobatto",
        bias=True, use_qknorm=True, k_channels=6, out_channels=10), 2, False, None),
    # bare AttentionS2: queries on 6x12 equiangular, keys/values on 12x24 Legendre-Gauss, a learnable scale
    # (an nn.Parameter: 'scale' in the state_dict), no bias
    "s2_attention_cross_tensor_scale": ("attention", dict(
        in_channels=6, num_heads=1, in_shape=[12, 24], out_shape=[6, 12], grid_in="legendre-gauss",
        grid_out="equiangular", bias=False, scale_parameter=0.45), 1, False, None),
    # bare NeighborhoodAttentionS2: self-attention, 2 heads, biases, default cutoff
    "s2_neighborhood_self": ("neighborhood", dict(
        in_channels=8, num_heads=2, in_shape=[10, 20], out_shape=[10, 20], grid_in="equiangular",
        grid_out="equiangular", bias=True), 2, False, None),
    # bare NeighborhoodAttentionS2: downsampling 16x32 Legendre-Gauss -> 8x16 equiangular, qk-norm, float scale,
    # explicit cutoff, k/out channels differing
    "s2_neighborhood_down_qknorm": ("neighborhood", dict(
        in_channels=6, num_heads=2, in_shape=[16, 32], out_shape=[8, 16], grid_in="legendre-gauss",
        grid_out="equiangular", bias=True, use_qknorm=True, scale=0.6, theta_cutoff=0.45, k_channels=4,
        out_channels=8), 1, False, None),
    # bare NeighborhoodAttentionS2 in the upsampling (scatter) mode: 9x16 equiangular keys -> 17x32 Legendre-Gauss
    # queries, qk-norm, 2 heads, bias, default cutoff (the input grid's), batch 2
    "s2_neighborhood_up_qknorm": ("neighborhood", dict(
        in_channels=6, num_heads=2, in_shape=[9, 16], out_shape=[17, 32], grid_in="equiangular",
        grid_out="legendre-gauss", bias=True, use_qknorm=True, k_channels=4, out_channels=8), 2, False, None),
    # upsample_sht = True: the decoder upsamples by RealSHT on the internal grid + InverseRealSHT on the image
    # grid. Neighbourhood attention, instance norm, spectral embedding, 17x32 equiangular -> 9x16 Legendre-Gauss
    # (lmax = mmax = 9: the internal grid's Nyquist order 8 becomes an ordinary order of the image grid)
    "st_sht_neighborhood_instance": ("transformer", dict(
        SMALL, in_chans=2, out_chans=2, num_heads=2, attention_mode="neighborhood", normalization_layer="instance_norm",
        pos_embed="spectral", encoder_kernel_shape=[5, 4], filter_basis_type="piecewise linear", upsample_sht=True),
        2, True, None),
    # upsample_sht = True with global attention on a Lobatto internal grid (19x36 equiangular -> 7x12 Lobatto,
    # lmax = mmax = 6), layer norm, residual prediction, morlet basis, no tables
    "st_sht_global_lobatto": ("transformer", dict(
        img_size=[19, 36], grid="equiangular", grid_internal="lobatto", scale_factor=3, embed_dim=8, num_layers=1,
        in_chans=2, out_chans=2, num_heads=1, attention_mode="global", normalization_layer="layer_norm",
        pos_embed="learnable latlon", encoder_kernel_shape=[3, 3], filter_basis_type="morlet",
        residual_prediction=True, upsample_sht=True), 1, False, None),
}


def randomise(module, gen):
    """Every state_dict tensor random: weights ~ N(0, 1/fan_in), norm weights 1 + N(0, 0.2), biases and norm
    biases N(0, 0.1), position embeddings N(0, 0.5), DISCO weights N(0, 1/(in * K)) * 3, qk-norm weights N(0, 0.3)."""
    with torch.no_grad():
        for name, t in module.state_dict().items():
            if not t.is_floating_point():
                continue
            shape = t.shape
            r = torch.randn(shape, generator=gen, dtype=torch.float64)
            leaf = name.split(".")[-1]
            if "position_embeddings" in name:
                v = 0.5 * r
            elif leaf in ("q_norm_weights", "k_norm_weights"):
                v = 0.3 * r
            elif leaf == "scale":
                continue
            elif leaf.endswith("bias"):
                v = 0.1 * r
            elif ".norm" in name and leaf == "weight":
                v = 1.0 + 0.2 * r
            elif name.endswith("conv.weight"):  # DISCO (out, in, K)
                v = 3.0 * r / math.sqrt(shape[1] * shape[2])
            else:
                v = r / math.sqrt(max(1, int(np.prod(shape[1:]))))
            t.copy_(v.to(t.dtype))


def build(kind, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "transformer":
            kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in args.items()}
            return SphericalTransformer(**kw), args
        a = dict(args)
        scale_param = a.pop("scale_parameter", None)
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in a.items()}
        cls = AttentionS2 if kind == "attention" else NeighborhoodAttentionS2
        m = cls(**kw)
        if scale_param is not None:
            m.scale = torch.nn.Parameter(torch.tensor(scale_param, dtype=torch.float32))
        return m, a


def zoo_args(preset, overrides):
    # the constructor arguments of the preset, for instantiating the official model (the exporter has its own
    # copy of this table; these are the registry's arguments, examples/model_registry.py)
    zoo = dict(img_size=[128, 256], grid="equiangular", in_chans=3, out_chans=3, num_layers=4, scale_factor=2,
               embed_dim=128, activation_function="gelu", residual_prediction=False, pos_embed="spectral",
               use_mlp=True, normalization_layer="instance_norm", encoder_kernel_shape=[5, 4],
               filter_basis_type="piecewise linear", upsample_sht=False,
               attention_mode="neighborhood" if preset.startswith("s2n") else "global", bias=False)
    zoo.update(overrides)
    return zoo


def export(ckpt, out, family, config, tables, preset):
    cmd = [SYSTEM_PYTHON if not tables else sys.executable, str(EXPORTER), "--family", family, "--checkpoint", str(ckpt),
           "--torch-harmonics-version", RELEASE, "--config", json.dumps(config), "-o", str(out)]
    if tables:
        cmd.append("--tables")
    if preset:
        cmd += ["--preset", preset]
    env = dict(os.environ, SURROGATE_EXPORT_REEXEC="1")
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(f"export failed ({' '.join(cmd)}):\n{res.stderr}")
    return cmd[2:]


def run_case(name, spec, outdir, tmp, gen):
    kind, args, batch, tables, preset = spec
    ctor = zoo_args(preset, args) if preset else args
    model, export_config = build(kind, ctor)
    if preset:
        export_config = args  # the exporter gets the preset plus the overrides
    randomise(model, gen)
    model.eval()
    ckpt = Path(tmp) / f"{name}.pt"
    torch.save(model.state_dict(), ckpt)
    case_dir = outdir / name
    case_dir.mkdir(parents=True, exist_ok=True)
    family = {"transformer": "sphere_transformer", "attention": "s2_attention",
              "neighborhood": "s2_neighborhood_attention"}[kind]
    argv = export(ckpt, case_dir / "model.h5", family, export_config, tables, preset)

    if kind == "transformer":
        x = torch.randn(batch, ctor["in_chans"], *ctor["img_size"], generator=gen)
        inputs = {"input": x}
    else:
        hi, wi = ctor["in_shape"]
        ho, wo = ctor["out_shape"]
        inputs = {"input": torch.randn(batch, ctor["in_channels"], ho, wo, generator=gen)}
        if (hi, wi) != (ho, wo):
            inputs["key"] = torch.randn(batch, ctor["in_channels"], hi, wi, generator=gen)
            inputs["value"] = torch.randn(batch, ctor["in_channels"], hi, wi, generator=gen)

    def forward(m, dtype):
        xs = [inputs[k].to(dtype) for k in ("input", "key", "value") if k in inputs]
        with torch.no_grad():
            return m(*xs)

    y32 = forward(model, torch.float32)
    if kind == "transformer":
        # The encoder and decoder cast to float32 (and so refuse float64 weights): for the float64 run their
        # DISCO convolutions (and the decoder's resampling) are called directly, in float64. The neighbourhood
        # attention kernels compute in float32 whatever the input (output_f64_note says so).
        enc, dec = model.encoder, model.decoder
        enc.forward = lambda x: enc.conv(x)
        dec.forward = lambda x: dec.conv(dec.upsample(x))
    y64 = None
    model64 = model.double() if kind != "neighborhood" else None  # its compiled kernel takes float32 only
    if kind == "transformer" and ctor.get("attention_mode") == "neighborhood":
        for blk in model64.blocks:  # the block casts the attention's input to float32: keep its weights float32
            blk.self_attn.float()
    if kind == "transformer" and ctor.get("upsample_sht"):
        # .double() keeps the float32-rounded tables of the float32 SHT modules: fresh float64 transforms
        sht64 = RealSHT(model.h, model.w, grid=ctor.get("grid_internal", "legendre-gauss"))
        isht64 = InverseRealSHT(*ctor["img_size"], lmax=sht64.lmax, mmax=sht64.mmax, grid=ctor.get("grid", "equiangular"))
        model64.decoder.upsample = torch.nn.Sequential(sht64, isht64)
    if model64 is not None:
        y64 = forward(model64, torch.float64)
    with h5py.File(case_dir / "io.h5", "w") as f:
        f.attrs["torch_harmonics_version"] = str(torch_harmonics.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["family"] = family
        recorded = [Path(a).name if a in (str(ckpt), str(case_dir / "model.h5")) else a for a in argv]
        f.attrs["exporter_args"] = json.dumps(recorded)  # the checkpoint was a temporary file
        f.attrs["constructor"] = json.dumps(ctor)
        for k, v in inputs.items():
            f[k] = v.numpy().astype(np.float32)
        f["output"] = y32.numpy().astype(np.float32)
        if y64 is None:
            f.attrs["output_f64_note"] = "none: the module's compiled kernel refuses float64 inputs"
        else:
            f["output_f64"] = y64.numpy().astype(np.float64)
        neighborhood = kind == "neighborhood" or (kind == "transformer" and ctor.get("attention_mode") == "neighborhood")
        if y64 is not None:
            f.attrs["output_f64_note"] = (
                "the official module in float64"
                + (" with the encoder/decoder float32 casts bypassed" if kind == "transformer" else "")
                + ("; its neighbourhood attention computes in float32 (weights and arithmetic)" if neighborhood else ""))
    ref = y64 if y64 is not None else y32.double()
    gap = float((y32.double() - ref).abs().max())
    size = sum(p.stat().st_size for p in case_dir.iterdir())
    print(f"{name}: output {tuple(y32.shape)}, max|y| {float(ref.abs().max()):.3g}, |f32 - f64| {gap:.3g}, "
          f"{size / 1024:.0f} KiB{' (tables)' if tables else ''}")


def main():
    outdir = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/sphere/models")
    which = sys.argv[2:] or list(CASES)
    outdir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(CASES):
            gen = torch.Generator().manual_seed(1000 + i)
            if name in which:
                run_case(name, CASES[name], outdir, tmp, gen)
    total = sum(p.stat().st_size for p in outdir.rglob("*") if p.is_file())
    print(f"total {total / 1024:.0f} KiB in {outdir}")


if __name__ == "__main__":
    main()
