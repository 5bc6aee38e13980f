// Progress line and --timing table of `surrogate predict` (run_report.hpp).
#include "run_report.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>


namespace surrogate::cli {

Progress::Progress(const MpiComm& comm, bool enabled, double delay) {
  if (!enabled || comm.rank() != 0 || isatty(STDERR_FILENO) != 1) return;
  thread_ = std::thread([this, delay] {
    const auto start = std::chrono::steady_clock::now();
    bool shown = false;
    int tick = 0;
    while (!done_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s < delay || done_.load()) continue;
      if (++tick % 5 != 1) continue;  // every half second
      std::fprintf(stderr, "\r  surrogate predict: %.0f s, %-60.60s", s, running_phase());
      std::fflush(stderr);
      shown = true;
    }
    if (shown) {
      std::fprintf(stderr, "\r%90s\r", "");
      std::fflush(stderr);
    }
  });
}

Progress::~Progress() { stop(); }

void Progress::stop() {
  done_.store(true);
  if (thread_.joinable()) thread_.join();
}

namespace {

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, s < 10 ? "%.3f" : "%.1f", s);
  return text;
}

std::string bytes(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000.0 && u < 4) {
    b /= 1000.0;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return text;
}

}  // namespace

std::string timing_report(const MpiComm& comm, const std::vector<Profile::Phase>& phases, const Traffic& traffic) {
  // Every rank's phases as "depth\tname\tseconds\n" lines, all-gathered (phases may differ between ranks:
  // a rank without points skips some).
  std::string mine;
  for (const Profile::Phase& p : phases)
    mine += std::to_string(p.depth) + "\t" + p.name + "\t" + std::to_string(p.seconds) + "\n";
  const int P = comm.size();
  std::vector<std::size_t> sizes(static_cast<std::size_t>(P)), offsets(static_cast<std::size_t>(P));
  const std::size_t my_size = mine.size();
  comm.allgather(&my_size, sizeof my_size, sizes.data());
  std::size_t total = 0;
  for (int r = 0; r < P; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += sizes[static_cast<std::size_t>(r)];
  }
  std::string all(total, '\0');
  comm.allgatherv(mine.data(), mine.size(), all.data(), sizes, offsets);
  struct Row {
    std::string name;
    int depth = 0;
    double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
    int ranks = 0;
  };
  std::vector<Row> rows;
  for (int r = 0; r < P; ++r) {
    std::istringstream in(all.substr(offsets[static_cast<std::size_t>(r)], sizes[static_cast<std::size_t>(r)]));
    std::string line;
    while (std::getline(in, line)) {
      const auto tab1 = line.find('\t'), tab2 = line.rfind('\t');
      const int depth = std::stoi(line.substr(0, tab1));
      const std::string name = line.substr(tab1 + 1, tab2 - tab1 - 1);
      const double s = std::stod(line.substr(tab2 + 1));
      auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& row) { return row.name == name; });
      if (it == rows.end()) it = rows.insert(rows.end(), Row{name, depth});
      it->lo = std::min(it->lo, s);
      it->hi = std::max(it->hi, s);
      ++it->ranks;
    }
  }
  double t[4] = {traffic.seconds, static_cast<double>(traffic.sent), static_cast<double>(traffic.received), 0.0};
  double lo[4], hi[4];
  std::copy(t, t + 4, lo);
  std::copy(t, t + 4, hi);
  comm.allreduce(std::span<double>(lo, 4), ReduceOp::min);
  comm.allreduce(std::span<double>(hi, 4), ReduceOp::max);
  std::ostringstream o;
  o << "  timing      per rank, min .. max over the " << P << " rank(s), seconds (a phase includes the exchanges in it):\n";
  std::size_t width = 0;
  for (const Row& row : rows) width = std::max(width, 2 * static_cast<std::size_t>(row.depth) + row.name.size());
  for (const Row& row : rows) {
    const double row_lo = row.ranks < P ? 0.0 : row.lo;  // a rank that never ran the phase spent 0 s in it
    const std::size_t indent = 2 * static_cast<std::size_t>(row.depth);
    o << "                " << std::string(indent, ' ') << row.name
      << std::string(width - indent - row.name.size() + 2, ' ') << seconds(row_lo) << " .. " << seconds(row.hi) << "\n";
  }
  o << "  exchanges   per rank, min .. max: " << seconds(lo[0]) << " .. " << seconds(hi[0]) << " s; sent "
    << bytes(lo[1]) << " .. " << bytes(hi[1]) << ", received " << bytes(lo[2]) << " .. " << bytes(hi[2]) << "\n";
  return o.str();
}

}  // namespace surrogate::cli
