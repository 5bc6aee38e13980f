#!/usr/bin/env python3
"""Runs the tests and benchmarks of an unpacked GPU bundle (share/tools/gpu-bundle) on this machine and
writes OUT/log.txt (everything) and OUT/summary.json (rewritten after every test, so that a run cut off
leaves what it did). Python 3.8+, standard library only; nothing outside the bundle is needed but the
machine's CUDA runtime, NCCL and cuBLAS (found here: CUDA toolkits, the Python packages, ldconfig) and,
for the cmake -P tests, cmake on PATH.

    run OUT [--check] [--labels gpu] [--select REGEX] [--exclude REGEX] [--tests-only | --bench-only] [--list]
            [--timeout 300] [--budget 540] [--jobs 1] [--python PYTHON] [--points 1048576] [--latents 64 256]
            [--flare-compile bf16 tf32] [--exec COMMAND]
            [--erwin-sizes 16384 65536 262144] [--erwin-official DIR] [--hept-sizes 60000 240000]
            [--hept-official DIR] [--sequoia-sizes 65536 262144] [--bsa-sizes 16384 65536]
            [--sphere-grids 241x480 721x1440] [--sequoia-official DIR] [--bsa-official DIR]
            [--sphere-official DIR] [--official-sizes 100000 1000000]

A test passes, fails or is skipped by ctest's rules with the test's own properties (a test is skipped only
when its output matches its SKIP_REGULAR_EXPRESSION, e.g. GoogleTest's "[  SKIPPED ]", or it exits with
its SKIP_RETURN_CODE); tests not started because the time budget ran out or a fixture set-up failed are
"not run". Benchmarks are skipped without a CUDA device. Exit status 0 when no test or benchmark failed or
was not run, 1 otherwise.
"""
import argparse
import concurrent.futures
import ctypes
import datetime
import glob
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BUNDLE = Path(__file__).resolve().parent
MACHINE_SEARCH_NOTE = ("LD_LIBRARY_PATH, $CUDA_HOME/$CUDA_PATH, /usr/local/cuda*, ldconfig, "
                       "the nvidia/ and torch/ Python packages")


class Log:
    """log.txt gets everything; stdout gets the lines marked `echo` (the preamble, one line per test, the
    summary), which is what comes back from a remote call's output tail."""

    def __init__(self, path):
        self.file = open(path, "w", buffering=1)
        self.lock = threading.Lock()

    def __call__(self, text="", echo=True):
        with self.lock:
            self.file.write(text + "\n")
            if echo:
                print(text, flush=True)

    def block(self, text):
        with self.lock:
            self.file.write(text if text.endswith("\n") else text + "\n")


# ---------------------------------------------------------------------------------------------------------
# Test outcome, by ctest's rules.

def classify(test, returncode, output, timed_out, timeout=None):
    """(status, reason) of one test run: status passed, failed or skipped."""
    if timed_out:
        return "failed", f"timeout after {timeout:g} s"
    for rx in test.get("skip_regex", []):
        if re.search(rx, output, re.M):
            return "skipped", f"output matches {rx!r}"
    if returncode is not None and returncode < 0:
        return "failed", f"killed by signal {-returncode}"
    code = test.get("skip_return_code")
    if code is not None and returncode == code:
        return "skipped", f"exit status {code} (SKIP_RETURN_CODE)"
    if test.get("pass_regex"):
        ok = any(re.search(rx, output, re.M) for rx in test["pass_regex"])
        reason = "" if ok else "output matches no PASS_REGULAR_EXPRESSION"
    else:
        ok = returncode == 0
        reason = "" if ok else f"exit status {returncode}"
    for rx in test.get("fail_regex", []):
        if re.search(rx, output, re.M):
            ok, reason = False, f"output matches FAIL_REGULAR_EXPRESSION {rx!r}"
    if test.get("will_fail"):
        ok, reason = not ok, ("" if not ok else "WILL_FAIL test succeeded")
    return ("passed", "") if ok else ("failed", reason)


def descendants(pid):
    """All processes below pid (mpirun's ranks), from /proc."""
    children = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                text = f.read()
            fields = text[text.rindex(")") + 2:].split()
            children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


BENCH_FAMILIES = ("flare", "hept", "sequoia", "bsa", "sphere", "erwin")


def bench_family(name):
    """The family a benchmark's name belongs to ("flare_machine", "hept N=60000", "sequoia seg N=65536")."""
    return name.split()[0].split("_")[0]


def is_table_row(line):
    """A result row of a benchmark script's table: Markdown ("| ... |") or columns led by a size, with or
    without a name before it ("  60000 | ...", "   sparse    16384 | ...")."""
    return line.startswith("|") or re.match(r"^\s*([A-Za-z][\w.-]*\s+)?\d+ +\|", line) is not None


def run_process(argv, env, cwd, timeout, max_bytes=4 << 20):
    """(returncode, output, timed_out, seconds): stdout and stderr together; on timeout the process, its
    process group and every descendant get SIGTERM, then SIGKILL."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        return 127, f"cannot start {argv[0]}: {e}\n", False, 0.0
    chunks, size = [], [0]

    def reader():
        for chunk in iter(lambda: proc.stdout.read(65536), b""):
            if size[0] < max_bytes:
                chunks.append(chunk)
            size[0] += len(chunk)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig in (signal.SIGTERM, signal.SIGKILL):
            victims = descendants(proc.pid)
            for p in [proc.pid] + victims:
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:
                continue
        proc.wait()
    t.join(timeout=10)
    proc.stdout.close()
    output = b"".join(chunks).decode("utf-8", errors="replace")
    if size[0] > max_bytes:
        output += f"\n[... {size[0] - max_bytes} more bytes of output not kept]\n"
    return proc.returncode, output, timed_out, time.monotonic() - start


# ---------------------------------------------------------------------------------------------------------
# The machine: libraries, devices, Python.

def ldconfig_paths():
    out = {}
    for ldconfig in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        exe = shutil.which(ldconfig) or (ldconfig if os.path.exists(ldconfig) else None)
        if not exe:
            continue
        text = subprocess.run([exe, "-p"], capture_output=True, text=True).stdout
        for m in re.finditer(r"^\s*(\S+) \((?:[^)]*x86-64[^)]*)\) => (\S+)$", text, re.M):
            out.setdefault(m.group(1), m.group(2))
        break
    return out


def python_site_dirs(pythons):
    dirs = []
    code = "import site, sys, json; print(json.dumps(site.getsitepackages() + [site.getusersitepackages()] + sys.path))"
    for py in pythons:
        try:
            out = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=60).stdout
            dirs += [d for d in json.loads(out) if d and os.path.isdir(d)]
        except (OSError, ValueError, subprocess.TimeoutExpired):
            continue
    return list(dict.fromkeys(dirs))


def find_machine_library(name, site_dirs, ldcache, inherited):
    """Where this machine has `name` (e.g. libnccl.so.2): (path, where) or (None, None)."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    roots += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    candidates = [(os.path.join(d, name), "LD_LIBRARY_PATH") for d in inherited]
    for r in filter(None, roots):
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            candidates.append((os.path.join(r, sub, name), r))
    if name in ldcache:
        candidates.append((ldcache[name], "ldconfig"))
    for d in site_dirs:
        for pattern in ("nvidia/*/lib/", "nvidia/*/*/lib/", "nvidia/lib/", "torch/lib/"):
            for hit in sorted(glob.glob(os.path.join(d, pattern, name))):
                candidates.append((hit, "Python package " + os.path.relpath(hit, d)))
    for path, where in candidates:
        if os.path.isfile(path):
            return os.path.realpath(path) if os.path.islink(path) else path, where
    return None, None


