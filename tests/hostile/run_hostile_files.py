#!/usr/bin/env python3
"""Hostile file-system and command-line cases of `surrogate predict` (share/docs/reliability.md, "Outputs").

    run_hostile_files.py --surrogate BIN --mpiexec MPIRUN --np-flag -n --np N [--mpi-flag F ...]
                         --model MODEL.h5 --points POINTS.h5 --work DIR

Each case sets up a scene (a planted link, an output that is one of the inputs, a FIFO, an external link,
options that differ between ranks, a signal during the write ...), runs `surrogate predict` under mpirun
with a timeout and checks the outcome: the exit status, the message, and that nothing else was touched.
Cases that need several ranks run only when N > 1. Needs Debian's python3-h5py.
"""
import argparse
import hashlib
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import h5py
import numpy as np

TIMEOUT = 60


def md5(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


class Runner:
    def __init__(self, args):
        self.args = args
        self.work = os.path.abspath(args.work)
        os.makedirs(self.work, exist_ok=True)
        for name in os.listdir(self.work):
            self.remove(os.path.join(self.work, name))
        # Copies, so that a failing case cannot hurt the source tree's files.
        self.model = self.copy(args.model, "model.h5")
        self.points = self.copy(args.points, "points.h5")
        self.failures, self.count = [], 0

    def remove(self, path):
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
        else:
            for name in os.listdir(path):
                self.remove(os.path.join(path, name))
            os.chmod(path, 0o755)
            os.rmdir(path)

    def copy(self, source, name):
        path = os.path.join(self.work, name)
        with open(source, "rb") as f, open(path, "wb") as g:
            g.write(f.read())
        return path

    def path(self, name):
        return os.path.join(self.work, name)

    def predict_argv(self, model=None, points=None, output=None, extra=()):
        return ["predict", "--model", model or self.model, "--input", points or self.points,
                "--output", output, "--quiet", *extra]

    def mpirun(self, argvs, env=None, umask=None):
        """argvs: one argument list for every rank (an MPMD line when they differ)."""
        a = self.args
        groups = []
        for argv in argvs:
            if groups and groups[-1][1] == argv:
                groups[-1][0] += 1
            else:
                groups.append([1, argv])
        command = [a.mpiexec, *a.mpi_flag]
        for i, (count, argv) in enumerate(groups):
            if i > 0:
                command.append(":")
            command += [a.np_flag, str(count), a.surrogate, *argv]
        start = time.time()
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env,
                                 preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)
        except subprocess.TimeoutExpired as e:
            return None, (e.stdout or "") + (e.stderr or ""), time.time() - start
        return run.returncode, run.stdout + run.stderr, time.time() - start

    def run(self, argv, **kw):
        return self.mpirun([argv] * self.args.np, **kw)

    def case(self, name, body):
        self.count += 1
        try:
            problem = body()
        except Exception as e:  # a broken scene is a failure of the case, with its reason
            problem = f"{type(e).__name__}: {e}"
        if problem:
            self.failures.append(name)
            print(f"FAIL {name}: {problem}")
        else:
            print(f"ok   {name}")
        sys.stdout.flush()

    def temporaries(self, directory=None):
        directory = directory or self.work
        return [n for n in os.listdir(directory) if n.startswith(".surrogate-")]


def expect_error(rc, text, seconds, status, pattern):
    """None when the run failed cleanly with `status` and a message matching `pattern`, else the problem."""
    import re
    if rc is None:
        return f"no exit within {TIMEOUT} s (a hang)"
    if rc != status:
        return f"exit status {rc}, expected {status}:\n{text}"
    if re.search(r"(Segmentation|signal [0-9]|core dumped|terminate called|Aborted|MPI_ABORT)", text):
        return f"crashed:\n{text}"
    if not re.search("surrogate: error: .*" + pattern, text):
        return f"the message does not match '{pattern}':\n{text}"
    return None


def valid_prediction(path):
    with h5py.File(path, "r") as f:
        return np.asarray(f["prediction"])


