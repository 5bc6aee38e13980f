#!/usr/bin/env python3
"""Sequoia forward on a GPU: surrogate's device forward next to the official code of HySonLab/HierAttention on
the same GPU, the same random weights (the official module's state_dict exported by surrogate-export) and the
same inputs: batches of B samples of the official size (seg: 2,048 points, cls: 1,024), N = B x sample points
in all, every sample a normalised Gaussian cloud; float32, TF32 off. The setup of
benchmarks/sequoia_cpu_vs_pytorch.py, whose functions this script uses.

    VENV/bin/python benchmarks/gpu/sequoia_gpu_vs_pytorch.py --build build --official HIERATTENTION_CHECKOUT \\
        [--models seg cls] [--sizes 100000 1000000] [--repeats 5] [--device cuda] [--cuda-device 0]

HIERATTENTION_CHECKOUT: a checkout of github.com/HySonLab/HierAttention (its point_cloud/ folder is imported at
run time; nothing of it is in this repository); VENV: torch 2.x with CUDA, numpy, h5py, PyYAML and
torch_geometric (torch_scatter and torch_cluster when present, else share/tools/golden/sequoia_golden.py's
stand-ins; the header says which ran).

Why the C API: the official model computes each sample's sibling lists from all pairwise distances of a
level, so it runs on samples of its training size, and sequoia_gpu_bench times one sample of its own.
surrogate's side is therefore benchmarks/gpu/capi_bench.py: the model file opened through the C API on the
device (--cuda-device: an index, or cuda-emulated), the batch given to set_points with its sample ids, the
class vectors as per-sample inputs. Its columns (milliseconds): `plan` = set_points on a new point set;
`fwd` = predict on the kept plan (the voxel hierarchy, neighbour lists and network of the batch); `full` =
set_points + predict, the whole call on a new point set, each the best of --repeats after a first call that
sets the device up. PyTorch: the official forward on the collated batch on --device (its _index, sibling
kNN, Init, blocks and head; its hierarchy, built by util/voxel_fixed.py in its data loader, is built
beforehand and not timed), wall time between torch.cuda.synchronize() calls, best of --repeats after a
warm-up. It runs under `with torch.device(DEVICE)`, so that the tensors it creates without a device (the
batch vector) are on the GPU like the inputs its training scripts move there. Speed-up: PyTorch / full and
PyTorch / fwd.

Agreement, before the timing, as in the CPU script: the neighbour lists are the one defined difference
(share/docs/sequoia.md, "Neighbour order": the official float32 kNN with torch's unstable sort against the
library's exact rule), so the check runs the official forward on the device with the library's lists
replayed into its kNN calls (for cls the PointConv lists too), then the official forward as it is is timed.
Tolerance: |diff| <= --tolerance (1e-5) x max(max|y|, 1) per row (a point for seg, a sample for cls). Both
sides round in float32: on the CPU the official forward is 1e-6 (seg, max|y| 2) and 1e-7 (cls, max|y| 0.5)
from its float64 forward and the library 2.6e-6 and 4.8e-7 at most; the library's device forward is bitwise
its CPU forward (sequoia_gpu_bench); the official float32 forward on the GPU sums in other orders, and the
script prints its distance from its own float64 forward on the device at the first size, the scale the
tolerance must exceed (a wrong list or weight moves the outputs by 1e-3 or more).
"""
import argparse
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(ROOT / "share" / "tools" / "golden"))
sys.path.insert(0, str(ROOT / "share" / "python"))
sys.path.insert(0, str(HERE))
import capi_bench  # noqa: E402
import sequoia_cpu_vs_pytorch as cpu_bench  # noqa: E402  (model_setup, batch_of, exact_rule_calls, ...)
import side_by_side as sbs  # noqa: E402


