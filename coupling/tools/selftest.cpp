// `surrogate selftest`: every case of <data>/manifest.txt through the same code as `surrogate predict`
// (run_predict: parallel HDF5 in, the model on the ranks, rank 0 writes the output), then rank 0 compares
// the output with the case's reference.h5. With --np N started by hand, the program first re-runs itself
// under `mpiexec -n N` (launch_selftest, before MPI_Init: a process that initialised MPI must not start
// another launcher). share/docs/cli.md, "selftest".
#include "selftest.hpp"

#include <mpi.h>
#include <omp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "surrogate/hdf5.hpp"
#include "surrogate/version.hpp"

extern char** environ;

namespace surrogate::cli {
namespace {

namespace fs = std::filesystem;

/// The environment variable through which a launched self-test's rank 0 hands its exit status to the
/// launcher (mpiexec's own status does not tell a failed case from a launch that never started).
constexpr const char* kStatusFileVariable = "SURROGATE_SELFTEST_STATUS_FILE";

struct Options {
  int np = 0;  // 0: not given
  std::string data;
  int threads = 0;
};

int positive(const std::string& option, const std::string& value) {
  char* end = nullptr;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || !end || *end || v < 1 || v > 4096)
    throw UsageError(option + " expects a positive integer, got '" + value + "'");
  return static_cast<int>(v);
}

Options parse(const std::vector<std::string>& args) {
  Options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError("option " + a + " needs a value");
      return args[++i];
    };
    if (a == "--np") o.np = positive(a, value());
    else if (a == "--threads") o.threads = positive(a, value());
    else if (a == "--data") o.data = value();
    else throw UsageError("selftest: unknown option '" + a + "'");
  }
  return o;
}

/// This program's path (/proc/self/exe: the installed binary, whatever PATH or symlink started it).
std::string self_path() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("surrogate") : p.string();
}

/// The default data: <dir of the executable>/<bindir -> datadir>/surrogate/selftest (configured); in the
/// build tree a link makes the same relative path reach share/ of the sources.
std::string default_data_dir() {
  return (fs::path(self_path()).parent_path() / SURROGATE_SELFTEST_RELATIVE_DIR).lexically_normal().string();
}

/// A process started by an MPI launcher (Open MPI, MPICH/Hydra, Intel MPI, PMIx-based launchers).
bool under_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", kStatusFileVariable})
    if (std::getenv(v)) return true;
  return false;
}

