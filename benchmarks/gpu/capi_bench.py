#!/usr/bin/env python3
"""surrogate's C API (coupling/include/surrogate.h) as a solver calls it, timed through ctypes: the driver of
the GPU side-by-side scripts whose device benchmark programs cannot take the official code's inputs
(sequoia_gpu_bench builds one sample of its own, sphere_gpu_bench its own input field).

    python3 benchmarks/gpu/capi_bench.py LIBRARY MODEL.h5 DIR REPEATS DEVICE

LIBRARY: BUILD/coupling/libsurrogate_coupling.so (in a GPU bundle: lib/libsurrogate_coupling.so.0); DEVICE:
cpu, cuda, cuda:N or cuda-emulated. DIR holds raw arrays: features.f32 (N x in_channels, float32; not read
for a model without input channels, e.g. in the ShapeNet-Car wrapper, whose N comes from positions.f32),
positions.f32 (N x d: the model's positions; absent for models without, whose points then get a placeholder
coordinate), sizes.i64 (points per sample, samples contiguous; absent: one sample) and sample_inputs.f32
(B x sample_in: Sequoia's class vectors). Writes the first predict's output to DIR/surrogate_out.f32 (N x
out_channels, or B x sample_out for models with one output row per sample) and prints one JSON line, in
milliseconds: open_ms (surrogate_open: the model file read and checked), first_ms (set_points and the first
predict, which sets up the device forward: weights and tables uploaded), then the best of REPEATS of
plan_ms (set_points on a new point set: its checks and copies only, since the plan is built by the
next predict), forward_ms (predict on the kept plan) and full_ms (set_points + predict: the whole call on a
new point set, the plan's build included).

One MPI rank (MPI_Init through ctypes; Open MPI). No PyTorch in this process: the scripts start it as a
program of its own (side_by_side.run_json). The surrogate libraries are preloaded (LD_PRELOAD; the script
executes itself again): the kernels library uses initial-exec thread-local storage, which a library opened
after the start cannot get ("cannot allocate memory in static TLS block").
"""
import ctypes
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

WRAPPER = "capi_bench"  # BUILD/benchmarks/gpu/capi_bench: a launcher with its own environment (the GPU bundle's)


def command(build, *args):
    """The argv that runs this driver for the build folder `build`: the launcher the GPU bundle's runner
    writes there, else this script on the build's library with this Python."""
    launcher = Path(build) / "benchmarks" / "gpu" / WRAPPER
    if launcher.exists():
        return [launcher, *args]
    return [sys.executable, Path(__file__).resolve(), Path(build) / "coupling" / "libsurrogate_coupling.so", *args]


class Opts(ctypes.Structure):
    _fields_ = [("device", ctypes.c_char_p), ("threads", ctypes.c_int), ("reproducible", ctypes.c_int),
                ("precision", ctypes.c_char_p), ("allow_non_finite_output", ctypes.c_int)]


