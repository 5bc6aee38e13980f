#!/usr/bin/env python3
"""Packs a CUDA build of surrogate into one relocatable archive for a bare GPU machine (share/tools/gpu-bundle
builds, then calls this; share/docs/cuda.md, "First run on a GPU machine").

    pack.py --build BUILD --source SOURCE --output ARCHIVE [--labels gpu,cuda] [--select REGEX] [--exclude REGEX]
            [--compression xz|gz|none] [--ctest-json FILE] [--test-data-from-checkout] [--erwin-model]

What goes in (bundle root `surrogate-gpu-bundle/`):
  manifest.json  the selected ctest tests (every test with one of --labels, plus the fixture set-ups they
                 need) with their commands, environment, working directory, labels and pass/skip/fail rules,
                 taken from `ctest --show-only=json-v1`, the build and source paths rewritten to @BUNDLE@/build
                 and @BUNDLE@/src, mpiexec to the bundled one, other absolute programs (cmake) to @PATH:name@
  build/         the build-tree files those commands name (executables, preload libraries, directories),
                 the `surrogate` command and the GPU benchmarks (benchmarks/gpu/*)
  src/           the source-tree files the commands name, the compiled-in test data (tests/data, HDF5 only:
                 the C++ tests read nothing else; the tests take it from $SURROGATE_TEST_DATA_DIR) and the
                 benchmark scripts with the local modules they import
  lib/           the `ldd` closure of all of the above, Open MPI and its plugins, except the C library
                 (package libc6: the machine's own) and the CUDA toolkit's libraries
  fallback/      the CUDA toolkit's libraries of that closure that are small (cudart), used by the runner
                 only when the machine has none; NCCL and cuBLAS are too large and must be the machine's
  openmpi/, pmix/  Open MPI's mpirun, plugins, help and parameter files, PMIx's plugins, in their
                 installation layout below a relocatable prefix (OPAL_PREFIX)
  bench/         with --erwin-model, the Erwin benchmark's model file (the ShapeNet-Car configuration with
                 random weights, 4.7 MB compressed); without, the runner writes it with the machine's Python
  run, run.py    the runner (share/tools/gpu_bundle/run.py)
"""
import argparse
import datetime
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

BUNDLE_NAME = "surrogate-gpu-bundle"
HERE = Path(__file__).resolve().parent


def _runner():
    """The runner's module (run.py, which the bundle carries): what both sides write the same way."""
    spec = importlib.util.spec_from_file_location("surrogate_gpu_bundle_run", HERE / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


runner = _runner()

# Open MPI components for network fabrics (UCX, libfabric, PSM, verbs, usNIC, Portals): the bundle runs on one
# node over shared memory (pml ob1, btl self,vader); these would pull in the fabric stacks and their own
# dlopen'ed providers, which the bundle cannot carry whole.
OMPI_FABRIC_COMPONENTS = re.compile(r"(ucx|ofi|psm2?|openib|verbs|usnic|portals4|java)")
# CUDA toolkit libraries up to this size travel as a fallback (cudart: 0.7 MB); larger ones (NCCL 208 MB,
# cuBLAS 570 MB) only from the machine.
FALLBACK_MAX_BYTES = 8 << 20


def log(message):
    print(f"gpu-bundle: {message}", flush=True)


# ---------------------------------------------------------------------------------------------------------
# The tests: ctest's JSON, selection, path rewriting.

def ctest_json(build_dir):
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build_dir, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"gpu-bundle: ctest --show-only=json-v1 failed in {build_dir}:\n{out.stderr}")
    return json.loads(out.stdout)


def properties(test):
    return {p["name"]: p["value"] for p in test.get("properties", [])}