std::vector<std::string> split_blanks(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

/// mpiexec -n N [flags]: SURROGATE_MPIEXEC (a command and its options, split at blanks) as given, else the
/// mpiexec this build was configured with (or mpiexec on PATH). Open MPI refuses root without
/// --allow-run-as-root and more ranks than cores without --oversubscribe: added unless the user's
/// environment already allows them (OMPI_ALLOW_RUN_AS_ROOT + _CONFIRM, OMPI_MCA_rmaps_base_oversubscribe).
std::vector<std::string> launcher(int np) {
  if (const char* custom = std::getenv("SURROGATE_MPIEXEC"); custom && *custom) {
    std::vector<std::string> cmd = split_blanks(custom);
    cmd.insert(cmd.end(), {"-n", std::to_string(np)});
    return cmd;
  }
  std::error_code ec;
  const std::string configured = SURROGATE_MPIEXEC;
  std::vector<std::string> cmd{!configured.empty() && fs::exists(configured, ec) ? configured : "mpiexec", "-n",
                               std::to_string(np)};
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(version, &length);  // allowed before MPI_Init
  if (std::strstr(version, "Open MPI")) {
    if (geteuid() == 0 && !(std::getenv("OMPI_ALLOW_RUN_AS_ROOT") && std::getenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")))
      cmd.push_back("--allow-run-as-root");
    if (!std::getenv("OMPI_MCA_rmaps_base_oversubscribe")) cmd.push_back("--oversubscribe");
  }
  return cmd;
}

std::string joined(const std::vector<std::string>& words) {
  std::string text;
  for (const auto& w : words) text += (text.empty() ? "" : " ") + w;
  return text;
}

// ---------------------------------------------------------------------------------------------------
struct Case {
  std::string name, family, dataset;
  double tolerance = 0;
};

/// Parses the manifest (comments from '#', blank lines, "NAME FAMILY DATASET TOLERANCE").
std::vector<Case> parse_manifest(const std::string& text, const std::string& path) {
  std::vector<Case> cases;
  std::istringstream in(text);
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    const std::vector<std::string> f = split_blanks(line);
    if (f.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_number) + ": ";
    if (f.size() != 4) throw Error(ErrorCode::format, where + "expected NAME FAMILY DATASET TOLERANCE");
    if (f[2] != "prediction" && f[2] != "sample_prediction")
      throw Error(ErrorCode::format, where + "DATASET must be prediction or sample_prediction, not '" + f[2] + "'");
    if (f[0].find('/') != std::string::npos || f[0].starts_with("."))
      throw Error(ErrorCode::format, where + "NAME '" + f[0] + "' must name a folder beside the manifest");
    char* end = nullptr;
    const double tol = std::strtod(f[3].c_str(), &end);
    if (!end || *end || !(tol > 0) || !std::isfinite(tol))
      throw Error(ErrorCode::format, where + "TOLERANCE must be a positive number, not '" + f[3] + "'");
    cases.push_back({f[0], f[1], f[2], tol});
  }
  if (cases.empty()) throw Error(ErrorCode::format, path + " lists no case");
  return cases;
}

/// A whole dataset as doubles, with its shape (rank 0 only: plain serial HDF5).
std::vector<double> read_values(const std::string& path, const std::string& name, std::vector<std::int64_t>& shape) {
  h5::QuietErrors quiet;
  h5::check_regular_file(path, "file");
  h5::Handle file = h5::file(h5::check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), ErrorCode::io,
                                       "cannot open '" + path + "' as an HDF5 file"));
  if (!h5::link_exists(file, name)) throw Error(ErrorCode::format, "'" + path + "' has no /" + name);
  h5::Handle dset = h5::dataset(h5::check(H5Dopen2(file, name.c_str(), H5P_DEFAULT), ErrorCode::format,
                                          "'" + path + "': /" + name + " is not a dataset"));
  shape = h5::checked_dataset_shape(dset, std::int64_t{1} << 28, "'" + path + "': /" + name);
  std::int64_t n = 1;
  for (const std::int64_t s : shape) n *= s;
  std::vector<double> values(static_cast<std::size_t>(n));
  if (n > 0) h5::read_dataset(dset, H5T_NATIVE_DOUBLE, values.data(), "'" + path + "': /" + name);
  return values;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + ")";
}

std::string general(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

/// Rank 0: "" when the output is within tolerance, else why not; `detail` gets the measured difference.
std::string compare(const Case& c, const std::string& output, const std::string& reference, std::string& detail) {
  std::vector<std::int64_t> got_shape, ref_shape;
  const std::vector<double> ref = read_values(reference, c.dataset, ref_shape);
  const std::vector<double> got = read_values(output, c.dataset, got_shape);
  if (got_shape != ref_shape)
    return "/" + c.dataset + " has shape " + shape_text(got_shape) + ", the reference " + shape_text(ref_shape);
  double scale = 0, diff = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::abs(ref[i]));
    const double d = std::abs(got[i] - ref[i]);
    if (!(d <= diff)) {  // the first NaN counts as the largest difference
      diff = d;
      at = i;
      if (std::isnan(d)) break;
    }
  }
  const double bound = c.tolerance * scale;
  detail = "max |diff| " + general(diff) + " = " + general(scale > 0 ? diff / scale : diff) + " max|ref| (tolerance " +
           general(c.tolerance) + ")";
  if (diff <= bound) return "";
  const std::int64_t columns = ref_shape.size() > 1 ? ref_shape[1] : 1;
  const auto row = static_cast<std::int64_t>(at) / columns, column = static_cast<std::int64_t>(at) % columns;
  return "largest difference " + general(diff) + " at row " + std::to_string(row) + ", column " +
         std::to_string(column) + " (output " + general(got[at]) + ", reference " + general(ref[at]) + ") exceeds " +
         general(c.tolerance) + " x max|ref| " + general(scale) + " = " + general(bound);
}