def preload(library):
    """Executes this script again with the surrogate libraries LIBRARY needs in LD_PRELOAD (once)."""
    if os.environ.get("SURROGATE_CAPI_BENCH_PRELOADED"):
        return
    out = subprocess.run(["ldd", library], capture_output=True, text=True).stdout
    libs = re.findall(r"^\s*libsurrogate\S*\s+=>\s+(/\S+)", out, re.M)
    env = dict(os.environ, SURROGATE_CAPI_BENCH_PRELOADED="1",
               LD_PRELOAD=" ".join(libs + [os.environ.get("LD_PRELOAD", "")]).strip())
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: capi_bench.py LIBRARY MODEL.h5 DIR REPEATS DEVICE")
    library, model, folder, repeats, device = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    preload(library)
    lib = ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
    lib.surrogate_last_error.restype = ctypes.c_char_p

    def call(name, *a):
        status = getattr(lib, name)(*a)
        if status != 0:
            raise SystemExit(f"{name}: status {status}: {lib.surrogate_last_error().decode(errors='replace')}")

    if lib.MPI_Init(None, None) != 0:
        raise SystemExit("MPI_Init failed")
    try:
        comm = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(lib, "ompi_mpi_comm_world")))
    except ValueError:
        raise SystemExit("capi_bench.py needs Open MPI (no ompi_mpi_comm_world in the libraries)")
    opts = Opts()
    lib.surrogate_options_default(ctypes.byref(opts))
    opts.device = device.encode()
    handle = ctypes.c_void_p()
    t0 = time.perf_counter()
    call("surrogate_open", comm, model.encode(), ctypes.byref(opts), ctypes.byref(handle))
    open_ms = 1e3 * (time.perf_counter() - t0)
    ints = [ctypes.c_int() for _ in range(5)]
    call("surrogate_in_channels", handle, ctypes.byref(ints[0]))
    call("surrogate_out_channels", handle, ctypes.byref(ints[1]))
    call("surrogate_sample_channels", handle, ctypes.byref(ints[2]), ctypes.byref(ints[3]))
    call("surrogate_position_dim", handle, ctypes.byref(ints[4]))
    c_in, c_out, s_in, s_out, dim = (i.value for i in ints)
    if c_in > 0:
        features = np.ascontiguousarray(np.fromfile(folder / "features.f32", dtype=np.float32).reshape(-1, c_in))
        n = features.shape[0]
    else:  # the positions are the only input
        n = np.fromfile(folder / "positions.f32", dtype=np.float32).size // max(dim, 1)
        features = None
    if dim > 0:
        coords = np.ascontiguousarray(np.fromfile(folder / "positions.f32", dtype=np.float32).reshape(n, dim))
    else:
        coords, dim = np.zeros((n, 1), dtype=np.float32), 1
    sizes_file = folder / "sizes.i64"
    sample_ids = None
    if sizes_file.exists():
        sizes = np.fromfile(sizes_file, dtype=np.int64)
        sample_ids = np.ascontiguousarray(np.repeat(np.arange(len(sizes), dtype=np.int64), sizes))
    samples = 1 if sample_ids is None else int(sample_ids[-1]) + 1
    out = np.zeros((n, max(c_out, 1)), dtype=np.float32)
    f32p, i64p = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int64)

    def set_points():
        ids = None if sample_ids is None else sample_ids.ctypes.data_as(i64p)
        call("surrogate_set_points_f32", handle, ctypes.c_int64(n), dim, coords.ctypes.data_as(f32p),
             ctypes.c_int64(dim), ctypes.c_int64(1), None, ids)
        if s_in > 0:
            values = np.ascontiguousarray(np.fromfile(folder / "sample_inputs.f32", dtype=np.float32))
            call("surrogate_set_sample_inputs_f32", handle, ctypes.c_int64(samples), s_in, values.ctypes.data_as(f32p))

    def predict():
        rows = features.ctypes.data_as(f32p) if features is not None else None
        call("surrogate_predict_f32", handle, rows, ctypes.c_int64(max(c_in, 1)), ctypes.c_int64(1),
             out.ctypes.data_as(f32p) if c_out > 0 else None, ctypes.c_int64(max(c_out, 1)), ctypes.c_int64(1))

    def ms(fn):
        t = time.perf_counter()
        fn()
        return 1e3 * (time.perf_counter() - t)

    first_ms = ms(set_points) + ms(predict)
    if c_out > 0:
        out.tofile(folder / "surrogate_out.f32")
    else:
        per_sample = np.zeros(samples * s_out, dtype=np.float64)
        call("surrogate_get_sample_outputs_f64", handle, ctypes.c_int64(per_sample.size),
             per_sample.ctypes.data_as(ctypes.POINTER(ctypes.c_double)))
        per_sample.astype(np.float32).tofile(folder / "surrogate_out.f32")
    forward = min(ms(predict) for _ in range(max(1, repeats)))
    plan, full = float("inf"), float("inf")
    for _ in range(max(1, repeats)):
        p = ms(set_points)
        plan, full = min(plan, p), min(full, p + ms(predict))
    call("surrogate_close", ctypes.byref(handle))
    lib.MPI_Finalize()
    print(json.dumps({"points": n, "samples": samples, "device": device, "open_ms": round(open_ms, 3),
                      "first_ms": round(first_ms, 3), "plan_ms": round(plan, 3), "forward_ms": round(forward, 3),
                      "full_ms": round(full, 3)}))


if __name__ == "__main__":
    main()