def replayed_forward(g, off, kind, model, batch, dtype, dev, replay):
    """The official forward on the collated batch on `dev` with the library's neighbour lists `replay` in its
    kNN calls (golden script's Recorder); returns the output on the host."""
    inputs = [t.to(dev) for t in cpu_bench.official_inputs(batch, dtype)]
    with torch.no_grad(), torch.device(dev), g.Recorder(off, off.seg if kind == "seg" else off.cls, model, replay):
        return model(inputs).cpu()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--official", required=True, help="a checkout of HySonLab/HierAttention")
    ap.add_argument("--models", nargs="+", choices=("seg", "cls"), default=["seg", "cls"])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100000, 1000000],
                    help="points per batch (rounded down to whole samples)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="PyTorch device (cuda, cuda:N, or cpu to check the script)")
    ap.add_argument("--cuda-device", default="0", help="surrogate's device index (or cuda-emulated)")
    ap.add_argument("--tolerance", type=float, default=1e-5, help="agreement: |diff| <= tolerance x max(max|y|, 1)")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = args.device
    device = args.cuda_device if args.cuda_device == "cuda-emulated" else f"cuda:{args.cuda_device}"
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch_geometric's torch.jit.script notice
    import sequoia_golden as g  # the official modules, stand-ins, weights, clouds, collation
    off = g.load_official(args.official)
    backends = g.official_backends()
    print(sbs.machine.describe(torch) + (f"; GPU {torch.cuda.get_device_name(dev)}" if dev.startswith("cuda")
                                         else "; PyTorch on the CPU (a check of the script)"))
    print(f"Sequoia forward, batches of official-size samples, float32; PyTorch: official model (torch "
          f"{torch.__version__}, {dev}, TF32 off; torch_scatter: {backends['torch_scatter']}; kNN: {backends['knn']}; "
          f"substituted: {', '.join(off.stand_ins) or 'nothing'}); surrogate: C API on {device}; best of "
          f"{args.repeats} after a warm-up; agreement (library's neighbour lists replayed): |diff| <= "
          f"{args.tolerance:g} max(max|y|, 1) per row")
    print(f"{'model':>5} {'N':>8} | {'B':>4} {'plan ms':>8} {'fwd ms':>8} {'full ms':>8} | {'PyTorch ms':>10} | "
          f"{'x full':>6} {'x fwd':>6} | {'max|diff|':>9} {'max|y|':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.models:
            cfg, export_config, sample_points, what = cpu_bench.model_setup(args.official, kind)
            model = g.new_model(off, kind, cfg, args.seed)
            model_path = Path(tmp) / f"sequoia_{kind}.h5"
            cpu_bench.export(model.state_dict(), model_path, export_config, cpu_bench.source(off))
            model = model.to(dev)
            print(f"  {kind}: {what}, {sum(t.numel() for t in model.parameters())} parameters, samples of "
                  f"{sample_points} points", flush=True)
            rng = np.random.default_rng(args.seed)
            for n in args.sizes:
                samples = max(1, n // sample_points)
                points, extra, batch = cpu_bench.batch_of(g, off, kind, cfg, rng, samples, sample_points)
                data = Path(tmp) / f"{kind}_n{n}"
                data.mkdir()
                points.astype(np.float32).tofile(data / "positions.f32")
                (points if kind == "seg" else extra).astype(np.float32).tofile(data / "features.f32")
                np.full(samples, sample_points, dtype=np.int64).tofile(data / "sizes.i64")
                if kind == "seg":
                    extra.astype(np.float32).tofile(data / "sample_inputs.f32")
                ours = sbs.run_json(capi_bench.command(args.build, model_path, data, args.repeats, device))
                # The check: the official forward with the library's neighbour lists.
                k = cpu_bench.K_SIBLINGS[kind]
                replay = {"sib": cpu_bench.exact_rule_calls(batch, g, cfg, k, dev), "knn": []}
                if kind == "cls":
                    edges, differ = cpu_bench.pointconv_lists(batch, g, off, cfg, dev)
                    replay["knn"].append(edges)
                    print(f"        N {len(points)}: PointConv lists on which the official kNN ({backends['knn']}) "
                          f"picks another set than the library: {differ} of {len(points)}", flush=True)
                y = replayed_forward(g, off, kind, model, batch, torch.float32, dev, replay).numpy().astype(np.float64)
                check = sbs.check_agreement(sbs.read_output(data, y.shape), y, f"{kind} N {len(points)}",
                                            args.tolerance, 1.0)
                if n == args.sizes[0]:
                    y64 = replayed_forward(g, off, kind, model.double(), batch, torch.float64, dev, replay).numpy()
                    model.float()
                    print(f"        N {len(points)}: official float32 vs float64 on {dev} {np.abs(y - y64).max():.2e}, "
                          f"surrogate vs official float64 {np.abs(sbs.read_output(data, y.shape) - y64).max():.2e}, "
                          f"max|y| {np.abs(y64).max():.2f}", flush=True)
                del replay
                inputs = [t.to(dev) for t in cpu_bench.official_inputs(batch, torch.float32)]

                def forward():
                    with torch.device(dev):  # _index edits the mapping it is given: a copy each call
                        return model([*inputs[:3], inputs[3].clone(), *inputs[4:]])
                _, best = sbs.time_on_device(forward, args.repeats, dev)
                print(f"{kind:>5} {len(points):>8} | {samples:>4} {ours['plan_ms']:>8.2f} {ours['forward_ms']:>8.2f} "
                      f"{ours['full_ms']:>8.2f} | {1e3 * best:>10.2f} | {1e3 * best / ours['full_ms']:>6.2f} "
                      f"{1e3 * best / ours['forward_ms']:>6.2f} | {check[0]:>9.2e} {check[1]:>8.3g}", flush=True)


if __name__ == "__main__":
    main()
