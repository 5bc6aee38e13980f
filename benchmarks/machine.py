"""The machine a side-by-side benchmark measured on, printed by each *_vs_pytorch.py script before its
table: CPU model, logical CPUs, vector ISA, the kernels the library picks (the rule of
kernels/src/cpu/dispatch.cpp, or SURROGATE_CPU_ISA) and the kernels PyTorch picks (its own CPU check,
or ATEN_CPU_CAPABILITY when the caller set it; the scripts never force it); and its measured limits, with
each run's share of them."""
import json
import os
import platform
import re
import subprocess
from pathlib import Path


def _cpuinfo():
    """(model name, set of flags) from /proc/cpuinfo; (platform.processor(), empty set) elsewhere."""
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model or platform.processor() or platform.machine(), flags


def cpu_isa(flags):
    """The widest x86 vector ISA the flags show: avx512, avx2 (with FMA), or generic."""
    if {"avx512f", "avx512dq", "avx512vl", "avx512bw", "fma"} <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "generic"


def surrogate_isa(flags):
    """The CPU kernels the library runs: SURROGATE_CPU_ISA if set, else the best the CPU supports."""
    requested = os.environ.get("SURROGATE_CPU_ISA")
    return f"{requested} (SURROGATE_CPU_ISA)" if requested else cpu_isa(flags)


def torch_isa(torch):
    """PyTorch's CPU kernels: torch.backends.cpu.get_cpu_capability() (torch >= 2.1), else the 'CPU
    capability usage' line of torch.__config__.show() (torch 1.13)."""
    capability = None
    getter = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    if getter is not None:
        capability = getter()
    else:
        match = re.search(r"CPU capability usage:\s*(\S+)", torch.__config__.show())
        capability = match.group(1) if match else "unknown"
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    return f"{capability} (ATEN_CPU_CAPABILITY={forced})" if forced else capability


def describe(torch=None):
    """One line: 'machine: <CPU model>, <n> logical CPUs, ISA <isa>; surrogate kernels <isa>[; PyTorch <v>
    kernels <isa>]'."""
    model, flags = _cpuinfo()
    line = (f"machine: {model}, {os.cpu_count()} logical CPUs, ISA {cpu_isa(flags)}; "
            f"surrogate kernels {surrogate_isa(flags)}")
    if torch is not None:
        line += f"; PyTorch {torch.__version__} kernels {torch_isa(torch)}"
    return line



def machine_limits(build):
    """This machine's one-core limits (FP32 FMA GFLOP/s, the library's exp rate in 10^9/s, its ISA) from the
    machine_limits program of the build, or None when it was not built."""
    program = Path(build) / "benchmarks" / "machine_limits"
    if not program.exists():
        return None
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([str(program)], env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def share_of_limit(result, threads, limits):
    """Fraction of the machine limit a driver's run reached: the time its counted arithmetic (gflop, gexp of
    benchmarks/operation_counts.hpp) needs at the FMA peak and the exp rate of `threads` cores, divided by
    its best time: the process CPU time at one thread (robust on a shared machine, as the limits are), the
    wall time at more. None without limits or counts."""
    if not limits or not result.get("gflop"):
        return None
    limit_s = (result["gflop"] / (threads * limits["fma_gflops_1t"]) +
               result.get("gexp", 0.0) / (threads * limits["exp_gexps_1t"]))
    return limit_s / (result["best_cpu_s"] if threads == 1 else result["best_s"])


def share_text(share):
    """share_of_limit's result as a 6-wide column ('-' without one)."""
    return f"{100 * share:>5.0f}%" if share is not None else f"{'-':>6}"


def limits_line(limits):
    return (f"limits: FP32 FMA peak {limits['fma_gflops_1t']:.0f} GFLOP/s per core, softmax exp "
            f"{limits['exp_gexps_1t']:.2f} Gexp/s per core ({limits['isa']} kernels; machine_limits, one core); "
            f"%limit: the counted arithmetic's time at these rates over the best time (CPU time at one thread)")


if __name__ == "__main__":
    print(describe())
