// `surrogate selftest [--np N] [--data DIR] [--threads N]`: the installed tool runs the shipped models on
// the shipped inputs (share/selftest, installed as <prefix>/share/surrogate/selftest) and compares its
// predictions with the official codes' outputs. share/docs/cli.md, "selftest".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "surrogate/error.hpp"

namespace surrogate::cli {

/// A mistake on the command line (cli.md: exit status 2): an unknown option, a missing or malformed
/// value, ranks that were given different options, an output that is one of the inputs.
struct UsageError : Error {
  explicit UsageError(const std::string& message) : Error(ErrorCode::invalid_argument, message) {}
};

/// Exit statuses of `surrogate selftest` beyond 0 (every case passed) and 2 (usage).
inline constexpr int kSelftestFailed = 1;     // a case's prediction differs beyond its tolerance, or failed
inline constexpr int kSelftestCannotRun = 3;  // no self-test data, a malformed manifest, mpiexec did not start

/// `surrogate predict` (surrogate_cli.cpp). Collective over MPI_COMM_WORLD.
int run_predict(const std::vector<std::string>& args);

/// Before MPI_Init. `selftest --np N` (N > 1) outside an MPI launcher starts `mpiexec -n N <this program>
/// selftest ...`, waits for it and returns the self-test's exit status; nullopt for every other command
/// line (the self-test then runs in this process, on the ranks it was started with).
std::optional<int> launch_selftest(const std::vector<std::string>& args);

/// Collective over MPI_COMM_WORLD: runs every case of the manifest, rank 0 prints PASS / FAIL per case and
/// a summary. Returns the same exit status on every rank; throws UsageError for a bad command line.
int run_selftest(const std::vector<std::string>& args);

}  // namespace surrogate::cli