def probe_cuda(cudart_path):
    """Devices visible through this CUDA runtime, the driver version, and the runtime's reason when none."""
    result = {"devices": 0, "error": None, "driver_version": None, "runtime_version": None, "names": []}
    try:
        rt = ctypes.CDLL(cudart_path)
    except OSError as e:
        result["error"] = f"cannot load {cudart_path}: {e}"
        return result
    rt.cudaGetErrorName.restype = ctypes.c_char_p
    v = ctypes.c_int(0)
    if rt.cudaDriverGetVersion(ctypes.byref(v)) == 0:
        result["driver_version"] = v.value
    if rt.cudaRuntimeGetVersion(ctypes.byref(v)) == 0:
        result["runtime_version"] = v.value
    n = ctypes.c_int(0)
    err = rt.cudaGetDeviceCount(ctypes.byref(n))
    if err != 0:
        result["error"] = rt.cudaGetErrorName(err).decode()
        return result
    result["devices"] = n.value
    for i in range(n.value):  # cudaDeviceProp starts with char name[256]
        prop = ctypes.create_string_buffer(4096)
        if rt.cudaGetDeviceProperties(prop, i) == 0:
            result["names"].append(prop.raw[:256].split(b"\0")[0].decode(errors="replace"))
    return result


def nccl_version(path, env):
    """ncclGetVersion of that library, loaded in a child with the tests' loader path (NCCL needs libstdc++)."""
    code = ("import ctypes, sys\nv = ctypes.c_int(0)\n"
            "print(v.value if ctypes.CDLL(sys.argv[1]).ncclGetVersion(ctypes.byref(v)) == 0 else '')")
    try:
        out = subprocess.run([sys.executable, "-c", code, path], env=env, capture_output=True, text=True, timeout=60)
        v = int(out.stdout.strip())
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def probe_python(py):
    code = ("import json, importlib.util as u\n"
            "r = {m: u.find_spec(m) is not None for m in ('torch', 'numpy', 'h5py', 'balltree', 'einops',\n"
            "                                             'yaml', 'torch_geometric', 'torch_harmonics')}\n"
            "if r['torch']:\n"
            "    import torch\n"
            "    r.update(torch_version=torch.__version__, torch_cuda=torch.version.cuda,\n"
            "             cuda_available=torch.cuda.is_available())\n"
            "print(json.dumps(r))\n")
    try:
        out = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=180)
        info = json.loads(out.stdout.strip().splitlines()[-1])
        info["python"] = py
        return info
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def glibc_version():
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    except (ValueError, OSError, AttributeError):
        return platform.libc_ver()[1] or "unknown"


def version_tuple(text):
    return tuple(int(x) for x in re.findall(r"\d+", text or "0")[:2])


# ---------------------------------------------------------------------------------------------------------