def as_list(value):
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def select_tests(document, labels, select=None, exclude=None):
    """The tests carrying one of `labels` (or whose name matches `select`), minus `exclude` and disabled
    ones, plus the fixture set-up and clean-up tests they require, in ctest's order."""
    tests = [t for t in document["tests"] if "command" in t]
    chosen = set()
    for t in tests:
        props = properties(t)
        if props.get("DISABLED"):
            continue
        if exclude and re.search(exclude, t["name"]):
            continue
        if set(as_list(props.get("LABELS"))) & set(labels) or (select and re.search(select, t["name"])):
            chosen.add(t["name"])
    # Fixtures, transitively: a chosen test's FIXTURES_REQUIRED brings in the tests that set them up or
    # clean them up (ctest runs those too when it runs the test).
    changed = True
    while changed:
        changed = False
        needed = set()
        for t in tests:
            if t["name"] in chosen:
                needed |= set(as_list(properties(t).get("FIXTURES_REQUIRED")))
        for t in tests:
            props = properties(t)
            provides = set(as_list(props.get("FIXTURES_SETUP"))) | set(as_list(props.get("FIXTURES_CLEANUP")))
            if t["name"] not in chosen and provides & needed:
                chosen.add(t["name"])
                changed = True
    return [t for t in tests if t["name"] in chosen]


class Rewriter:
    """Replaces the build and source directories (and a few programs) inside command arguments, environment
    values and working directories, wherever they occur in a string (cmake -P tests pass whole command lines
    as one -DCOMMAND=a@@b@@c argument), and records which build and source paths were named."""

    # A path inside such a string ends at one of these (@@ joins list items in the project's cmake scripts).
    END = r"[^\s@;=,:\"'<>|]*"

    def __init__(self, build_dir, source_dir, programs, data_from_checkout=False):
        self.roots = [(str(build_dir), "@BUNDLE@/build", "build"), (str(source_dir), "@BUNDLE@/src", "src")]
        if data_from_checkout:  # tests/data stays out of the bundle: the runner's --checkout supplies it
            self.roots.append((str(source_dir / "tests" / "data"), "@CHECKOUT@/tests/data", "checkout"))
        # Longest first: the build directory may lie inside the source directory.
        self.roots.sort(key=lambda r: len(r[0]), reverse=True)
        self.programs = programs  # {absolute path: replacement}
        self.named = {"build": set(), "src": set(), "checkout": set()}

    def _root_pattern(self, root):
        return re.compile(re.escape(root) + r"(?=/|$|[\s@;=,:\"'<>|])(" + self.END + ")")

    def __call__(self, text):
        for path, replacement in sorted(self.programs.items(), key=lambda p: -len(p[0])):
            text = re.sub(re.escape(path) + r"(?![A-Za-z0-9_./+-])", replacement, text)
        for root, replacement, kind in self.roots:
            def substitute(match, replacement=replacement, kind=kind):
                rel = os.path.normpath(match.group(1).lstrip("/") or ".")
                if rel.startswith(".."):
                    return match.group(0)  # leaves the tree: not a bundle path
                self.named[kind].add("" if rel == "." else rel)
                return replacement + ("" if rel == "." else "/" + rel)
            text = self._root_pattern(root).sub(substitute, text)
        return text


def program_replacements(document, build_dir, source_dir, mpiexec):
    """mpiexec -> the bundled one; any other absolute argv[0] outside the build and source trees (cmake,
    python) -> @PATH:name@, looked up on the machine's PATH by the runner."""
    programs = {}
    if mpiexec:
        programs[mpiexec] = "@BUNDLE@/openmpi/bin/mpiexec"
    for t in document["tests"]:
        argv0 = (t.get("command") or [""])[0]
        inside = any(argv0.startswith(str(d) + "/") for d in (build_dir, source_dir))
        if argv0.startswith("/") and not inside and argv0 not in programs:
            programs[argv0] = f"@PATH:{os.path.basename(argv0)}@"
    return programs


