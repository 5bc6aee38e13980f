"""share/tools/gpu-bundle: the packer's test selection and path rewriting on a made-up ctest document and on
this build's own, the runner's pass/skip/fail rules and its timeout, and a small bundle (a few tests, no
benchmarks, uncompressed) packed from this build, unpacked elsewhere and run under `env -i`.

    GPU_BUNDLE_BUILD_DIR=build GPU_BUNDLE_SOURCE_DIR=. python3 -m unittest test_gpu_bundle
(the build-tree checks are skipped without those variables; ctest sets them: tools.gpu_bundle).
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "share" / "tools"


def load(name):
    spec = importlib.util.spec_from_file_location(f"gpu_bundle_{name}", TOOLS / "gpu_bundle" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pack = load("pack")
run = load("run")
ncu_summary = load("ncu_summary")

SRC, BUILD = "/src/proj", "/src/proj/build"


def test(name, command, **props):
    return {"name": name, "command": command,
            "properties": [{"name": k, "value": v} for k, v in props.items()]}


DOCUMENT = {"kind": "ctestInfo", "tests": [
    test("gpu.Kernels.Norm", [f"{BUILD}/tests/gpu/test_gpu_kernels", "--gtest_filter=Kernels.Norm"],
         LABELS=["gpu"], WORKING_DIRECTORY=f"{BUILD}/tests/gpu", SKIP_REGULAR_EXPRESSION=["\\[  SKIPPED \\]"],
         ENVIRONMENT=["OMP_NUM_THREADS=1", f"SURROGATE_TEST_DATA={BUILD}/tests/gpu/data"]),
    test("cli.setup", [f"{BUILD}/tests/make_inputs", f"{SRC}/tests/data/flare/default/model.h5", f"{BUILD}/tests/cli"],
         LABELS=["cli"], FIXTURES_SETUP=["inputs"]),
    test("cli.device.np2", ["/usr/bin/cmake", "-DCOMMAND=/usr/bin/mpiexec@@-n@@2@@"
                            f"{BUILD}/coupling/surrogate@@--model@@{SRC}/tests/data/m.h5",
                            "-P", f"{SRC}/tests/gpu/cli_device.cmake"],
         LABELS=["cli", "gpu"], FIXTURES_REQUIRED=["inputs"]),
    test("unit.Other", [f"{BUILD}/tests/test_kernels"], LABELS=["unit"]),
    test("gpu.Disabled", [f"{BUILD}/tests/gpu/test_gpu_kernels"], LABELS=["gpu"], DISABLED=True),
    test("cuda.Emulated", [f"{SRC}/buildx/y", "/opt/other/z"], LABELS=["cuda"]),
]}


class Selection(unittest.TestCase):
    def test_labels_fixtures_and_disabled_tests(self):
        names = [t["name"] for t in pack.select_tests(DOCUMENT, ["gpu", "cuda"])]
        self.assertEqual(names, ["gpu.Kernels.Norm", "cli.setup", "cli.device.np2", "cuda.Emulated"])
        names = [t["name"] for t in pack.select_tests(DOCUMENT, ["gpu"], exclude="^cli\\.")]
        self.assertEqual(names, ["gpu.Kernels.Norm"])
        names = [t["name"] for t in pack.select_tests(DOCUMENT, [], select="^unit\\.")]
        self.assertEqual(names, ["unit.Other"])

    def test_paths_are_rewritten_wherever_they_occur(self):
        tests = pack.select_tests(DOCUMENT, ["gpu", "cuda"])
        programs = pack.program_replacements(DOCUMENT, Path(BUILD), Path(SRC), "/usr/bin/mpiexec")
        rewrite = pack.Rewriter(Path(BUILD), Path(SRC), programs)
        entries = {e["name"]: e for e in pack.manifest_tests(tests, rewrite)}
        gpu = entries["gpu.Kernels.Norm"]
        self.assertEqual(gpu["command"], ["@BUNDLE@/build/tests/gpu/test_gpu_kernels", "--gtest_filter=Kernels.Norm"])
        self.assertEqual(gpu["working_directory"], "@BUNDLE@/build/tests/gpu")
        self.assertEqual(gpu["environment"], ["OMP_NUM_THREADS=1", "SURROGATE_TEST_DATA=@BUNDLE@/build/tests/gpu/data"])
        self.assertEqual(gpu["skip_regex"], ["\\[  SKIPPED \\]"])
        cli = entries["cli.device.np2"]
        self.assertEqual(cli["command"], [
            "@PATH:cmake@",
            "-DCOMMAND=@BUNDLE@/openmpi/bin/mpiexec@@-n@@2@@@BUNDLE@/build/coupling/surrogate@@--model@@"
            "@BUNDLE@/src/tests/data/m.h5",
            "-P", "@BUNDLE@/src/tests/gpu/cli_device.cmake"])
        self.assertEqual(cli["fixtures_required"], ["inputs"])
        self.assertEqual(entries["cli.setup"]["fixtures_setup"], ["inputs"])
        # /src/proj/buildx is not the build directory; a path outside both trees keeps its text.
        self.assertEqual(entries["cuda.Emulated"]["command"], ["@BUNDLE@/src/buildx/y", "/opt/other/z"])
        self.assertIn("tests/gpu/test_gpu_kernels", rewrite.named["build"])
        self.assertIn("tests/data/flare/default/model.h5", rewrite.named["src"])
        self.assertIn("tests/gpu/cli_device.cmake", rewrite.named["src"])
        # Packed with --test-data-from-checkout: tests/data is the runner's --checkout, not the bundle's.
        rewrite = pack.Rewriter(Path(BUILD), Path(SRC), programs, data_from_checkout=True)
        entries = {e["name"]: e for e in pack.manifest_tests(tests, rewrite)}
        self.assertEqual(entries["cli.device.np2"]["command"][1],
                         "-DCOMMAND=@BUNDLE@/openmpi/bin/mpiexec@@-n@@2@@@BUNDLE@/build/coupling/surrogate@@--model@@"
                         "@CHECKOUT@/tests/data/m.h5")
        self.assertNotIn("tests/data/m.h5", rewrite.named["src"])
        self.assertIn("tests/gpu/cli_device.cmake", rewrite.named["src"])


class Outcome(unittest.TestCase):
    def rule(self, **props):
        t = {"skip_regex": [], "pass_regex": [], "fail_regex": [], "skip_return_code": None, "will_fail": False}
        t.update(props)
        return t

    def test_ctest_rules(self):
        gtest = self.rule(skip_regex=["\\[  SKIPPED \\]"])
        self.assertEqual(run.classify(gtest, 0, "[  PASSED  ] 1 test.", False)[0], "passed")
        self.assertEqual(run.classify(gtest, 1, "[  FAILED  ] 1 test.", False)[0], "failed")
        self.assertEqual(run.classify(gtest, 0, "[  SKIPPED ] 1 test, listed below:", False)[0], "skipped")
        # A test that says it skipped is skipped whatever its exit status (ctest's rule) ...
        self.assertEqual(run.classify(gtest, 1, "[  SKIPPED ] GpuMpi.X\n", False)[0], "skipped")
        # ... and one that does not say so is never a skip, even when it fails quietly or passes.
        self.assertEqual(run.classify(gtest, 0, "no device, nothing done", False)[0], "passed")
        self.assertEqual(run.classify(self.rule(), 77, "", False)[0], "failed")
        self.assertEqual(run.classify(self.rule(skip_return_code=77), 77, "", False)[0], "skipped")
        self.assertEqual(run.classify(self.rule(pass_regex=["ok"]), 1, "all ok", False)[0], "passed")
        self.assertEqual(run.classify(self.rule(pass_regex=["ok"]), 0, "bad", False)[0], "failed")
        self.assertEqual(run.classify(self.rule(fail_regex=["ERROR"]), 0, "an ERROR", False)[0], "failed")
        self.assertEqual(run.classify(self.rule(will_fail=True), 1, "", False)[0], "passed")
        self.assertEqual(run.classify(self.rule(will_fail=True), 0, "", False)[0], "failed")
        self.assertEqual(run.classify(gtest, -11, "Segmentation fault", False)[0], "failed")
        self.assertEqual(run.classify(gtest, -15, "", True, 5), ("failed", "timeout after 5 s"))

    def test_benchmark_grids_are_checked_before_anything_runs(self):
        self.assertEqual(run.parse_args(["out", "--sphere-grids", "241x480", "721X1440"]).sphere_grids,
                         ["241x480", "721X1440"])
        for bad in ("241", "0x480", "241x", "241x480x2"):
            with self.assertRaises(SystemExit, msg=bad), open(os.devnull, "w") as null:
                stderr, sys.stderr = sys.stderr, null
                try:
                    run.parse_args(["out", "--sphere-grids", bad])
                finally:
                    sys.stderr = stderr

    def test_benchmark_tables_are_recognised_with_or_without_a_name(self):
        for row in ("| 1048576 | 64 | 87.32 |", "   60000 |     45.09    75.77 |",
                    "   sparse    16384 |     72.53    73.86", "     ball    65536 |     45.69",
                    "  seg    98304 |   48     0.52  6463.09", "transformer  115680 |   241x480    889.84"):
            self.assertTrue(run.is_table_row(row), row)
        for line in ("attention        N | device ms", "       N | device ms  full ms |", "sparse N 65536: only 0.0 %",
                     "machine: Intel(R) Xeon(R) | x", "   sparse  1000000: surrogate alone, full 1.00 ms, wall 1 ms",
                     "  seg: TreeTransformerSeg forward (dim 128, heads 4 | x), 39728030 parameters"):
            self.assertFalse(run.is_table_row(line), line)

    def test_benchmarks_are_chosen_by_family(self):
        self.assertEqual(run.parse_args(["out"]).benchmarks, list(run.BENCH_FAMILIES))
        self.assertEqual(run.parse_args(["out", "--benchmarks", "hept", "bsa"]).benchmarks, ["hept", "bsa"])
        with self.assertRaises(SystemExit), open(os.devnull, "w") as null:
            stderr, sys.stderr = sys.stderr, null
            try:
                run.parse_args(["out", "--benchmarks", "heptt"])
            finally:
                sys.stderr = stderr
        for name, family in (("flare_machine", "flare"), ("flare N=1048576 M=64 bf16", "flare"),
                             ("hept official", "hept"), ("sequoia seg N=65536", "sequoia"), ("bsa", "bsa"),
                             ("sphere 721x1440", "sphere"), ("erwin N=16384", "erwin")):
            self.assertEqual(run.bench_family(name), family, name)
            self.assertIn(family, run.BENCH_FAMILIES)

    def test_official_code_folders_are_checked_and_made_absolute(self):
        # The benchmarks run in a scratch folder, so a relative --hept-official must not reach them as such.
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "hept" / "example").mkdir(parents=True)
            (Path(tmp) / "hept" / "example" / "transformer.py").write_text("")
            (Path(tmp) / "erwin").mkdir()
            (Path(tmp) / "erwin" / "erwin.py").write_text("")
            for folder, file in (("seq", "point_cloud/classification/model/TreeTransformerCls.py"),
                                 ("bsa", "transformer.py"), ("th", "torch_harmonics/__init__.py")):
                (Path(tmp) / folder / file).parent.mkdir(parents=True)
                (Path(tmp) / folder / file).write_text("")
            cwd = os.getcwd()
            os.chdir(tmp)
            try:
                args = run.parse_args(["out", "--hept-official", "hept", "--erwin-official", "erwin"])
                self.assertEqual(args.hept_official, str((Path(tmp) / "hept").resolve()))
                self.assertEqual(args.erwin_official, str((Path(tmp) / "erwin").resolve()))
                self.assertTrue(run.parse_args(["out", "--hept-official", "hept/example"]).hept_official)
                args = run.parse_args(["out", "--sequoia-official", "seq", "--bsa-official", "bsa",
                                       "--sphere-official", "th"])
                for name, folder in (("sequoia_official", "seq"), ("bsa_official", "bsa"), ("sphere_official", "th")):
                    self.assertEqual(getattr(args, name), str((Path(tmp) / folder).resolve()))
                for bad in (["--hept-official", "erwin"], ["--erwin-official", "hept"], ["--sequoia-official", "bsa"],
                            ["--bsa-official", "seq"], ["--sphere-official", "erwin"]):
                    with self.assertRaises(SystemExit, msg=bad), open(os.devnull, "w") as null:
                        stderr, sys.stderr = sys.stderr, null
                        try:
                            run.parse_args(["out", *bad])
                        finally:
                            sys.stderr = stderr
            finally:
                os.chdir(cwd)

    @unittest.skipUnless(shutil.which("ninja"), "needs ninja")
    def test_a_partial_build_is_refused(self):
        # A program the tests run that the build makes but has not made (ninja with a target list) is named.
        with tempfile.TemporaryDirectory() as tmp:
            build = Path(tmp)
            (build / "build.ninja").write_text("rule touch\n  command = touch $out\n"
                                               "build tests/run_me: touch\nbuild tests/made: touch\n")
            (build / "tests").mkdir()
            (build / "tests" / "made").write_text("")
            named = {"tests/run_me", "tests/made", "tests/output.h5", ""}
            self.assertEqual(pack.unbuilt_outputs(build, named), ["tests/run_me"])
            (build / "build.ninja").unlink()
            self.assertEqual(pack.unbuilt_outputs(build, named), [])

    def test_ncu_text_output_is_summed_per_kernel(self):
        # Two kernels in ncu's default text: one with the Speed Of Light section, one with --metrics; units
        # ms, us and ns; an unnamed namespace; a launch without a duration is left out.
        text = """==PROF== Connected to process 1 (/b/bench)
  void unnamed>::mlp_mma_kernel<2, 2>(MlpArgs, int) (8192, 1, 1)x(128, 1, 1), Context 1, Stream 13, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    Memory Throughput                 %        16.97
    Duration                         ms         1.20
    Compute (SM) Throughput           %        15.55
  ns::decode_tc_kernel<(Precision)2, 8>(Args) (66, 8, 1)x(512, 1, 1), Context 1, Stream 13, Device 0, CC 9.0
    gpu__time_duration.sum             us       300.00
  void unnamed>::mlp_mma_kernel<2, 2>(MlpArgs, int) (8192, 1, 1)x(128, 1, 1), Context 1, Stream 13, Device 0, CC 9.0
    Memory Throughput                 %        17.03
    Duration                         us     1,000.00
    Compute (SM) Throughput           %        16.45
  (anonymous namespace)::fill_kernel<int>(int *, unsigned long, int) (1, 1, 1)x(256, 1, 1), Context 1, Stream 13, Device 0, CC 9.0
    Duration                         ns       500.00
  lost_kernel(int) (1, 1, 1)x(32, 1, 1), Context 1, Stream 13, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
