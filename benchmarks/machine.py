"""The machine a side-by-side benchmark measured on, printed by each *_vs_pytorch.py script before its
table: CPU model, logical CPUs, vector ISA, the kernels the library picks (the rule of
kernels/src/cpu/dispatch.cpp, or SURROGATE_CPU_ISA) and the kernels PyTorch picks (its own CPU check,
or ATEN_CPU_CAPABILITY when the caller set it; the scripts never force it)."""
import os
import platform
import re


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


if __name__ == "__main__":
    print(describe())
