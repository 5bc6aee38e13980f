// What `surrogate predict` reports about its own run: a progress line on a terminal for long runs, and the
// --timing table (every phase's time per rank, min .. max over the ranks; the exchanges' bytes and time).
// share/docs/cli.md, "Timing".
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "surrogate/mpi_comm.hpp"
#include "surrogate/profile.hpp"
#include "surrogate/transport.hpp"  // Traffic

namespace surrogate::cli {

/// On rank 0 with stderr a terminal: after `delay` seconds, a line "surrogate predict: 12 s, <phase>"
/// rewritten every half second until stop() (then erased). Elsewhere nothing.
class Progress {
 public:
  Progress(const MpiComm& comm, bool enabled, double delay = 3.0);
  ~Progress();
  void stop();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

/// Collective. Every rank receives the --timing lines: for every phase any rank ran (in the order rank 0
/// first ran them, then the others'; inner phases indented under their outer one), its seconds min .. max
/// over the ranks; the exchanges' time and bytes sent / received per rank. `phases` are this rank's.
std::string timing_report(const MpiComm& comm, const std::vector<Profile::Phase>& phases, const Traffic& traffic);

}  // namespace surrogate::cli