def manifest_tests(tests, rewrite):
    out = []
    for t in tests:
        props = properties(t)
        entry = {
            "name": t["name"],
            "command": [rewrite(a) for a in t["command"]],
            "environment": [rewrite(e) for e in as_list(props.get("ENVIRONMENT"))],
            "working_directory": rewrite(props["WORKING_DIRECTORY"]) if "WORKING_DIRECTORY" in props else None,
            "labels": as_list(props.get("LABELS")),
            "timeout": props.get("TIMEOUT"),
            "processors": props.get("PROCESSORS", 1),
            "skip_regex": as_list(props.get("SKIP_REGULAR_EXPRESSION")),
            "pass_regex": as_list(props.get("PASS_REGULAR_EXPRESSION")),
            "fail_regex": as_list(props.get("FAIL_REGULAR_EXPRESSION")),
            "skip_return_code": props.get("SKIP_RETURN_CODE"),
            "will_fail": bool(props.get("WILL_FAIL", False)),
            "fixtures_setup": as_list(props.get("FIXTURES_SETUP")),
            "fixtures_cleanup": as_list(props.get("FIXTURES_CLEANUP")),
            "fixtures_required": as_list(props.get("FIXTURES_REQUIRED")),
        }
        out.append(entry)
    return out


# ---------------------------------------------------------------------------------------------------------
# Files and their shared libraries.

def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def ldd(path):
    """{needed name: resolved path} and the names ldd could not find."""
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True)
    found, missing = {}, []
    for line in out.stdout.splitlines():
        line = line.strip()
        m = re.match(r"(\S+) => not found", line)
        if m:
            missing.append(m.group(1))
            continue
        m = re.match(r"(\S+) => (/\S+) \(0x", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found, missing


def libc_names():
    """Basenames of the C library's files (Debian package libc6): never bundled, the machine's own."""
    out = subprocess.run(["dpkg", "-L", "libc6"], capture_output=True, text=True)
    names = {os.path.basename(p) for p in out.stdout.split() if ".so" in os.path.basename(p)}
    if not names:  # not Debian: glibc's libraries by name
        names = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libutil.so.1",
                 "libresolv.so.2", "libanl.so.1", "libmvec.so.1", "ld-linux-x86-64.so.2", "libBrokenLocale.so.1"}
    return names


class Closure:
    """Shared libraries of a set of ELF files, classified: bundled (lib/), CUDA toolkit (machine's, small
    ones also in fallback/), the C library and the driver (never)."""

    def __init__(self, cuda_roots):
        self.cuda_roots = [os.path.realpath(r) for r in cuda_roots if r]
        self.libc = libc_names()
        self.bundled = {}   # name -> resolved path
        self.machine = {}   # name -> resolved path (CUDA toolkit / NCCL)
        self.missing = {}   # name -> [files needing it]
        self.needed_by = {}  # name -> [files]

    def add(self, path):
        found, missing = ldd(path)
        for name in missing:
            self.missing.setdefault(name, []).append(str(path))
        for name, resolved in found.items():
            self.needed_by.setdefault(name, []).append(str(path))
            real = os.path.realpath(resolved)
            if name in self.libc or name.startswith("libcuda.so") or name.startswith("libnvidia-"):
                continue
            if any(real.startswith(r + "/") for r in self.cuda_roots):
                self.machine[name] = resolved
            else:
                self.bundled[name] = resolved


def copy_file(src, dst):
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(os.path.realpath(src), dst)


def max_glibc(files):
    """The newest GLIBC_x.y symbol version any of the files needs (the machine's glibc must be as new)."""
    best = (0, 0)
    for f in files:
        out = subprocess.run(["objdump", "-T", str(f)], capture_output=True, text=True).stdout
        for major, minor in re.findall(r"GLIBC_(\d+)\.(\d+)", out):
            best = max(best, (int(major), int(minor)))
    return f"{best[0]}.{best[1]}"


# ---------------------------------------------------------------------------------------------------------
# Open MPI and PMIx, relocatable.