def cases(r):
    np_ranks = r.args.np
    reference = r.path("reference.h5")
    rc, text, _ = r.run(r.predict_argv(output=reference))
    if rc != 0:
        raise SystemExit(f"the valid run fails:\n{text}")
    expected = valid_prediction(reference)

    # 1. Writes that cannot hurt ------------------------------------------------------------------------
    def planted_link():
        victim = r.path("victim.txt")
        with open(victim, "w") as f:
            f.write("victim")
        out = r.path("out_link.h5")
        os.symlink(victim, out + ".tmp")
        rc, text, _ = r.run(r.predict_argv(output=out))
        if rc != 0:
            return f"exit {rc}:\n{text}"
        if open(victim).read() != "victim":
            return "the planted link's target was overwritten"
        if not os.path.islink(out + ".tmp") or os.path.islink(out):
            return "the link or the output changed kind"
        if not np.array_equal(valid_prediction(out), expected):
            return "the output differs from the reference run"
        return "temporaries left: " + str(r.temporaries()) if r.temporaries() else None
    r.case("planted_link_at_old_temporary_name", planted_link)

    def unrelated_tmp():
        out = r.path("out_unrelated.h5")
        with open(out + ".tmp", "w") as f:
            f.write("mine")
        rc, text, _ = r.run(r.predict_argv(output=out))
        if rc != 0:
            return f"exit {rc}:\n{text}"
        return None if open(out + ".tmp").read() == "mine" else "an unrelated <output>.tmp was replaced"
    r.case("unrelated_file_at_old_temporary_name", unrelated_tmp)

    def long_name():
        out = r.path("n" * 249 + ".h5")  # 252 characters: legal (NAME_MAX 255)
        rc, text, _ = r.run(r.predict_argv(output=out))
        if rc != 0:
            return f"exit {rc}:\n{text}"
        return None if np.array_equal(valid_prediction(out), expected) else "wrong output"
    r.case("output_name_252_characters", long_name)

    def same_file(target, link):
        def body():
            before = md5(target)
            out = target
            if link:
                out = r.path("link_to_" + os.path.basename(target))
                os.symlink(target, out)
            rc, text, _ = r.run(r.predict_argv(output=out))
            problem = expect_error(rc, text, 0, 2, "--output '.*' is the same file as the input '" + target)
            if problem:
                return problem
            if md5(target) != before:
                return "the input was modified"
            return None if not link or os.path.islink(out) else "the link was replaced"
        return body
    r.case("output_is_the_points", same_file(r.points, False))
    r.case("output_is_the_model", same_file(r.model, False))
    r.case("output_links_to_the_points", same_file(r.points, True))

    def fifo_without_reader():
        fifo = r.path("fifo_out")
        os.mkfifo(fifo)
        rc, text, _ = r.run(r.predict_argv(output=fifo))
        problem = expect_error(rc, text, 0, 1, "output file '.*fifo_out': a FIFO with no reader")
        return problem or (None if stat.S_ISFIFO(os.lstat(fifo).st_mode) else "the FIFO was replaced")
    r.case("output_fifo_without_reader", fifo_without_reader)

    def fifo_with_reader():
        fifo = r.path("fifo_read")
        os.mkfifo(fifo)
        got = {}

        def reader():
            with open(fifo, "rb") as f:
                got["bytes"] = f.read()
        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        time.sleep(0.2)
        rc, text, _ = r.run(r.predict_argv(output=fifo))
        thread.join(TIMEOUT)
        if rc != 0:
            return f"exit {rc}:\n{text}"
        if not stat.S_ISFIFO(os.lstat(fifo).st_mode):
            return "the FIFO was replaced"
        copy = r.path("from_fifo.h5")
        with open(copy, "wb") as f:
            f.write(got.get("bytes", b""))
        return None if np.array_equal(valid_prediction(copy), expected) else "the FIFO carried another file"
    r.case("output_fifo_with_reader", fifo_with_reader)

    def dev_null():
        before = os.stat("/dev/null")
        rc, text, _ = r.run(r.predict_argv(output="/dev/null"))
        after = os.stat("/dev/null")
        if not stat.S_ISCHR(after.st_mode) or after.st_rdev != before.st_rdev:
            return "/dev/null IS NO LONGER THE NULL DEVICE"
        return None if rc == 0 else f"exit {rc}:\n{text}"
    r.case("output_dev_null", dev_null)

    def missing_directory_first():
        out = r.path("no_such_directory/out.h5")
        rc, text, _ = r.run(r.predict_argv(model=r.path("no_such_model.h5"), output=out))
        return expect_error(rc, text, 0, 1, "--output '.*out.h5': its directory '.*no_such_directory' does not exist")
    r.case("output_directory_missing_found_before_the_model", missing_directory_first)

    def output_directory():
        rc, text, _ = r.run(r.predict_argv(output=r.work))
        return expect_error(rc, text, 0, 1, "--output '.*' is a directory")
    r.case("output_is_a_directory", output_directory)

    if os.geteuid() != 0:  # root may write anywhere: these scenes need an ordinary user
        def unwritable_directory():
            locked = r.path("locked")
            os.mkdir(locked, 0o555)
            rc, text, _ = r.run(r.predict_argv(model=r.path("no_such_model.h5"), output=locked + "/out.h5"))
            return expect_error(rc, text, 0, 1, "cannot create files in its directory")
        r.case("output_directory_unwritable", unwritable_directory)

        def read_only_output():
            out = r.path("read_only.h5")
            with open(out, "w") as f:
                f.write("keep")
            os.chmod(out, 0o444)
            rc, text, _ = r.run(r.predict_argv(output=out))
            problem = expect_error(rc, text, 0, 1, "exists and is not writable")
            return problem or (None if open(out).read() == "keep" else "a read-only output was replaced")
        r.case("output_read_only", read_only_output)

    def umask_mode():
        out = r.path("umask.h5")
        rc, text, _ = r.run(r.predict_argv(output=out), umask=0o027)
        if rc != 0:
            return f"exit {rc}:\n{text}"
        mode = stat.S_IMODE(os.stat(out).st_mode)
        return None if mode == 0o640 else f"mode {oct(mode)}, expected 0o640 (0666 less the umask 027)"
    r.case("output_mode_follows_umask", umask_mode)

    def signal_during_write():
        out = r.path("killed.h5")
        with open(out, "w") as f:
            f.write("previous")
        env = dict(os.environ, SURROGATE_TEST_SIGNAL_IN_WRITE="1")
        rc, text, _ = r.run(r.predict_argv(output=out), env=env)
        if rc == 0:
            return "the run succeeded although rank 0 was sent SIGTERM"
        if open(out).read() != "previous":
            return "the previous output was replaced"
        return "temporaries left: " + str(r.temporaries()) if r.temporaries() else None
    r.case("sigterm_during_the_write_leaves_no_temporary", signal_during_write)

    # 4. Only regular files are read --------------------------------------------------------------------
    def fifo_input(which):
        def body():
            fifo = r.path("fifo_" + which)
            os.mkfifo(fifo)
            kw = {which: fifo}
            rc, text, _ = r.run(r.predict_argv(output=r.path("out_fifo_in.h5"), **kw))
            label = "model file" if which == "model" else "input file"
            return expect_error(rc, text, 0, 1, f"{label} '.*fifo_{which}' is a FIFO: only regular files are read")
        return body
    r.case("model_is_a_fifo", fifo_input("model"))
    r.case("points_are_a_fifo", fifo_input("points"))

    def external_link(which):
        def body():
            fifo = r.path("fifo_target_" + which)
            os.mkfifo(fifo)
            source = r.model if which == "model" else r.points
            path = r.copy(source, "external_" + which + ".h5")
            with h5py.File(path, "r+") as f:
                group = f["weights"] if which == "model" else f
                name = sorted(group.keys())[0] if which == "model" else ("features" if "features" in f else "coords")
                del group[name]
                group[name] = h5py.ExternalLink(fifo, "/data")
            kw = {which: path}
            rc, text, _ = r.run(r.predict_argv(output=r.path("out_ext.h5"), **kw))
            return expect_error(rc, text, 0, 1, "is an external link .*not accepted")
        return body
    r.case("model_weight_is_an_external_link_to_a_fifo", external_link("model"))
    r.case("points_dataset_is_an_external_link_to_a_fifo", external_link("points"))

    def virtual_dataset():
        path = r.copy(r.points, "virtual.h5")
        with h5py.File(path, "r+") as f:
            name = "features" if "features" in f else "coords"
            shape, dtype = f[name].shape, f[name].dtype
            del f[name]
            layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
            layout[...] = h5py.VirtualSource(r.points, name, shape=shape)
            f.create_virtual_dataset(name, layout)
        rc, text, _ = r.run(r.predict_argv(points=path, output=r.path("out_vds.h5")))
        return expect_error(rc, text, 0, 1, "a virtual dataset .*is not accepted")
    r.case("points_dataset_is_virtual", virtual_dataset)

    # 7. Exit codes of the command line -----------------------------------------------------------------
    out = r.path("usage.h5")
    usage = {
        "unknown_option": (r.predict_argv(output=out, extra=["--bogus"]), "unknown option '--bogus'"),
        "option_without_value": (["predict", "--model", r.model, "--input"], "option --input needs a value"),
        "missing_output": (["predict", "--model", r.model, "--input", r.points], "needs --model, --input and --output"),
        "bad_threads": (r.predict_argv(output=out, extra=["--threads", "0"]), "--threads expects a positive integer"),
        "bad_precision": (r.predict_argv(output=out, extra=["--precision", "fp16"]), "fp16"),
        "bad_device": (r.predict_argv(output=out, extra=["--device", "gpu"]), "unknown device 'gpu'"),
        "info_without_file": (["info"], "info expects exactly one model file"),
        "unknown_command": (["frobnicate"], "unknown command 'frobnicate'"),
    }
    for name, (argv, pattern) in usage.items():
        r.case("usage_" + name, lambda argv=argv, pattern=pattern: expect_error(*r.run(argv), 2, pattern))

    # 2. Ranks agree or fail together (an MPMD line gives the last rank other options) ------------------
    if np_ranks > 1:
        last = str(np_ranks - 1)
        base = r.predict_argv(output=r.path("differ.h5"))
        differing = {
            "--reproducible": base + ["--reproducible"],
            "--allow-non-finite": base + ["--allow-non-finite"],
            "--precision": base + ["--precision", "fp64"],
            "--timing": base + ["--timing"],
            "--model": r.predict_argv(model=r.copy(r.model, "other_model.h5"), output=r.path("differ.h5")),
            "--output": r.predict_argv(output=r.path("other_output.h5")),
        }
        for option, argv in differing.items():
            def body(option=option, argv=argv):
                rc, text, seconds = r.mpirun([base] * (np_ranks - 1) + [argv])
                pattern = f"the ranks disagree on {option}: rank 0 has '.*', rank {last} has another"
                return expect_error(rc, text, seconds, 2, pattern)
            r.case("ranks_differ_" + option.strip("-"), body)

        def threads_may_differ():
            out = r.path("threads.h5")
            argvs = [r.predict_argv(output=out, extra=["--threads", str(1 + k % 2)]) for k in range(np_ranks)]
            rc, text, _ = r.mpirun(argvs)
            if rc != 0:
                return f"exit {rc}:\n{text}"
            return None if np.allclose(valid_prediction(out), expected, rtol=1e-6, atol=1e-6) else "wrong output"
        r.case("ranks_may_differ_in_threads", threads_may_differ)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--surrogate", required=True)
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--np-flag", default="-n")
    parser.add_argument("--np", type=int, required=True)
    parser.add_argument("--mpi-flag", action="append", default=[])
    parser.add_argument("--model", required=True)
    parser.add_argument("--points", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    r = Runner(args)
    cases(r)
    print(f"{r.count} hostile file and command-line cases at {args.np} rank(s), {len(r.failures)} failed")
    if r.failures:
        print("failed: " + ", ".join(r.failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
