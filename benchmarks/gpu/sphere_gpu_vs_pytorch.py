#!/usr/bin/env python3
"""Spherical models on a GPU: surrogate's device forward next to torch-harmonics' modules on the same GPU, same
weights and input, one sample, float32, TF32 off; the outputs are compared before any timing is printed.

    VENV/bin/python benchmarks/gpu/sphere_gpu_vs_pytorch.py --build build [--official TORCH_HARMONICS_DIR] \\
        [--grids 241x480 721x1440] [--models transformer neighborhood] [--repeats 5] [--device cuda]
        [--cuda-device 0]

Models (random weights as share/tools/golden/sphere_model_golden.py draws them, exported with surrogate-export):
  transformer   torch_harmonics.examples.models.SphericalTransformer in the model zoo's
                s2ntransformer_sc2_layers4_e128 configuration (neighbourhood attention, embed_dim 128, one
                head, spectral position embedding, instance norm, DISCO encoder and decoder, internal grid
                half the image's) with img_size = the grid and --layers blocks (the zoo's 4);
  neighborhood  a bare NeighborhoodAttentionS2, self-attention on the equiangular grid, --channels channels,
                --heads heads, bias, default cutoff (benchmarks/sphere_attention_cpu_vs_pytorch.py's layer);
  global        a bare AttentionS2 the same way (O(N^2): small grids only).
The input: normal random values, (1, C, nlat, nlon). TORCH_HARMONICS_DIR: a folder torch-harmonics is installed
in (pip install --target DIR, built for this machine's torch: its helper modules are compiled, so a bare
source tree does not import), put first on sys.path (else the installed package); the header says whether its
CUDA kernels (DISCO convolution, neighbourhood attention) are built: without them its modules run their torch
code.
VENV: torch 2.x with CUDA, numpy, h5py, torch-harmonics (nothing of it is in this repository).

Why the C API: sphere_gpu_bench draws its own input and writes no output, so surrogate's side is
benchmarks/gpu/capi_bench.py: the exported file opened through the C API on the device (--cuda-device: an
index, or cuda-emulated), the grid's rows given as one sample. Its columns (milliseconds): `plan` =
set_points (the latitude bands); `fwd` = predict on the kept plan; `full` = set_points + predict, each the
best of --repeats after a first call that uploads the weights and operator tables (`setup` = that first
call). PyTorch: the module's forward on the device, wall time between torch.cuda.synchronize() calls, best
of --repeats after a warm-up (its operator tables are built when the module is made, not timed). Speed-up:
PyTorch / full and PyTorch / fwd.

Agreement: every grid point's outputs within --tolerance (1e-4) x max(max|y|, 1) of the official ones.
Both sides compute in float32 (torch-harmonics' neighbourhood-attention kernels take float32 only), and sums
of a few hundred terms (DISCO filters, attention neighbourhoods, spectral sums) round differently: this script
with --device cpu --cuda-device cuda-emulated found 1.7e-6 (transformer, 4 blocks, 25x48 and 33x64), 4e-7
(neighbourhood layer) and 3.6e-7 (global layer, 17x32 and 49x96) of max|y|, and surrogate's device forward is
1.6e-5 on max|y| 10 (1.6e-6 of it) from its CPU forward at most on the host backend (share/docs/cuda.md);
1e-4 leaves a margin of fifty over these for the GPU's other summation orders and still stops at any real
difference (a wrong weight, table or neighbourhood moves outputs by 1e-2 of max|y| or more).
"""
import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PRESET = "s2ntransformer_sc2_layers4_e128"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--official", help="a folder torch-harmonics is installed in (default: the installed package)")
    ap.add_argument("--grids", nargs="+", default=["241x480", "721x1440"], help="NLATxNLON, equiangular")
    ap.add_argument("--models", nargs="+", choices=("transformer", "neighborhood", "global"),
                    default=["transformer", "neighborhood"])
    ap.add_argument("--layers", type=int, default=4, help="transformer blocks (the zoo model's 4)")
    ap.add_argument("--channels", type=int, default=64, help="channels of the bare attention layers")
    ap.add_argument("--heads", type=int, default=4, help="heads of the bare attention layers")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="PyTorch device (cuda, cuda:N, or cpu to check the script)")
    ap.add_argument("--cuda-device", default="0", help="surrogate's device index (or cuda-emulated)")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=1)
    return ap.parse_args()


ARGS = parse_args()
if ARGS.official:  # before torch_harmonics is imported
    sys.path.insert(0, str(Path(ARGS.official).resolve()))
import torch  # noqa: E402
import torch_harmonics  # noqa: E402

sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(ROOT / "share" / "tools" / "golden"))
sys.path.insert(0, str(ROOT / "share" / "python"))
sys.path.insert(0, str(HERE))
import capi_bench  # noqa: E402
import side_by_side as sbs  # noqa: E402
import sphere_model_golden as golden  # noqa: E402  (build, zoo_args, randomise)