def openmpi_layout(mpiexec):
    info = Path(os.path.realpath(mpiexec)).parent / "ompi_info"
    out = subprocess.run([str(info), "--parsable", "--path", "all"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"gpu-bundle: {info} --parsable --path all failed: {out.stderr}")
    paths = {}
    for line in out.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "path":
            paths.setdefault(parts[1], parts[2])
    return paths


def relative_to_prefix(path, prefix):
    rel = os.path.relpath(path, prefix)
    return rel if not rel.startswith("..") else None


def pack_openmpi(bundle, mpiexec, closure):
    """orterun (as mpirun/mpiexec) and orted, the plugins (pkglibdir) except the fabric ones, the help files
    (pkgdatadir) and the parameter file (sysconfdir), below bundle/openmpi mirroring the installation's
    layout relative to its prefix, so that OPAL_PREFIX relocates it. Returns the manifest's openmpi entry."""
    paths = openmpi_layout(mpiexec)
    prefix = paths["prefix"]
    entry = {"prefix": "openmpi"}
    for key in ("bindir", "libdir", "pkglibdir", "pkgdatadir", "sysconfdir"):
        rel = relative_to_prefix(paths[key], prefix)
        entry[key] = "openmpi/" + (rel if rel else key)  # outside the prefix (/etc/openmpi): own folder
    orterun = Path(os.path.realpath(mpiexec))
    bindir = bundle / entry["bindir"]
    copy_file(orterun, bindir / orterun.name)
    for alias in ("mpirun", "mpiexec"):
        if alias != orterun.name:
            (bindir / alias).symlink_to(orterun.name)
    closure.add(orterun)
    orted = Path(paths["bindir"]) / "orted"
    if orted.exists():
        copy_file(orted, bindir / "orted")
        closure.add(orted)
    plugins, left_out = [], []
    for plugin in sorted(Path(paths["pkglibdir"]).glob("*.so")):
        if OMPI_FABRIC_COMPONENTS.search(plugin.name):
            left_out.append(plugin.name)
            continue
        copy_file(plugin, bundle / entry["pkglibdir"] / plugin.name)
        closure.add(plugin)
        plugins.append(plugin.name)
    if Path(paths["pkgdatadir"]).is_dir():
        shutil.copytree(paths["pkgdatadir"], bundle / entry["pkgdatadir"])
    if Path(paths["sysconfdir"]).is_dir():
        shutil.copytree(paths["sysconfdir"], bundle / entry["sysconfdir"])
    entry["plugins"] = len(plugins)
    entry["plugins_left_out"] = left_out
    return entry


def pack_pmix(bundle, closure):
    """PMIx's dlopen'ed plugins (next to libpmix, in pmix/) and help files, if Open MPI uses an external
    PMIx: below bundle/pmix in PMIx's layout (PMIX_INSTALL_PREFIX relocates it)."""
    lib = closure.bundled.get("libpmix.so.2")
    if not lib:
        return None
    libdir = Path(os.path.realpath(lib)).parent
    prefix = libdir.parent
    entry = {"prefix": "pmix", "component_path": None}
    plugins = libdir / "pmix"
    if plugins.is_dir():
        for plugin in sorted(plugins.glob("*.so")):
            copy_file(plugin, bundle / "pmix" / "lib" / "pmix" / plugin.name)
            closure.add(plugin)
        entry["component_path"] = "pmix/lib/pmix"
    share = prefix / "share" / "pmix"
    if share.is_dir():
        shutil.copytree(share, bundle / "pmix" / "share" / "pmix")
    return entry


# ---------------------------------------------------------------------------------------------------------
# Benchmarks.

def local_imports(script, roots):
    """The script and the modules it imports, recursively, that are files below `roots` (a package: all of
    its .py files, so that its relative imports resolve), as paths."""
    found, todo = set(), [Path(script)]
    while todo:
        path = todo.pop()
        if path in found:
            continue
        found.add(path)
        for name in re.findall(r"^\s*(?:from|import)\s+([A-Za-z_][\w.]*)", path.read_text(errors="replace"), re.M):
            parts = name.split(".")
            for root in roots:
                base = Path(root, parts[0])
                if base.with_suffix(".py").is_file():
                    todo.append(base.with_suffix(".py"))
                elif (base / "__init__.py").is_file():
                    todo.extend(sorted(base.rglob("*.py")))
    return found


def erwin_bench_model(source_dir, path):
    """The Erwin benchmark's model file written here (run.py's write_erwin_bench_model with this Python, which
    needs torch, numpy and h5py); None, or the reason it was not written."""
    return runner.write_erwin_bench_model(path, sys.executable, None, source_dir)


# ---------------------------------------------------------------------------------------------------------

def unbuilt_outputs(build_dir, named):
    """The named build-tree paths that the build's ninja file makes but that do not exist (a partial build:
    a test would run without its program). Empty when the build has no build.ninja."""
    ninja = shutil.which("ninja")
    if not ninja or not (build_dir / "build.ninja").is_file():
        return []
    done = subprocess.run([ninja, "-C", str(build_dir), "-t", "targets", "all"], capture_output=True, text=True)
    outputs = {line.split(":", 1)[0] for line in done.stdout.splitlines() if ":" in line}
    return sorted(rel for rel in named if rel in outputs and not (build_dir / rel).exists())


def cache_value(build_dir, key):
    for line in (Path(build_dir) / "CMakeCache.txt").read_text().splitlines():
        m = re.match(re.escape(key) + r":[A-Z]+=(.*)$", line)
        if m:
            return m.group(1)
    return None


def cuda_architectures(build_dir):
    """The nvcc targets of the build (from build.ninja: sm_XX code and compute_XX PTX)."""
    ninja = Path(build_dir) / "build.ninja"
    text = ninja.read_text(errors="replace") if ninja.exists() else ""
    codes = set(re.findall(r"arch=compute_\d+,code=\[?([\w,]+)", text)) | set(re.findall(r"-arch=(sm_\d+)", text))
    return sorted(codes)


def git_info(source_dir):
    def git(*args):
        out = subprocess.run(["git", "-C", str(source_dir), *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else None
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def write_archive(bundle_parent, output, compression):
    """tar of bundle_parent/surrogate-gpu-bundle, owners and times normalised; xz through the xz program
    (multi-threaded) when there is one, else Python's lzma."""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".part")
    tar_cmd = ["tar", "--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--mtime=@0",
               "-C", str(bundle_parent), "-cf", "-", BUNDLE_NAME]
    compressor = {"xz": ["xz", "-T0", "-6"], "gz": ["gzip", "-6"], "none": None}[compression]
    if compressor and shutil.which(compressor[0]) and shutil.which("tar"):
        with open(tmp, "wb") as f:
            tar = subprocess.Popen(tar_cmd, stdout=subprocess.PIPE)
            comp = subprocess.run(compressor, stdin=tar.stdout, stdout=f)
            tar.stdout.close()
            if tar.wait() != 0 or comp.returncode != 0:
                sys.exit("gpu-bundle: writing the archive failed")
    else:
        mode = {"xz": "w:xz", "gz": "w:gz", "none": "w"}[compression]
        with tarfile.open(tmp, mode) as tar:
            tar.add(bundle_parent / BUNDLE_NAME, arcname=BUNDLE_NAME)
    tmp.replace(output)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, type=Path, help="a configured and built CUDA build tree")
    ap.add_argument("--source", required=True, type=Path, help="its source tree")
    ap.add_argument("--output", required=True, type=Path, help="the archive to write (.tar.xz, .tar.gz or .tar)")
    ap.add_argument("--labels", default="gpu,cuda", help="ctest labels whose tests go in (comma-separated)")
    ap.add_argument("--select", help="also tests whose name matches this regular expression")
    ap.add_argument("--exclude", help="leave out tests whose name matches this regular expression")
    ap.add_argument("--compression", choices=["xz", "gz", "none"], default="xz")
    ap.add_argument("--ctest-json", type=Path,
                    help="use this `ctest --show-only=json-v1` output instead of running ctest")
    ap.add_argument("--no-benchmarks", action="store_true", help="leave out the GPU benchmarks")
    ap.add_argument("--erwin-model", action="store_true",
                    help="pack the Erwin benchmark's model (4.7 MB compressed) instead of leaving it to the "
                         "runner, for a machine whose Python lacks torch, numpy or h5py")
    ap.add_argument("--test-data-from-checkout", action="store_true",
                    help="leave tests/data out: the runner reads it from a checkout of the same commit (--checkout)")
    ap.add_argument("--keep", type=Path, help="also leave the unpacked bundle in this (new) directory")
    args = ap.parse_args()

    build_dir, source_dir = args.build.resolve(), args.source.resolve()
    document = json.loads(args.ctest_json.read_text()) if args.ctest_json else ctest_json(build_dir)
    labels = [x for x in args.labels.split(",") if x]
    tests = select_tests(document, labels, args.select, args.exclude)
    if not tests:
        sys.exit(f"gpu-bundle: no test of {build_dir} has the labels {labels}")
    mpiexec = cache_value(build_dir, "MPIEXEC_EXECUTABLE")
    rewrite = Rewriter(build_dir, source_dir, program_replacements(document, build_dir, source_dir, mpiexec),
                       args.test_data_from_checkout)
    entries = manifest_tests(tests, rewrite)
    missing = unbuilt_outputs(build_dir, rewrite.named["build"])
    if missing:
        sys.exit(f"gpu-bundle: {build_dir} has not built what the selected tests run: {', '.join(missing)}")

    cuda_compiler = cache_value(build_dir, "CMAKE_CUDA_COMPILER")
    cuda_roots = [str(Path(os.path.realpath(cuda_compiler)).parent.parent)] if cuda_compiler else []
    nccl = cache_value(build_dir, "NCCL_LIBRARY")
    if nccl and nccl != "NCCL_LIBRARY-NOTFOUND":
        cuda_roots.append(str(Path(os.path.realpath(nccl)).parent))

    work = Path(tempfile.mkdtemp(prefix="gpu-bundle-"))
    try:
        bundle = work / BUNDLE_NAME
        bundle.mkdir()
        closure = Closure(cuda_roots)
        elves = []

        # The build-tree and source-tree paths the commands name. Of the build tree only programs and
        # libraries: its other files are the tests' inputs and outputs, which the fixture set-up tests and
        # the tests write again (a stale output must not pass for a new one); their folders are made.
        for rel in sorted(rewrite.named["build"]):
            src = build_dir / rel
            dst = bundle / "build" / rel
            if src.is_file() and is_elf(src):
                copy_file(src, dst)
                elves.append(dst)
                closure.add(src)
            elif src.is_dir() or not rel:
                dst.mkdir(parents=True, exist_ok=True)
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
        for rel in sorted(rewrite.named["src"]):
            src = source_dir / rel
            dst = bundle / "src" / rel
            if src.is_file():
                copy_file(src, dst)
            elif src.is_dir():
                shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))

        # The `surrogate` command and the GPU benchmarks (every executable of build/benchmarks/gpu).
        extra = [p for p in build_dir.glob("coupling/surrogate") if is_elf(p)]
        if not args.no_benchmarks:
            extra += sorted(p for p in (build_dir / "benchmarks" / "gpu").glob("*")
                            if p.is_file() and is_elf(p) and os.access(p, os.X_OK))
        for src in extra:
            dst = bundle / "build" / src.relative_to(build_dir)
            if not dst.exists():
                copy_file(src, dst)
                elves.append(dst)
                closure.add(src)

        # The compiled-in test data (SURROGATE_TEST_DATA_DIR = <source>/tests/data): its HDF5 files, unless
        # the runner reads them from a checkout of the same commit that travels beside the archive.
        data = source_dir / "tests" / "data"
        if not args.test_data_from_checkout:
            for f in sorted(data.rglob("*.h5")):
                copy_file(f, bundle / "src" / f.relative_to(source_dir))
        data_dir = "@CHECKOUT@/tests/data" if args.test_data_from_checkout else "@BUNDLE@/src/tests/data"

        # Benchmark scripts and the local modules they import; the Erwin benchmark's model.
        benchmarks = []
        if not args.no_benchmarks:
            roots = [source_dir / "benchmarks" / "gpu", source_dir / "benchmarks", source_dir / "share" / "python",
                     source_dir / "share" / "tools" / "golden"]
            for script in sorted((source_dir / "benchmarks" / "gpu").glob("*.py")):
                for f in local_imports(script, roots):
                    dst = bundle / "src" / f.relative_to(source_dir)
                    if not dst.exists():
                        copy_file(f, dst)
            benchmarks = sorted(str(p.relative_to(bundle)) for p in (bundle / "build" / "benchmarks" / "gpu").glob("*"))
            # The Erwin benchmark's model (random weights, 5 MB that do not compress) is written by the runner
            # with the machine's Python; --erwin-model packs it for a machine whose Python cannot.
            if args.erwin_model:
                (bundle / "bench").mkdir()
                why = erwin_bench_model(source_dir, bundle / "bench" / "erwin_shapenet.h5")
                if why:
                    log(f"no Erwin benchmark model ({why}); the runner will write one if its Python can")

        # Open MPI, PMIx, then the libraries of everything.
        openmpi = pack_openmpi(bundle, mpiexec, closure) if mpiexec else None
        pmix = pack_pmix(bundle, closure)
        if closure.missing:
            lines = [f"  {n}: needed by {', '.join(sorted(set(v))[:3])}" for n, v in sorted(closure.missing.items())]
            sys.exit("gpu-bundle: ldd finds no library for:\n" + "\n".join(lines))
        for name, resolved in sorted(closure.bundled.items()):
            copy_file(resolved, bundle / "lib" / name)
        fallback = {}
        for name, resolved in sorted(closure.machine.items()):
            if os.path.getsize(os.path.realpath(resolved)) <= FALLBACK_MAX_BYTES:
                copy_file(resolved, bundle / "fallback" / name)
                fallback[name] = "fallback/" + name
        # Bundled shared libraries and executables stay writable for the runner's own checks; no stripping
        # (Release builds carry no debug information, and the emulated device tests need every dynamic symbol).
        all_elves = [p for p in bundle.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p)]

        # The runner.
        shutil.copy2(HERE / "run.py", bundle / "run.py")
        (bundle / "run").write_text(
            "#!/usr/bin/env bash\n# Runs the bundle's tests and benchmarks: run OUT [options] (run.py --help).\n"
            "exec python3 \"$(dirname \"${BASH_SOURCE[0]}\")/run.py\" \"$@\"\n")
        (bundle / "run").chmod(0o755)

        manifest = {
            "format": 1,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "created_on": socket.gethostname(),
            "git": git_info(source_dir),
            "build_dir": str(build_dir),
            "source_dir": str(source_dir),
            "cuda": {"compiler": cuda_compiler, "architectures": cuda_architectures(build_dir), "nccl": nccl},
            "labels": labels,
            "glibc_required": max_glibc(all_elves),
            "environment": [f"SURROGATE_TEST_DATA_DIR={data_dir}"],
            "machine_libraries": sorted(closure.machine),
            "needed_by": {n: sorted({os.path.relpath(p, build_dir) if p.startswith(str(build_dir) + "/")
                                     else os.path.basename(p) for p in closure.needed_by.get(n, [])})[:8]
                          for n in closure.machine},
            "fallback": fallback,
            "openmpi": openmpi,
            "pmix": pmix,
            "benchmarks": benchmarks,
            "erwin_bench_model": ("bench/erwin_shapenet.h5" if (bundle / "bench" / "erwin_shapenet.h5").exists()
                                  else None),
            "tests": entries,
        }
        (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")

        raw = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file() and not p.is_symlink())
        log(f"{len(entries)} tests, {len(elves)} executables, {len(closure.bundled)} bundled libraries "
            f"({raw / 2**20:.1f} MiB unpacked), machine libraries {sorted(closure.machine)} "
            f"(fallback: {sorted(fallback) or 'none'}), glibc >= {manifest['glibc_required']}")
        write_archive(work, args.output, args.compression)
        log(f"wrote {args.output} ({args.output.stat().st_size / 2**20:.1f} MiB)")
        if args.keep:
            shutil.copytree(bundle, args.keep / BUNDLE_NAME, symlinks=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