class Runner:
    def __init__(self, args):
        self.args = args
        self.manifest = json.loads((BUNDLE / "manifest.json").read_text())
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = Log(self.out / "log.txt")
        # Scratch files (the benchmarks' inputs, 70 MB at N = 262,144) stay out of OUT, which comes back.
        self.scratch = Path(tempfile.mkdtemp(prefix="surrogate-gpu-bundle-"))
        self.t0 = time.monotonic()
        self.summary = {"bundle": {k: self.manifest.get(k) for k in ("created", "created_on", "git", "cuda", "labels")},
                        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                        "arguments": sys.argv[1:], "machine": {}, "loader": {}, "tests": [], "benchmarks": [],
                        "counts": {}, "problems": []}
        self.lock = threading.Lock()

    # -- output --------------------------------------------------------------------------------------------
    def elapsed(self):
        return time.monotonic() - self.t0

    def remaining(self):
        return None if not self.args.budget else self.args.budget - self.elapsed()

    def write_summary(self, final=False):
        with self.lock:
            tests = self.summary["tests"]
            counts = {s: sum(1 for t in tests if t["status"] == s) for s in ("passed", "failed", "skipped", "not_run")}
            counts["total"] = len(tests)
            self.summary["counts"] = counts
            self.summary["seconds"] = round(self.elapsed(), 1)
            self.summary["finished"] = final
            tmp = self.out / "summary.json.part"
            tmp.write_text(json.dumps(self.summary, indent=1) + "\n")
            tmp.replace(self.out / "summary.json")

    def problem(self, text):
        self.summary["problems"].append(text)
        self.log("PROBLEM: " + text)

    # -- the machine ---------------------------------------------------------------------------------------
    def setup(self):
        a, m, log = self.args, self.manifest, self.log
        log(f"surrogate GPU bundle {BUNDLE}")
        log(f"  built {m['created']} on {m['created_on']} from {m['git']['commit']}"
            f"{' (uncommitted changes)' if m['git'].get('dirty') else ''}; CUDA architectures "
            f"{m['cuda'].get('architectures')}; {len(m['tests'])} tests")
        machine = self.summary["machine"]
        machine.update(host=platform.node(), kernel=platform.release(), cpus=os.cpu_count(), glibc=glibc_version(),
                       glibc_required=m["glibc_required"], python=sys.version.split()[0])
        try:
            st = os.statvfs("/dev/shm")
            machine["dev_shm_mib"] = round(st.f_frsize * st.f_blocks / 2**20)
        except OSError:
            machine["dev_shm_mib"] = None
        log(f"machine: {machine['host']}, Linux {machine['kernel']}, {machine['cpus']} CPUs, glibc {machine['glibc']}"
            f" (bundle needs >= {m['glibc_required']}), /dev/shm {machine['dev_shm_mib']} MiB")
        if version_tuple(machine["glibc"]) < version_tuple(m["glibc_required"]):
            self.problem(f"this machine's glibc {machine['glibc']} is older than the {m['glibc_required']} the bundle "
                         "needs: its programs will not start")
        smi = shutil.which("nvidia-smi")
        if smi:
            q = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                               capture_output=True, text=True)
            machine["nvidia_smi"] = (q.stdout or q.stderr).strip()
            log(f"nvidia-smi: {machine['nvidia_smi']}")
        else:
            log("nvidia-smi: not on PATH")

        # Python(s): the benchmarks' PyTorch side, and the NCCL/cudart wheels.
        pythons = [a.python] if a.python else [sys.executable, shutil.which("python3"), shutil.which("python")]
        pythons = list(dict.fromkeys(p for p in pythons if p))
        self.python = None
        for py in pythons:
            info = probe_python(py)
            if info and info.get("torch"):
                self.python = info
                break
        if not self.python:
            self.python = {"python": pythons[0] if pythons else None, "torch": False}
        self.summary["python"] = self.python
        if self.python.get("torch"):
            py = self.python
            log(f"python: {py['python']}: torch {py['torch_version']} (CUDA {py['torch_cuda']}, available: "
                f"{py['cuda_available']}), numpy {py['numpy']}, h5py {py['h5py']}, balltree {py['balltree']}, "
                f"torch_geometric {py.get('torch_geometric')}, torch_harmonics {py.get('torch_harmonics')}")
        else:
            log(f"python: no PyTorch in {pythons}: the benchmarks run without their PyTorch side")

        # The loader: bundle libraries first, then the machine's CUDA runtime / NCCL / cuBLAS, then whatever
        # LD_LIBRARY_PATH the machine had (the driver's libcuda may be found only through it), then the
        # fallback copies of machine libraries this machine lacks.
        inherited = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
        ldcache = ldconfig_paths()
        site_dirs = python_site_dirs(pythons)
        machine_dirs, fallback_used, loader = [], [], self.summary["loader"]
        log(f"loader: bundle libraries {BUNDLE / 'lib'}")
        for name in m["machine_libraries"]:
            path, where = find_machine_library(name, site_dirs, ldcache, inherited)
            entry = {"path": path, "from": where, "needed_by": m.get("needed_by", {}).get(name, [])}
            if path:
                d = os.path.dirname(path)
                if d not in machine_dirs and d not in inherited:
                    machine_dirs.append(d)
                log(f"  {name}: {path} [{where}]")
            elif name in m["fallback"]:
                entry.update(path=str(BUNDLE / m["fallback"][name]), **{"from": "bundle fallback"})
                fallback_used.append(name)
                log(f"  {name}: not on this machine ({MACHINE_SEARCH_NOTE}); using the bundle's fallback copy")
            else:
                self.problem(f"{name} is not on this machine (searched {MACHINE_SEARCH_NOTE}) and too large to "
                             f"bundle: {', '.join(entry['needed_by']) or 'some programs'} will not start")
            loader[name] = entry
        driver = ldcache.get("libcuda.so.1") or next((os.path.join(d, "libcuda.so.1") for d in inherited
                                                      if os.path.exists(os.path.join(d, "libcuda.so.1"))), None)
        loader["libcuda.so.1"] = {"path": driver, "from": "driver"}
        log(f"  libcuda.so.1 (driver): {driver or 'not found (no NVIDIA driver: GPU tests skip)'}")
        ld_path = [str(BUNDLE / "lib")] + machine_dirs + inherited
        if fallback_used:
            ld_path.append(str(BUNDLE / "fallback"))
        self.ld_library_path = ":".join(ld_path)
        loader["LD_LIBRARY_PATH"] = self.ld_library_path

        cudart = loader.get("libcudart.so.13", {}).get("path") or next(
            (e["path"] for n, e in loader.items() if n.startswith("libcudart") and e.get("path")), None)
        self.cuda = probe_cuda(cudart) if cudart else {"devices": 0, "error": "no CUDA runtime"}
        machine["cuda"] = self.cuda
        log(f"CUDA: {self.cuda['devices']} device(s) {self.cuda.get('names') or ''}"
            f"{' (' + self.cuda['error'] + ')' if self.cuda.get('error') else ''}; driver API "
            f"{self.cuda.get('driver_version')}, runtime {self.cuda.get('runtime_version')}")

        # Open MPI from the bundle, relocated (OPAL_PREFIX and the install directories it derives, the
        # plugin path), on one node over shared memory, as root, oversubscribed, without ssh.
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = self.ld_library_path
        ompi = m.get("openmpi")
        if ompi:
            env.update({
                "OPAL_PREFIX": str(BUNDLE / ompi["prefix"]),
                "OPAL_BINDIR": str(BUNDLE / ompi["bindir"]),
                "OPAL_LIBDIR": str(BUNDLE / "lib"),
                "OPAL_PKGLIBDIR": str(BUNDLE / ompi["pkglibdir"]),
                "OPAL_PKGDATADIR": str(BUNDLE / ompi["pkgdatadir"]),
                "OPAL_DATADIR": str(BUNDLE / os.path.dirname(ompi["pkgdatadir"])),
                "OPAL_SYSCONFDIR": str(BUNDLE / ompi["sysconfdir"]),
                "OMPI_MCA_mca_base_component_path": str(BUNDLE / ompi["pkglibdir"]),
                "OMPI_MCA_mca_base_param_files": str(BUNDLE / ompi["sysconfdir"] / "openmpi-mca-params.conf"),
                "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,vader",
                "OMPI_MCA_btl_vader_single_copy_mechanism": "none",  # CMA is often refused in containers
                "OMPI_MCA_plm_rsh_agent": "",                        # one node: never ssh
                "OMPI_MCA_rmaps_base_oversubscribe": "1",
                "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            })
            env["PATH"] = str(BUNDLE / ompi["bindir"]) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
        pmix = m.get("pmix")
        if pmix:
            env["PMIX_INSTALL_PREFIX"] = str(BUNDLE / pmix["prefix"])
            if pmix.get("component_path"):
                env["PMIX_MCA_mca_base_component_path"] = str(BUNDLE / pmix["component_path"])
        for item in m.get("environment", []):
            k, _, v = item.partition("=")
            try:
                env[k] = self.resolve(v)
            except FileNotFoundError as e:
                self.problem(f"{k}: {e}")
                continue
            if k == "SURROGATE_TEST_DATA_DIR" and not Path(env[k]).is_dir():
                self.problem(f"{k}={env[k]} is not a directory: the tests that read golden data fail")
        self.env = env
        self.python_env = dict(os.environ)  # the benchmarks' Python: the machine's own libraries only
        nccl = loader.get("libnccl.so.2", {}).get("path")
        if nccl:
            loader["nccl_version"] = nccl_version(nccl, env)
            log(f"NCCL: {loader['nccl_version'] or 'version unknown (the library did not load)'}")

        # Every bundled program and library must find its libraries now.
        missing = self.check_libraries()
        if missing:
            for lib, users in sorted(missing.items()):
                self.problem(f"{lib} not found for {len(users)} file(s): {', '.join(users[:4])}")
        else:
            log("ldd: every bundled program and library finds its libraries")
        self.summary["missing_libraries"] = missing
        self.check_mpirun()
        self.check_programs()
        self.write_summary()

    def check_libraries(self):
        """{library: [bundle files]} of what `ldd` cannot find with the runner's loader path."""
        files = []
        for p in sorted(BUNDLE.rglob("*")):
            if p.is_file() and not p.is_symlink():
                with open(p, "rb") as f:
                    if f.read(4) == b"\x7fELF":
                        files.append(p)

        def check(p):
            out = subprocess.run(["ldd", str(p)], capture_output=True, text=True, env=self.env).stdout
            return p, re.findall(r"^\s*(\S+) => not found", out, re.M), re.findall(r"^\s*(\S+) => (/\S+)", out, re.M)

        missing, outside = {}, {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            for p, libs, found in pool.map(check, files):
                for lib in libs:
                    missing.setdefault(lib, []).append(str(p.relative_to(BUNDLE)))
                for lib, path in found:
                    if not path.startswith(str(BUNDLE) + "/"):
                        outside[lib] = path
        self.log(f"ldd: {len(files)} bundled programs and libraries checked; from the machine: "
                 + ", ".join(f"{k} ({v})" for k, v in sorted(outside.items())), echo=False)
        self.summary["loader"]["from_machine"] = outside
        return missing

    def check_mpirun(self):
        if not self.manifest.get("openmpi"):
            return
        mpiexec = str(BUNDLE / self.manifest["openmpi"]["bindir"] / "mpiexec")
        argv = [mpiexec, "-np", "3", "--allow-run-as-root", "--oversubscribe", "sh", "-c",
                "echo rank $OMPI_COMM_WORLD_RANK"]
        rc, output, timed_out, seconds = run_process(argv, self.env, str(self.scratch), 60)
        ranks = sorted(set(re.findall(r"^rank (\d+)$", output, re.M)))
        ok = rc == 0 and ranks == ["0", "1", "2"]
        self.summary["machine"]["mpirun_np3"] = ok
        self.log.block(f"$ {' '.join(argv)}\n{output}")
        if ok:
            self.log(f"mpirun: the bundle's mpiexec starts 3 ranks ({seconds:.1f} s)")
        else:
            self.problem(f"the bundle's mpiexec -np 3 failed (exit {rc}{', timeout' if timed_out else ''}): "
                         + " | ".join(output.strip().splitlines()[-6:]))

    def check_programs(self):
        """The machine's programs the tests call (cmake for the cmake -P tests) start with the bundle's
        loader path."""
        names = sorted({n for t in self.manifest["tests"] for a in t["command"]
                        for n in re.findall(r"@PATH:([^@]+)@", a)})
        for name in names:
            path = shutil.which(name, path=self.env.get("PATH"))
            if not path:
                self.problem(f"{name} is not on PATH: the tests that run it fail")
                continue
            rc, output, _, _ = run_process([path, "--version"], self.env, str(self.scratch), 60)
            first = (output.strip().splitlines() or [""])[0]
            if rc == 0:
                self.log(f"{name}: {path} ({first})")
            else:
                self.problem(f"{path} --version fails with the bundle's libraries (exit {rc}): {first}")

    # -- tests ---------------------------------------------------------------------------------------------
    def resolve(self, text):
        text = text.replace("@BUNDLE@", str(BUNDLE))
        if "@CHECKOUT@" in text:
            if not self.args.checkout:
                raise FileNotFoundError("the bundle reads tests/data from a checkout: pass --checkout DIR")
            text = text.replace("@CHECKOUT@", str(Path(self.args.checkout).resolve()))

        def program(match):
            found = shutil.which(match.group(1), path=self.env.get("PATH") if hasattr(self, "env") else None)
            if not found:
                raise FileNotFoundError(f"{match.group(1)} is not on PATH")
            return found
        return re.sub(r"@PATH:([^@]+)@", program, text)

    def selected_tests(self):
        a = self.args
        tests = self.manifest["tests"]
        labels = set(a.labels.split(",")) if a.labels else None
        chosen = set()
        for t in tests:
            if labels is not None and not labels & set(t["labels"]):
                continue
            if a.select and not re.search(a.select, t["name"]):
                continue
            if a.exclude and re.search(a.exclude, t["name"]):
                continue
            chosen.add(t["name"])
        while True:  # the fixtures' set-up and clean-up tests come along, and theirs
            needed = {f for t in tests if t["name"] in chosen for f in t["fixtures_required"]}
            more = {t["name"] for t in tests if set(t["fixtures_setup"] + t["fixtures_cleanup"]) & needed} - chosen
            if not more:
                return [t for t in tests if t["name"] in chosen]
            chosen |= more

    def run_tests(self):
        tests = self.selected_tests()
        log = self.log
        log(f"\n== tests: {len(tests)} (jobs {self.args.jobs}, timeout {self.args.timeout} s"
            f"{', budget %d s' % self.args.budget if self.args.budget else ''}) ==")
        by_fixture = {}
        for t in tests:
            for f in t["fixtures_setup"]:
                by_fixture.setdefault(f, []).append(t["name"])
        deps = {t["name"]: {s for f in t["fixtures_required"] for s in by_fixture.get(f, []) if s != t["name"]}
                for t in tests}
        for t in tests:  # clean-ups after every test of their fixture
            for f in t["fixtures_cleanup"]:
                deps[t["name"]] |= {u["name"] for u in tests if f in u["fixtures_required"] and u["name"] != t["name"]}
        status = {}
        pending = list(tests)
        running = {}
        slots = max(1, self.args.jobs)
        cond = threading.Condition()
        results = []

        def worker(t, timeout, cut_by_budget):
            result = self.run_one(t, timeout, cut_by_budget)
            with cond:
                status[t["name"]] = result["status"]
                results.append(result)
                del running[t["name"]]
                cond.notify_all()

        with cond:
            while pending or running:
                started = False
                for t in list(pending):
                    if any(d not in status for d in deps[t["name"]]):
                        continue
                    failed = [d for d in deps[t["name"]] if status[d] != "passed" and
                              any(d in by_fixture.get(f, []) for f in t["fixtures_required"])]
                    if failed:
                        pending.remove(t)
                        self.record(t, "not_run", f"fixture set-up failed: {', '.join(sorted(failed))}")
                        status[t["name"]] = "not_run"
                        started = True
                        continue
                    remaining = self.remaining()
                    if remaining is not None and remaining <= 1:
                        pending.remove(t)
                        self.record(t, "not_run", "time budget exhausted")
                        status[t["name"]] = "not_run"
                        started = True
                        continue
                    need = min(slots, int(t.get("processors") or 1))
                    gpu_busy = "gpu" in t["labels"] and any("gpu" in r["labels"] for r in running.values())
                    used = sum(min(slots, int(r.get("processors") or 1)) for r in running.values())
                    if running and (used + need > slots or gpu_busy):
                        continue
                    timeout = float(t.get("timeout") or self.args.timeout)
                    timeout = min(timeout, self.args.timeout) if self.args.timeout else timeout
                    cut = remaining is not None and remaining < timeout
                    if cut:
                        timeout = remaining
                    pending.remove(t)
                    running[t["name"]] = t
                    threading.Thread(target=worker, args=(t, timeout, cut), daemon=True).start()
                    started = True
                if not started:
                    cond.wait(timeout=1)
        return results

    def record(self, t, status, reason, seconds=0.0, returncode=None, output=None, command=None):
        result = {"name": t["name"], "labels": t["labels"], "status": status, "reason": reason,
                  "seconds": round(seconds, 2), "returncode": returncode}
        if command:
            result["command"] = command
        if status == "failed" and output:
            result["output_tail"] = "\n".join(output.rstrip().splitlines()[-40:])
        with self.lock:
            self.summary["tests"].append(result)
        mark = {"passed": "passed ", "failed": "FAILED ", "skipped": "skipped", "not_run": "NOT RUN"}[status]
        self.log(f"{mark} {seconds:7.2f} s  {t['name']}{'  (' + reason + ')' if reason and status != 'passed' else ''}")
        self.write_summary()
        return result

    def run_one(self, t, timeout, cut_by_budget):
        try:
            argv = [self.resolve(x) for x in t["command"]]
            env = dict(self.env)
            for item in t["environment"]:
                k, _, v = item.partition("=")
                env[k] = self.resolve(v)
            cwd = self.resolve(t["working_directory"]) if t.get("working_directory") else str(self.scratch)
        except FileNotFoundError as e:
            return self.record(t, "failed", str(e))
        os.makedirs(cwd, exist_ok=True)
        rc, output, timed_out, seconds = run_process(argv, env, cwd, timeout)
        self.log.block(f"\n---- {t['name']} ----\n$ cd {cwd} && {' '.join(argv)}\n{output}"
                       f"---- exit {rc}{' (timeout)' if timed_out else ''}, {seconds:.2f} s\n")
        if timed_out and cut_by_budget:
            return self.record(t, "not_run", "stopped: time budget exhausted", seconds, rc, output, argv)
        st, reason = classify(t, rc, output, timed_out, timeout)
        return self.record(t, st, reason, seconds, rc, output, argv)

    # -- benchmarks ----------------------------------------------------------------------------------------
    def bench(self, name, argv, env, timeout, cwd=None):
        if bench_family(name) not in self.args.benchmarks:
            return
        remaining = self.remaining()
        entry = {"name": name, "command": argv}
        if remaining is not None and remaining <= 5:
            entry.update(status="not_run", reason="time budget exhausted")
        else:
            limit = timeout if remaining is None else min(timeout, remaining)
            rc, output, timed_out, seconds = run_process(argv, env, cwd or str(self.scratch), limit)
            self.log.block(f"\n---- benchmark {name} ----\n$ {' '.join(argv)}\n{output}"
                           f"---- exit {rc}, {seconds:.1f} s\n")
            records = []
            for line in output.splitlines():
                line = line.strip()
                if line.startswith("{") and line.endswith("}"):
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        pass
            table = [l for l in output.splitlines() if is_table_row(l)]
            # A side-by-side script exits 0 even when a side failed (its row then holds nan): a benchmark
            # passes only with results and no nan among them.
            if timed_out:
                reason = "timeout"
            elif rc != 0:
                reason = f"exit status {rc}"
            elif not records and not table:
                reason = "no results"
            elif any(re.search(r"\bnan\b", row) for row in table):
                reason = "a side failed (nan in its table)"
            else:
                reason = ""
            entry.update(status="failed" if reason else "passed", returncode=rc, seconds=round(seconds, 1),
                         records=records, table=table, reason=reason)
            if reason:
                entry["output_tail"] = "\n".join(output.rstrip().splitlines()[-30:])
        self.summary["benchmarks"].append(entry)
        self.log(f"{entry['status']:8} {entry.get('seconds', 0):7.1f} s  benchmark {name}"
                 f"{'  (' + entry['reason'] + ')' if entry.get('reason') else ''}")
        for line in entry.get("table", []):
            self.log("    " + line)
        self.write_summary()

    def skip_bench(self, name, reason):
        if bench_family(name) not in self.args.benchmarks:
            return
        self.summary["benchmarks"].append({"name": name, "status": "skipped", "reason": reason})
        self.log(f"skipped  benchmark {name}  ({reason})")
        self.write_summary()

    def run_benchmarks(self):
        a, m = self.args, self.manifest
        self.log("\n== benchmarks ==")
        exe = {Path(b).name: str(BUNDLE / b) for b in m.get("benchmarks", [])}
        if not exe:
            self.log("none in this bundle")
            return
        names = ["flare_machine", "flare", "hept", "sequoia", "bsa", "sphere", "erwin"]
        if not self.cuda.get("devices"):
            for n in names:
                self.skip_bench(n, f"no CUDA device visible ({self.cuda.get('error')})")
            return
        # Wrappers with the bundle's loader path, for the Python scripts (which run with the machine's own
        # libraries and call the programs of --build DIR/benchmarks/gpu).
        wrap = Path(tempfile.mkdtemp(prefix="bench-", dir=str(self.scratch)))
        (wrap / "benchmarks" / "gpu").mkdir(parents=True)
        for name, path in exe.items():
            w = wrap / "benchmarks" / "gpu" / name
            w.write_text(f"#!/bin/sh\nLD_LIBRARY_PATH='{self.ld_library_path}' exec '{path}' \"$@\"\n")
            w.chmod(0o755)
        py = self.python
        torch_ok = py.get("torch") and py.get("cuda_available")
        src = BUNDLE / "src" / "benchmarks" / "gpu"
        # The C API driver of the Sequoia and spherical side-by-side scripts (capi_bench.py: the bundle's
        # libsurrogate_coupling opened in this Python), with the tests' loader path and Open MPI.
        coupling = sorted(BUNDLE.glob("lib/libsurrogate_coupling.so*"))
        if coupling and py.get("python"):
            exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.env.items() if os.environ.get(k) != v)
            w = wrap / "benchmarks" / "gpu" / "capi_bench"
            argv = " ".join(shlex.quote(str(x)) for x in (py["python"], src / "capi_bench.py", coupling[0]))
            w.write_text(f"#!/bin/sh\n{exports}exec {argv} \"$@\"\n")
            w.chmod(0o755)

        def lacking(*modules, capi=False):
            """What the Python (or the bundle) lacks for a side-by-side script with the official code."""
            why = [x for x in modules if not py.get(x)]
            if py.get("torch") and not py.get("cuda_available"):
                why.append("torch CUDA")
            if capi and not coupling:
                why.append("lib/libsurrogate_coupling.so in the bundle")
            return ", ".join(why)

        def official(name, script, argv, why):
            if why:
                self.skip_bench(name, f"the Python or the bundle lacks {why}")
            else:
                self.bench(name, [py["python"], str(src / script), "--build", str(wrap), *argv], self.python_env, 900)
        flare = exe.get("bench_flare_gpu") if "flare" in a.benchmarks else None
        if flare:
            self.bench("flare_machine", [flare, "--machine"], self.env, 300)
            if exe.get("mlp_gpu_bench"):  # FLARE's dense layers alone, each precision's share of its limit
                self.bench("flare_mlp", [exe["mlp_gpu_bench"]], self.env, 300)
            for graph in ("off", "on"):  # the launch cost a kept plan's CUDA graph removes, where it matters
                self.bench(f"flare_launches N=65536 graph {graph}",
                           [flare, "--points", "65536", "--latents", "64", "--repeats", "20", "--json", "--graph", graph],
                           self.env, 120)
            if torch_ok:
                compiled = ["--compile-runs", *a.flare_compile] if a.flare_compile else ["--no-compile"]
                self.bench("flare", [py["python"], str(src / "flare_gpu_vs_pytorch.py"), "--build", str(wrap),
                                     "--points", *map(str, a.points), "--latents", *map(str, a.latents), *compiled],
                           self.python_env, 900)
            else:
                why = "no PyTorch with CUDA" if not py.get("torch") else "torch.cuda.is_available() is False"
                self.log(f"  FLARE: {why}: surrogate's side only")
                for n in a.points:
                    for mm in a.latents:
                        for extra in ([], ["--precision", "bf16"]):
                            argv = [flare, "--points", str(n), "--latents", str(mm), "--json", *extra]
                            self.bench(f"flare N={n} M={mm} {' '.join(extra) or 'fp32'}", argv, self.env, 300)
        else:
            self.skip_bench("flare", "bench_flare_gpu is not in the bundle")
        # HEPT: the shipped checkpoint of the checkout, device against CPU forward on a synthetic event, and
        # against the official example/ Transformer on this GPU when --hept-official names its checkout.
        hept = exe.get("hept_gpu_bench")
        model = Path(a.checkout or ".") / "share" / "models" / "hept" / "model.h5"
        if not hept:
            self.skip_bench("hept", "hept_gpu_bench is not in the bundle")
        elif not model.is_file():
            self.skip_bench("hept", f"no HEPT model at {model} (--checkout)")
        else:
            for n in a.hept_sizes:
                self.bench(f"hept N={n}", [hept, str(model), str(n), "5", "0"], self.env, 600)
            for precision in ("tf32", "bf16"):  # the dense layers on the tensor cores, at the first size
                self.bench(f"hept N={a.hept_sizes[0]} {precision}",
                           [hept, str(model), str(a.hept_sizes[0]), "5", "0", "0", precision], self.env, 600)
            if a.hept_official and torch_ok:
                self.bench("hept official", [py["python"], str(src / "hept_gpu_vs_pytorch.py"), "--build", str(wrap),
                                             "--official", a.hept_official, "--models", str(model.parent),
                                             "--sizes", *map(str, a.hept_sizes)], self.python_env, 900)
            elif a.hept_official:
                self.skip_bench("hept official", "no PyTorch with CUDA")
        # Sequoia: the checkout's example models, device against CPU forward on one synthetic sample.
        sequoia = exe.get("sequoia_gpu_bench")
        models = [Path(a.checkout or ".") / "share" / "models" / "sequoia" / f"{k}.h5" for k in ("seg", "cls")]
        if not sequoia:
            self.skip_bench("sequoia", "sequoia_gpu_bench is not in the bundle")
        elif not all(m.is_file() for m in models):
            self.skip_bench("sequoia", f"no Sequoia models at {models[0].parent} (--checkout)")
        else:
            for model in models:
                for n in a.sequoia_sizes:
                    self.bench(f"sequoia {model.stem} N={n}", [sequoia, str(model), str(n), "5", "0"], self.env, 600)
            # gpu_kept_ms is one CUDA graph per kept plan; kernel by kernel for the launch cost it removes.
            n = a.sequoia_sizes[0]
            for precision in ("tf32", "bf16"):  # the dense layers on the tensor cores
                self.bench(f"sequoia {models[0].stem} N={n} {precision}",
                           [sequoia, str(models[0]), str(n), "5", "0", "0", precision], self.env, 600)
            self.bench(f"sequoia {models[0].stem} N={n} graphs off", [sequoia, str(models[0]), str(n), "5", "0"],
                       {**self.env, "SURROGATE_CUDA_GRAPHS": "0"}, 600)
        # Against the official HySonLab/HierAttention model on this GPU (--sequoia-official): batches of
        # official-size samples, surrogate through the C API; the cls model reads its configuration with PyYAML.
        if a.sequoia_official:
            official("sequoia official", "sequoia_gpu_vs_pytorch.py",
                     ["--official", a.sequoia_official, "--sizes", *map(str, a.official_sizes),
                      "--models", "seg", *(["cls"] if py.get("yaml") else [])],
                     lacking("torch", "numpy", "h5py", "torch_geometric", capi=True))
        # BSA: the device forward against the CPU forward, model and inputs written by the script (numpy,
        # h5py and torch: the random weights of benchmarks/bsa_cpu_vs_pytorch.py's configuration).
        bsa = exe.get("bsa_gpu_bench")
        if not bsa:
            self.skip_bench("bsa", "bsa_gpu_bench is not in the bundle")
        elif not (py.get("torch") and py.get("numpy") and py.get("h5py")):
            self.skip_bench("bsa", "the Python found has no torch, numpy or h5py to write the model")
        else:
            self.bench("bsa", [py["python"], str(src / "bsa_gpu_vs_cpu.py"), "--build", str(wrap),
                               "--sizes", *map(str, a.bsa_sizes)], self.python_env, 900)
            self.bench("bsa bf16", [py["python"], str(src / "bsa_gpu_vs_cpu.py"), "--build", str(wrap),
                                    "--sizes", str(a.bsa_sizes[-1]), "--precision", "bf16"], self.python_env, 600)
        # Against the official BSA Transformer on this GPU (--bsa-official; it builds its trees with balltree-erwin).
        if a.bsa_official and bsa:
            official("bsa official", "bsa_gpu_vs_pytorch.py",
                     ["--official", a.bsa_official, "--sizes", *map(str, a.official_sizes)],
                     lacking("torch", "numpy", "h5py", "einops", "balltree"))
        # The ball-tree attention kernels one by one at the shapes of a BSA sparse layer.
        kernels = exe.get("ball_kernels_gpu_bench")
        if kernels:
            for n in a.bsa_sizes:
                self.bench(f"bsa kernels N={n}", [kernels, str(n), "5", "0"], self.env, 300)
        # Spherical: the checkout's reduced zoo model (neighbourhood attention, embed_dim 128) moved to larger grids.
        sphere = exe.get("sphere_gpu_bench")
        model = (Path(a.checkout or ".") / "tests" / "data" / "sphere" / "models" / "zoo_s2ntransformer_e128_reduced"
                 / "model.h5")
        if not sphere:
            self.skip_bench("sphere", "sphere_gpu_bench is not in the bundle")
        elif not model.is_file():
            self.skip_bench("sphere", f"no sphere model at {model} (--checkout)")
        else:
            for grid in a.sphere_grids:
                nlat, nlon = grid.lower().split("x")
                self.bench(f"sphere {grid}", [sphere, str(model), "5", nlat, nlon, "0"], self.env, 600)
            # The kept bands' forward is one CUDA graph; kernel by kernel for the launch cost it removes.
            nlat, nlon = a.sphere_grids[0].lower().split("x")
            for precision in ("tf32", "bf16"):  # the dense layers on the tensor cores
                self.bench(f"sphere {a.sphere_grids[0]} {precision}",
                           [sphere, str(model), "5", nlat, nlon, "0", precision], self.env, 600)
            # A global-attention model (embed_dim 16, one head) moved to 91 x 180 (its internal grid 46 x 90:
            # 4,140 keys a query): the global attention on the tensor cores in tf32 / bf16.
            glob = model.parent.parent / "st_global_instance_spectral" / "model.h5"
            if glob.is_file():
                for precision in ("fp32", "tf32", "bf16"):
                    self.bench(f"sphere global 91x180 {precision}",
                               [sphere, str(glob), "5", "91", "180", "0", precision], self.env, 600)
            self.bench(f"sphere {a.sphere_grids[0]} graphs off", [sphere, str(model), "5", nlat, nlon, "0"],
                       {**self.env, "SURROGATE_CUDA_GRAPHS": "0"}, 600)
        # Against torch-harmonics' SphericalTransformer and NeighborhoodAttentionS2 on this GPU, when the Python
        # has torch-harmonics or --sphere-official names a copy of it; surrogate through the C API.
        if a.sphere_official or py.get("torch_harmonics"):
            official("sphere official", "sphere_gpu_vs_pytorch.py",
                     ["--grids", *a.sphere_grids] + (["--official", a.sphere_official] if a.sphere_official else []),
                     lacking("torch", "numpy", "h5py", capi=True))
        erwin = exe.get("erwin_gpu_bench")
        if "erwin" not in a.benchmarks:
            return
        # The ball trees of a new point set (Erwin's and BSA's plans), the host's threads against the device.
        trees = exe.get("ball_tree_gpu_bench")
        if trees:
            for n in (*a.erwin_sizes, 1048576):
                self.bench(f"erwin trees N={n}", [trees, str(n), "5", "0"], self.env, 300)
        if not erwin:
            self.skip_bench("erwin", "erwin_gpu_bench is not in the bundle")
            return
        official = ["--official", a.erwin_official] if a.erwin_official else []
        compared = bool(torch_ok and py.get("numpy") and py.get("h5py") and (py.get("balltree") or official))
        if compared:
            self.bench("erwin", [py["python"], str(src / "erwin_gpu_vs_pytorch.py"), "--build", str(wrap),
                                 "--sizes", *map(str, a.erwin_sizes), *official], self.python_env, 900)
        else:
            lacking = [x for x in ("torch", "numpy", "h5py") if not py.get(x)]
            if not py.get("balltree") and not official:
                lacking.append("balltree (or --erwin-official DIR)")
            if py.get("torch") and not py.get("cuda_available"):
                lacking.append("torch CUDA")
            self.log(f"  Erwin: PyTorch side needs {', '.join(lacking)}: surrogate's side only, on the bundled model")
        model, why = erwin_bench_model(m, py, self.scratch, self.python_env)
        if why:
            self.skip_bench("erwin", why)
            return
        # The benchmark model: fp32 at every size unless compared above; tf32 and bf16 (the dense layers and
        # the ball attention on the tensor cores) and kernel by kernel at the first size.
        for n in a.erwin_sizes:
            first = n == a.erwin_sizes[0]
            if compared and not first:
                continue
            data = Path(tempfile.mkdtemp(prefix=f"erwin-n{n}-", dir=str(self.scratch)))
            write_erwin_inputs(data, n, py, self.python_env)
            if not compared:
                self.bench(f"erwin N={n}", [erwin, model, str(data), "5", "8", "0"], self.env, 600)
            if first:
                for precision in ("tf32", "bf16"):
                    self.bench(f"erwin N={n} {precision}", [erwin, model, str(data), "5", "8", "0", precision],
                               self.env, 600)
                # The kept geometry's forward is one CUDA graph; kernel by kernel for the launch cost it removes.
                self.bench(f"erwin N={n} graphs off", [erwin, model, str(data), "5", "8", "0"],
                           {**self.env, "SURROGATE_CUDA_GRAPHS": "0"}, 600)
            shutil.rmtree(data, ignore_errors=True)
        # The registered model in the ShapeNet-Car wrapper as a solver calls it (the C API, host arrays, the
        # positions its only input, its kNN graph by rule): the whole call on a new point set and a predict on
        # a kept plan, on the CPU's threads and on the device, at the first two sizes.
        capi = wrap / "benchmarks" / "gpu" / "capi_bench"
        if not (capi.exists() and py.get("numpy") and py.get("h5py")):
            self.skip_bench("erwin wrapped", "the Python lacks numpy or h5py, or the bundle the C API library")
            return
        wrapped = self.scratch / "erwin_shapenet_wrapped.h5"
        if not write_wrapped_erwin_model(model, wrapped, py, self.python_env):
            self.skip_bench("erwin wrapped", "the wrapped model could not be written")
            return
        for n in a.erwin_sizes[:2]:
            data = Path(tempfile.mkdtemp(prefix=f"erwin-wrapped-n{n}-", dir=str(self.scratch)))
            write_erwin_inputs(data, n, py, self.python_env)
            for device in ("cpu", "cuda"):
                self.bench(f"erwin wrapped N={n} {device}", [str(capi), str(wrapped), str(data), "3", device],
                           self.python_env, 600)
            shutil.rmtree(data, ignore_errors=True)

    def run_exec(self, command):
        """--exec: one shell command with the tests' loader path and Open MPI (e.g. ncu on a benchmark);
        $BUNDLE is the unpacked bundle (the benchmarks: $BUNDLE/build/benchmarks/gpu)."""
        env = {**self.env, "BUNDLE": str(BUNDLE)}
        limit = self.args.budget or self.args.timeout
        self.log(f"\n== exec ==\n$ {command}")
        rc, output, timed_out, seconds = run_process(["bash", "-c", command], env, os.getcwd(), limit)
        self.log(output.rstrip())
        status = "timed out" if timed_out else f"exit {rc}"
        self.log(f"exec: {status} after {seconds:.1f} s")
        self.summary["exec"] = {"command": command, "returncode": rc, "timed_out": timed_out, "seconds": seconds,
                                "tail": output.splitlines()[-40:]}
        self.summary["result"] = "ok" if rc == 0 and not timed_out else "failures"
        self.write_summary(final=True)
        return 0 if self.summary["result"] == "ok" else 1

    # -- all -----------------------------------------------------------------------------------------------
    def main(self):
        try:
            return self.run()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def run(self):
        a = self.args
        if a.list:
            for t in self.selected_tests():
                print(f"{t['name']}  [{';'.join(t['labels'])}]")
            return 0
        self.setup()
        if a.check:
            self.summary["result"] = "ok" if not self.summary["problems"] else "problems"
            self.write_summary(final=True)
            self.log(f"check: {len(self.summary['problems'])} problem(s); {self.elapsed():.0f} s")
            return 0 if not self.summary["problems"] else 1
        if a.exec:
            return self.run_exec(a.exec)
        if not a.bench_only:
            self.run_tests()
        if not a.tests_only:
            self.run_benchmarks()
        c = self.summary["counts"]
        self.log(f"\n== {c.get('passed', 0)} passed, {c.get('failed', 0)} failed, {c.get('skipped', 0)} skipped, "
                 f"{c.get('not_run', 0)} not run of {c.get('total', 0)} tests; benchmarks: "
                 + (", ".join(f"{b['name']} {b['status']}" for b in self.summary["benchmarks"]) or "none")
                 + f"; {self.elapsed():.0f} s ==")
        for p in self.summary["problems"]:
            self.log("problem: " + p)
        self.log(f"log: {self.out / 'log.txt'}, summary: {self.out / 'summary.json'}")
        bench_failed = [b["name"] for b in self.summary["benchmarks"] if b["status"] in ("failed", "not_run")]
        ok = not c.get("failed") and not c.get("not_run") and not bench_failed
        self.summary["result"] = "ok" if ok else "failures"
        self.write_summary(final=True)
        return 0 if self.summary["result"] == "ok" else 1


def write_erwin_bench_model(target, python, env, src_root):
    """The Erwin benchmark's model (benchmarks/erwin_cpu_vs_pytorch.py's ShapeNet-Car configuration, random
    weights drawn with seed 0) written to `target` by `python`, which needs torch, numpy and h5py; `src_root`
    holds benchmarks/ and share/python/ (a checkout, or a bundle's src/). None when written, else why not."""
    code = ("import sys, numpy as np\n"
            "root = sys.argv[1]; sys.path[:0] = [root + '/benchmarks', root + '/share/python']\n"
            "import erwin_cpu_vs_pytorch as cpu_bench, side_by_side as sbs\n"
            "from surrogate_ref.erwin import expected_state_shapes\n"
            "state = sbs.random_state(expected_state_shapes(dict(cpu_bench.CONFIG, variant='erwin')),"
            " np.random.default_rng(0))\n"
            "cpu_bench.write_model(sys.argv[2], state)\n")
    try:
        out = subprocess.run([python, "-c", code, str(src_root), str(target)], env=env, capture_output=True,
                             text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if out.returncode != 0:
        return out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit status {out.returncode}"
    return None


def erwin_bench_model(manifest, py, scratch, env):
    """The model of erwin_gpu_bench: the bundle's (packed with --erwin-model), else written into `scratch`
    by the machine's Python. (path, None), or (None, why there is none)."""
    if manifest.get("erwin_bench_model"):
        return str(BUNDLE / manifest["erwin_bench_model"]), None
    lacking = [m for m in ("torch", "numpy", "h5py") if not py.get(m)]
    if lacking or not py.get("python"):
        return None, ("the bundle has no Erwin benchmark model (pack.py --erwin-model) and the Python lacks "
                      + ", ".join(lacking or ["python"]) + " to write one")
    target = Path(scratch) / "erwin_shapenet.h5"
    why = write_erwin_bench_model(target, py["python"], env, BUNDLE / "src")
    return (None, f"the Erwin benchmark model could not be written: {why}") if why else (str(target), None)


def write_wrapped_erwin_model(source, target, py, env):
    """The Erwin benchmark model `source` inside the ShapeNet-Car wrapper, written to `target`: c_in / 2
    Fourier frequencies and pred_head with seeded random weights, and the kNN 8 graph rule (the registered
    model builds its graph); with the machine's numpy and h5py. False when that fails."""
    code = ("import sys, shutil, h5py, numpy as np\n"
            "shutil.copyfile(sys.argv[1], sys.argv[2]); rng = np.random.default_rng(2)\n"
            "with h5py.File(sys.argv[2], 'r+') as f:\n"
            "    c = f['config'].attrs\n"
            "    d, cin, D = int(c['dimensionality']), int(c['c_in']), int(np.asarray(c['c_hidden'])[0])\n"
            "    c['wrapper'] = 'shapenet_car'; c['graph'] = 'knn'; c['graph_k'] = np.int64(8)\n"
            "    shapes = {'pos_enc.linear.weight': (cin // 2, d), 'pred_head.0.weight': (D, D),\n"
            "              'pred_head.0.bias': (D,), 'pred_head.2.weight': (1, D), 'pred_head.2.bias': (1,)}\n"
            "    for k, s in shapes.items():\n"
            "        f['weights'].create_dataset(k, data=(rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32))\n")
    return subprocess.run([py["python"], "-c", code, str(source), str(target)], env=env).returncode == 0


def write_erwin_inputs(directory, n, py, env):
    """positions.f32 (n x 3, unit cube) and features.f32 (n x 64, normal), raw float32, as the Erwin
    side-by-side script writes them; with the machine's numpy when there is one, else the standard library."""
    code = ("import sys, numpy as np\n"
            "d, n = sys.argv[1], int(sys.argv[2]); rng = np.random.default_rng(0)\n"
            "rng.random((n, 3)).astype(np.float32).tofile(d + '/positions.f32')\n"
            "rng.standard_normal((n, 64)).astype(np.float32).tofile(d + '/features.f32')\n")
    if py.get("numpy") and py.get("python"):
        if subprocess.run([py["python"], "-c", code, str(directory), str(n)], env=env).returncode == 0:
            return
    import array
    import random
    rng = random.Random(0)
    with open(directory / "positions.f32", "wb") as f:
        array.array("f", (rng.random() for _ in range(3 * n))).tofile(f)
    with open(directory / "features.f32", "wb") as f:
        array.array("f", (rng.gauss(0.0, 1.0) for _ in range(64 * n))).tofile(f)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="output folder (log.txt, summary.json)")
    ap.add_argument("--labels", help="only tests with one of these ctest labels (comma-separated), e.g. gpu")
    ap.add_argument("--select", help="only tests whose name matches this regular expression")
    ap.add_argument("--exclude", help="leave out tests whose name matches this regular expression")
    ap.add_argument("--tests-only", action="store_true", help="no benchmarks")
    ap.add_argument("--bench-only", action="store_true", help="no tests")
    ap.add_argument("--list", action="store_true", help="print the selected tests and exit")
    ap.add_argument("--check", action="store_true", help="only check the machine (glibc, libraries, devices, "
                    "mpirun, cmake) and exit: 0 without problems")
    ap.add_argument("--exec", metavar="COMMAND", help="after the machine's set-up, run only this shell command "
                    "with the tests' loader path and Open MPI ($BUNDLE: the unpacked bundle), e.g. ncu on a "
                    "benchmark; its time limit is --budget, else --timeout")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per test at most (default 300)")
    ap.add_argument("--budget", type=float, default=0, help="stop starting tests and benchmarks after this many "
                    "seconds and cut running ones (0: no limit)")
    ap.add_argument("--jobs", type=int, default=1, help="tests at once (weighted by their ranks; at most one "
                    "test labelled gpu at a time)")
    ap.add_argument("--python", help="the Python with PyTorch for the benchmarks (default: this one, python3, python)")
    ap.add_argument("--points", type=int, nargs="+", default=[1048576], help="FLARE benchmark point counts")
    ap.add_argument("--latents", type=int, nargs="+", default=[64, 256], help="FLARE benchmark latent counts")
    ap.add_argument("--flare-compile", nargs="*", choices=["bf16", "tf32"], default=["bf16", "tf32"],
                    help="FLARE's torch.compile runs (about a minute each to compile): default both, bf16 "
                    "alone for the peer, none to leave them out")
    ap.add_argument("--erwin-sizes", type=int, nargs="+", default=[16384, 65536, 262144])
    ap.add_argument("--hept-sizes", type=int, nargs="+", default=[60000, 240000],
                    help="HEPT benchmark hits (hept_gpu_bench, the checkout's share/models/hept/model.h5)")
    ap.add_argument("--sequoia-sizes", type=int, nargs="+", default=[65536, 262144],
                    help="Sequoia benchmark points (sequoia_gpu_bench, the checkout's share/models/sequoia/*.h5)")
    ap.add_argument("--checkout", help="a checkout of the bundle's commit, for a bundle packed with "
                    "--test-data-from-checkout (its tests/data)")
    ap.add_argument("--bsa-sizes", type=int, nargs="+", default=[16384, 65536],
                    help="BSA benchmark points (bsa_gpu_vs_cpu.py: sparse and ball attention)")
    ap.add_argument("--sphere-grids", nargs="+", default=["241x480", "721x1440"],
                    help="SphericalTransformer benchmark grids, NLATxNLON (sphere_gpu_bench; 721x1440 is ERA5's "
                    "0.25 degrees)")
    ap.add_argument("--benchmarks", nargs="+", choices=BENCH_FAMILIES, default=list(BENCH_FAMILIES),
                    help="only these families' benchmarks (default: all), e.g. --benchmarks hept bsa when device "
                    "time is short")
    ap.add_argument("--erwin-official", help="directory of the official Erwin code (erwin.py) for the PyTorch side")
    ap.add_argument("--hept-official", help="a checkout of Graph-COM/HEPT (or a folder holding a copy of its "
                    "example/) for the PyTorch side of the HEPT benchmark (hept_gpu_vs_pytorch.py; needs "
                    "torch_geometric and einops)")
    ap.add_argument("--sequoia-official", help="a checkout of HySonLab/HierAttention (its point_cloud/): Sequoia "
                    "against the official model on the GPU (sequoia_gpu_vs_pytorch.py; needs torch_geometric, and "
                    "PyYAML for the cls model)")
    ap.add_argument("--bsa-official", help="the folder of the official BSA transformer.py and "
                    "native_sparse_attention.py: BSA against it on the GPU (bsa_gpu_vs_pytorch.py; needs einops and "
                    "balltree-erwin)")
    ap.add_argument("--sphere-official", help="a folder torch-harmonics is installed in (pip install --target, "
                    "built for the machine's torch) for sphere_gpu_vs_pytorch.py, which also runs, without it, when "
                    "the Python has torch_harmonics")
    ap.add_argument("--official-sizes", type=int, nargs="+", default=[100000, 1000000],
                    help="points of the Sequoia and BSA runs against the official code (the sphere's: "
                    "--sphere-grids)")
    args = ap.parse_args(argv)
    for grid in args.sphere_grids:
        if not re.fullmatch(r"[1-9][0-9]*x[1-9][0-9]*", grid.lower()):
            ap.error(f"--sphere-grids: {grid!r} is not NLATxNLON (e.g. 241x480)")
    if args.tests_only and args.bench_only:
        ap.error("--tests-only and --bench-only exclude each other")
    # The benchmarks run in a scratch folder: the official code's folders are made absolute here.
    for name, files in (("erwin_official", ("erwin_official.py", "erwin.py")),
                        ("hept_official", ("example/transformer.py", "transformer.py")),
                        ("sequoia_official", ("point_cloud/classification/model/TreeTransformerCls.py",)),
                        ("bsa_official", ("transformer.py",)),
                        ("sphere_official", ("torch_harmonics/__init__.py",))):
        folder = getattr(args, name)
        if folder is None:
            continue
        folder = Path(folder).resolve()
        if not any((folder / f).is_file() for f in files):
            ap.error(f"--{name.replace('_', '-')}: none of {', '.join(files)} in {folder}")
        setattr(args, name, str(folder))
    return args


if __name__ == "__main__":
    sys.exit(Runner(parse_args()).main())