"""
        rows = ncu_summary.summary(ncu_summary.parse(text.splitlines()))
        self.assertEqual([r["name"] for r in rows], ["mlp_mma_kernel<2, 2>", "decode_tc_kernel<(Precision)2, 8>",
                                                     "fill_kernel<int>"])
        self.assertEqual(rows[0]["launches"], 2)
        self.assertAlmostEqual(rows[0]["ms"], 2.2)
        self.assertAlmostEqual(rows[0]["memory"], 17.0)
        self.assertAlmostEqual(rows[0]["compute"], 16.0)
        self.assertAlmostEqual(rows[1]["ms"], 0.3)
        self.assertIsNone(rows[1]["memory"])
        self.assertAlmostEqual(rows[2]["ms"], 5e-4)
        markdown = ncu_summary.table(rows, top=2, width=70)
        self.assertIn("| `mlp_mma_kernel<2, 2>` | 2 | 2.200 | 88.0 % | 17.0 | 16.0 |", markdown)
        self.assertIn("| 1 other kernels | 1 | 0.001 | 0.0 % | | |", markdown)

    def test_the_erwin_model_is_the_bundles_or_the_machines(self):
        # Packed with --erwin-model: the bundle's file, nothing written.
        path, why = run.erwin_bench_model({"erwin_bench_model": "bench/erwin_shapenet.h5"}, {}, "/nonexistent", {})
        self.assertEqual((path, why), (str(run.BUNDLE / "bench" / "erwin_shapenet.h5"), None))
        # Without it, a Python lacking what writes the model is named, with the packer's option.
        for py, missing in (({"python": "python3", "torch": True, "numpy": True}, "h5py"),
                            ({"python": "python3", "numpy": True, "h5py": True}, "torch"),
                            ({"torch": True, "numpy": True, "h5py": True}, "python")):
            path, why = run.erwin_bench_model({"erwin_bench_model": None}, py, "/nonexistent", {})
            self.assertIsNone(path)
            self.assertIn(missing, why)
            self.assertIn("--erwin-model", why)

    @unittest.skipUnless(all(importlib.util.find_spec(m) for m in ("torch", "numpy", "h5py")),
                         "this Python lacks torch, numpy or h5py")
    def test_the_runner_writes_the_erwin_model_from_the_bundled_scripts(self):
        # The bundle's src/ holds benchmarks/ and share/python/ as the packer copies them; here, links to the
        # checkout's. The runner writes the model into its scratch with this Python, as pack.py would.
        root = Path(__file__).resolve().parents[2]
        with tempfile.TemporaryDirectory() as tmp:
            bundle, scratch = Path(tmp) / "bundle", Path(tmp) / "scratch"
            (bundle / "src" / "share").mkdir(parents=True)
            scratch.mkdir()
            (bundle / "src" / "benchmarks").symlink_to(root / "benchmarks")
            (bundle / "src" / "share" / "python").symlink_to(root / "share" / "python")
            saved, run.BUNDLE = run.BUNDLE, bundle
            try:
                py = {"python": sys.executable, "torch": True, "numpy": True, "h5py": True}
                path, why = run.erwin_bench_model({"erwin_bench_model": None}, py, scratch, dict(os.environ))
            finally:
                run.BUNDLE = saved
            self.assertIsNone(why)
            self.assertEqual(path, str(scratch / "erwin_shapenet.h5"))
            data = Path(path).read_bytes()
            self.assertEqual(data[:8], b"\x89HDF\r\n\x1a\n")
            self.assertGreater(len(data), 4 << 20)  # the ShapeNet-Car configuration's weights
            # Scripts that are not there: the reason comes back, nothing is claimed written.
            why = run.write_erwin_bench_model(scratch / "other.h5", sys.executable, dict(os.environ), scratch)
            self.assertIn("erwin_cpu_vs_pytorch", why)
            self.assertFalse((scratch / "other.h5").exists())

    def test_timeout_ends_the_process_and_its_children(self):
        start = time.monotonic()
        rc, output, timed_out, seconds = run.run_process(
            ["sh", "-c", "sleep 60 & echo child $!; sleep 60"], dict(os.environ), "/", 1)
        self.assertTrue(timed_out)
        self.assertLess(time.monotonic() - start, 20)
        child = int(output.split()[1])
        time.sleep(0.5)
        state = Path(f"/proc/{child}/stat")
        self.assertTrue(not state.exists() or state.read_text().split()[2] == "Z", "the child is still running")


BUILD_DIR = os.environ.get("GPU_BUNDLE_BUILD_DIR")
SOURCE_DIR = os.environ.get("GPU_BUNDLE_SOURCE_DIR")


@unittest.skipUnless(BUILD_DIR and SOURCE_DIR, "GPU_BUNDLE_BUILD_DIR and GPU_BUNDLE_SOURCE_DIR not set")
class ThisBuild(unittest.TestCase):
    def test_every_selected_path_is_rewritten(self):
        build, source = Path(BUILD_DIR).resolve(), Path(SOURCE_DIR).resolve()
        document = pack.ctest_json(build)
        tests = pack.select_tests(document, ["gpu", "cuda"])
        self.assertTrue(any("gpu" in pack.as_list(pack.properties(t).get("LABELS")) for t in tests))
        mpiexec = pack.cache_value(build, "MPIEXEC_EXECUTABLE")
        rewrite = pack.Rewriter(build, source, pack.program_replacements(document, build, source, mpiexec))
        text = json.dumps(pack.manifest_tests(tests, rewrite))
        self.assertNotIn(str(build), text)
        self.assertNotIn(str(source) + "/", text)
        self.assertNotIn(mpiexec, text)
        for rel in rewrite.named["build"]:
            self.assertFalse(rel.startswith(".."), rel)

    def test_a_small_bundle_runs_under_env_i(self):
        build, source = Path(BUILD_DIR).resolve(), Path(SOURCE_DIR).resolve()
        with tempfile.TemporaryDirectory(prefix="gpu-bundle-test-") as tmp:
            tmp = Path(tmp)
            archive = tmp / "b.tar"
            # capi.device_cuda.np2: mpiexec with 2 ranks; cli.device.unknown_precision: cmake -P and its
            # fixture cli.setup; PrecisionEmulation: GoogleTest cases reading the bundle's data.
            select = (r"^(capi\.device_cuda\.np2|cli\.device\.unknown_precision"
                      r"|precision\.PrecisionEmulation\.Golden.*)$")
            subprocess.run([sys.executable, str(TOOLS / "gpu_bundle" / "pack.py"), "--build", str(build), "--source",
                            str(source), "--output", str(archive), "--labels", "", "--select", select,
                            "--compression", "none", "--no-benchmarks", "--test-data-from-checkout"], check=True)
            (tmp / "unpacked").mkdir()
            subprocess.run(["tar", "-xf", str(archive), "-C", str(tmp / "unpacked")], check=True)
            out = tmp / "out"
            env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp)}
            done = subprocess.run(["bash", str(tmp / "unpacked" / "surrogate-gpu-bundle" / "run"), str(out),
                                   "--checkout", str(source)],
                                  env=env, capture_output=True, text=True)
            print(done.stdout[-3000:], done.stderr[-2000:])
            summary = json.loads((out / "summary.json").read_text())
            status = {t["name"]: t["status"] for t in summary["tests"]}
            self.assertEqual(done.returncode, 0)
            self.assertEqual(status.get("capi.device_cuda.np2"), "passed")
            self.assertEqual(status.get("cli.setup"), "passed")
            self.assertEqual(status.get("cli.device.unknown_precision"), "passed")
            self.assertTrue(any(n.startswith("precision.") and s == "passed" for n, s in status.items()), status)
            self.assertEqual(summary["counts"]["failed"], 0)
            self.assertTrue(summary["machine"]["mpirun_np3"])
            self.assertEqual(summary["missing_libraries"], {})
            self.assertTrue((out / "log.txt").read_text().count("----"))
            # --exec: one command with the tests' environment (the bundle's libraries first), its exit status kept.
            done = subprocess.run(["bash", str(tmp / "unpacked" / "surrogate-gpu-bundle" / "run"), str(tmp / "exec"),
                                   "--checkout", str(source), "--exec",
                                   'case "$LD_LIBRARY_PATH" in "$BUNDLE"/lib*) echo exec-env-ok; exit 3;; esac'],
                                  env=env, capture_output=True, text=True)
            summary = json.loads((tmp / "exec" / "summary.json").read_text())
            self.assertEqual(done.returncode, 1, done.stdout[-2000:])
            self.assertEqual(summary["exec"]["returncode"], 3)
            self.assertIn("exec-env-ok", summary["exec"]["tail"])
            self.assertEqual(summary["tests"], [])


if __name__ == "__main__":
    unittest.main()