def kernels():
    """Which compiled kernels this torch-harmonics has: 'CUDA', 'CPU' or 'none' for DISCO and attention."""
    out = []
    for name in ("disco_helpers", "attention_helpers"):
        try:
            helpers = __import__(name)
            kind = ("CUDA" if helpers.cuda_kernels_is_available() else
                    "CPU" if helpers.optimized_kernels_is_available() else "none")
        except ImportError:
            kind = "none"
        out.append(f"{name.split('_')[0]} {kind}")
    return ", ".join(out)


def make(kind, nlat, nlon, gen, path):
    """The official module (eval, random weights) and its export to `path`; returns (module, in channels)."""
    if kind == "transformer":
        overrides = dict(img_size=[nlat, nlon], num_layers=ARGS.layers)
        module, _ = golden.build("transformer", golden.zoo_args(PRESET, overrides))
        family, config, preset = "sphere_transformer", overrides, PRESET
        channels = module.in_chans
    else:
        config = dict(in_channels=ARGS.channels, num_heads=ARGS.heads, in_shape=[nlat, nlon],
                      out_shape=[nlat, nlon], grid_in="equiangular", grid_out="equiangular", bias=True)
        module, config = golden.build(kind if kind == "neighborhood" else "attention", config)
        family = "s2_neighborhood_attention" if kind == "neighborhood" else "s2_attention"
        preset, channels = None, ARGS.channels
    golden.randomise(module, gen)
    module.eval()
    checkpoint = path.with_suffix(".pt")
    torch.save(module.state_dict(), checkpoint)
    from surrogate_export.cli import main as export_main
    argv = ["--family", family, "--checkpoint", str(checkpoint), "--torch-harmonics-version", golden.RELEASE,
            "--config", json.dumps(config), "-o", str(path)] + (["--preset", preset] if preset else [])
    if export_main(argv):
        raise SystemExit(f"surrogate-export failed: {' '.join(argv)}")
    return module, channels


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    warnings.filterwarnings("ignore", category=UserWarning)  # torch-harmonics' notes on kernels and grids
    dev = ARGS.device
    device = ARGS.cuda_device if ARGS.cuda_device == "cuda-emulated" else f"cuda:{ARGS.cuda_device}"
    print(sbs.machine.describe(torch) + (f"; GPU {torch.cuda.get_device_name(dev)}" if dev.startswith("cuda")
                                         else "; PyTorch on the CPU (a check of the script)"))
    print(f"S2 models, one sample, equiangular grids, float32; PyTorch: torch-harmonics {torch_harmonics.__version__} "
          f"({Path(torch_harmonics.__file__).parent.parent}; compiled kernels: {kernels()}), torch "
          f"{torch.__version__}, {dev}, TF32 off; surrogate: C API on {device}; best of {ARGS.repeats} after a warm-up; agreement: "
          f"|diff| <= {ARGS.tolerance:g} max(max|y|, 1) at every point")
    print(f"{'model':>12} {'N':>7} | {'grid':>9} {'setup ms':>9} {'plan ms':>8} {'fwd ms':>8} {'full ms':>8} | "
          f"{'PyTorch ms':>10} | {'x full':>6} {'x fwd':>6} | {'max|diff|':>9} {'max|y|':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for grid in ARGS.grids:
            nlat, nlon = (int(v) for v in grid.lower().split("x"))
            for kind in ARGS.models:
                gen = torch.Generator().manual_seed(ARGS.seed)
                data = Path(tmp) / f"{kind}_{grid}"
                data.mkdir()
                module, channels = make(kind, nlat, nlon, gen, data / "model.h5")
                x = torch.randn(1, channels, nlat, nlon, generator=gen)
                x[0].permute(1, 2, 0).contiguous().numpy().tofile(data / "features.f32")  # grid rows, channels last
                ours = sbs.run_json(capi_bench.command(ARGS.build, data / "model.h5", data, ARGS.repeats, device))
                module = module.to(dev)
                xd = x.to(dev)
                try:
                    y, best = sbs.time_on_device(lambda: module(xd), ARGS.repeats, dev)
                except torch.cuda.OutOfMemoryError as e:
                    print(f"{kind:>12} {nlat * nlon:>7}: {grid}, surrogate alone, full {ours['full_ms']:.2f} ms, fwd "
                          f"{ours['forward_ms']:.2f} ms; PyTorch not run: out of device memory "
                          f"({str(e).splitlines()[0][:100]})", flush=True)
                    torch.cuda.empty_cache()
                    continue
                y = y[0].permute(1, 2, 0).reshape(nlat * nlon, -1).cpu().numpy().astype(np.float64)
                check = sbs.check_agreement(sbs.read_output(data, y.shape), y, f"{kind} {grid}", ARGS.tolerance, 1.0)
                print(f"{kind:>12} {nlat * nlon:>7} | {grid:>9} {ours['first_ms']:>9.2f} {ours['plan_ms']:>8.2f} "
                      f"{ours['forward_ms']:>8.2f} {ours['full_ms']:>8.2f} | {1e3 * best:>10.2f} | "
                      f"{1e3 * best / ours['full_ms']:>6.2f} {1e3 * best / ours['forward_ms']:>6.2f} | "
                      f"{check[0]:>9.2e} {check[1]:>8.3g}", flush=True)


if __name__ == "__main__":
    main()