/// Rank 0's text to every rank.
std::string broadcast(std::string text) {
  long long size = static_cast<long long>(text.size());
  MPI_Bcast(&size, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  text.resize(static_cast<std::size_t>(size));
  if (size > 0) MPI_Bcast(text.data(), static_cast<int>(size), MPI_CHAR, 0, MPI_COMM_WORLD);
  return text;
}

/// Rank 0 reads the manifest and makes a scratch folder; every rank gets both, or the reason it failed.
struct Setup {
  std::string error, manifest, scratch;
};

Setup prepare(const std::string& dir, int rank) {
  Setup s;
  if (rank == 0) {
    const std::string path = (fs::path(dir) / "manifest.txt").string();
    std::ifstream in(path);
    if (!in) {
      s.error = "no self-test data: cannot read '" + path + "' (give the folder with --data DIR; share/docs/cli.md)";
    } else {
      std::ostringstream text;
      text << in.rdbuf();
      s.manifest = text.str();
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/surrogate-selftest-XXXXXX";
      if (mkdtemp(pattern.data())) s.scratch = pattern;
      else s.error = "cannot create a scratch folder '" + pattern + "': " + std::strerror(errno);
    }
  }
  s.error = broadcast(s.error);
  s.manifest = broadcast(s.manifest);
  s.scratch = broadcast(s.scratch);
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
std::optional<int> launch_selftest(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "selftest" || under_launcher()) return std::nullopt;
  Options o;
  try {
    o = parse({args.begin() + 1, args.end()});
  } catch (const UsageError&) {
    return std::nullopt;  // reported by run_selftest, in the usual way
  }
  if (o.np <= 1) return std::nullopt;
  std::vector<std::string> cmd = launcher(o.np);
  cmd.push_back(self_path());
  cmd.insert(cmd.end(), args.begin(), args.end());
  // The ranks' exit status comes back through a file; mpiexec's alone cannot tell a failed case from a
  // launch that never ran.
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);  // TMPDIR, else /tmp
  if (ec) tmp = "/tmp";
  std::string status_file = (tmp / "surrogate-selftest-status-XXXXXX").string();
  const int fd = mkstemp(status_file.data());
  if (fd < 0) {
    std::cerr << "surrogate: error: cannot create '" << status_file << "': " << std::strerror(errno) << "\n";
    return kSelftestCannotRun;
  }
  close(fd);
  setenv(kStatusFileVariable, status_file.c_str(), 1);
  // N ranks share the node's cores: without an OpenMP setting, each rank takes its share.
  if (!std::getenv("OMP_NUM_THREADS") && o.threads == 0)
    setenv("OMP_NUM_THREADS", std::to_string(std::max(1u, std::thread::hardware_concurrency() / static_cast<unsigned>(o.np))).c_str(), 1);
  std::cout << "surrogate selftest: launching " << joined(cmd) << std::endl;
  std::vector<char*> argv;
  for (auto& w : cmd) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  int status = 0;
  if (spawned == 0)
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  std::ifstream in(status_file);
  int rc = -1;
  if (!(in >> rc)) rc = -1;
  std::remove(status_file.c_str());
  if (rc >= 0) return rc;
  // No status from rank 0 (it may have run on another node): every rank exiting 0 is a pass; anything else
  // cannot be told from a launch that failed.
  if (spawned == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  if (spawned != 0)
    std::cerr << "surrogate: error: cannot start '" << cmd[0] << "': " << std::strerror(spawned)
              << " (set SURROGATE_MPIEXEC to the MPI launcher, or run `mpiexec -n " << o.np << " surrogate selftest`)\n";
  else
    std::cerr << "surrogate: error: '" << joined(cmd) << "' ended ("
              << (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                    : "signal " + std::to_string(WTERMSIG(status)))
              << ") before the self-test finished\n";
  return kSelftestCannotRun;
}

// ---------------------------------------------------------------------------------------------------
int run_selftest(const std::vector<std::string>& args) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Options o = parse(args);  // every rank parses the same arguments
  if (o.np > 0 && o.np != size)
    throw UsageError("selftest --np " + std::to_string(o.np) + " runs on " + std::to_string(size) +
                     " MPI rank(s): under mpirun give the same number of ranks (or leave out --np)");
  const std::string dir = o.data.empty() ? default_data_dir() : o.data;
  const Setup setup = prepare(dir, rank);
  std::vector<Case> cases;
  std::string error = setup.error;
  if (error.empty()) {
    try {
      cases = parse_manifest(setup.manifest, (fs::path(dir) / "manifest.txt").string());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  int rc = 0;
  if (!error.empty()) {
    if (rank == 0) {
      std::cerr << "surrogate: error: " << error << "\n";
      std::error_code ec;
      if (!setup.scratch.empty()) fs::remove_all(setup.scratch, ec);
    }
    rc = kSelftestCannotRun;
  } else {
    const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
    if (rank == 0)
      std::cout << "surrogate selftest " << SURROGATE_VERSION_STRING << ": " << cases.size() << " cases from " << dir
                << ", " << size << " MPI rank(s) x " << threads << " OpenMP thread(s)\n"
                << std::flush;
    std::vector<std::string> failed;
    for (const Case& c : cases) {
      const fs::path folder = fs::path(dir) / c.name;
      const std::string output = (fs::path(setup.scratch) / (c.name + ".h5")).string();
      std::string why, detail;
      const double t0 = MPI_Wtime();
      try {  // collective: an error is the same on every rank
        run_predict({"--model", (folder / "model.h5").string(), "--input", (folder / "input.h5").string(), "--output",
                     output, "--quiet", "--threads", std::to_string(threads)});
      } catch (const std::exception& e) {
        why = std::string("surrogate predict failed: ") + e.what();
      }
      const double seconds = MPI_Wtime() - t0;
      if (rank == 0) {
        if (why.empty()) {
          try {
            why = compare(c, output, (folder / "reference.h5").string(), detail);
          } catch (const std::exception& e) {
            why = e.what();
          }
        }
        char line[160];
        std::snprintf(line, sizeof line, "  %s  %-30s %-8s %6.2f s  ", why.empty() ? "PASS" : "FAIL", c.name.c_str(),
                      c.family.c_str(), seconds);
        std::cout << line << (why.empty() ? detail : why) << "\n" << std::flush;
        if (!why.empty()) failed.push_back(c.name);
      }
    }
    if (rank == 0) {
      if (failed.empty()) {
        std::cout << "selftest: PASS, all " << cases.size() << " cases\n";
        std::error_code ec;
        fs::remove_all(setup.scratch, ec);
      } else {
        std::cout << "selftest: FAIL, " << failed.size() << " of " << cases.size() << " cases failed:";
        for (const auto& name : failed) std::cout << " " << name;
        std::cout << " (outputs kept in " << setup.scratch << ")\n";
        rc = kSelftestFailed;
      }
      std::cout << std::flush;
    }
  }
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  // Launched by launch_selftest: the status also goes back through the file (the ranks still exit with
  // it: where rank 0 runs on another node the launcher only has mpiexec's status).
  if (const char* status_file = std::getenv(kStatusFileVariable); status_file && rank == 0) {
    std::ofstream out(status_file);
    out << rc << "\n";
  }
  return rc;
}

}  // namespace surrogate::cli
