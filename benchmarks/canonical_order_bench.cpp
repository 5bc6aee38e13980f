// The memory of the canonical step of distributed Erwin / BSA (PointCloudModel::gather_canonical in block
// mode, share/docs/balltree.md "Running Erwin"), alone, per rank:
//   mpirun -np P canonical_order_bench MODEL.h5 POINTS SAMPLES
// Each rank makes its slab of POINTS random 3-D points (rank-major ids, SAMPLES equal samples), resets its
// peak resident size (/proc/self/clear_refs 5), runs the step once and prints its peak resident size
// above the resident size before the step (VmHWM - VmRSS, kB), the largest point buffer the step reports
// and the time. MODEL.h5 only provides the model file the PointCloudModel needs (no forward is run).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "balltree/point_cloud_model.hpp"
#include "surrogate/error.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

class Probe final : public surrogate::PointCloudModel {
 public:
  explicit Probe(const surrogate::ModelFile& file) : PointCloudModel(file, 0, 1, 3, false) {}
  surrogate::index_t parameter_count() const override { return 0; }
  std::vector<std::pair<std::string, std::string>> describe() const override { return {}; }

 protected:
  // Only gather_canonical is timed; a forward is never run.
  void forward(const surrogate::Comm&, surrogate::Plan&, const Io&, const surrogate::RunOptions&) override {
    throw surrogate::Error(surrogate::ErrorCode::internal, "Probe has no forward");
  }
};

/// A "Vm...:" value of /proc/self/status in kB.
long status_kb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    if (argc != 4) throw surrogate::Error(surrogate::ErrorCode::invalid_argument, "usage: canonical_order_bench MODEL.h5 POINTS SAMPLES");
    const surrogate::MpiComm comm(MPI_COMM_WORLD);
    const std::int64_t total = std::stoll(argv[2]), samples = std::stoll(argv[3]);
    const int rank = comm.rank(), P = comm.size();
    const std::int64_t first = total * rank / P, n = total * (rank + 1) / P - first;
    std::vector<float> positions(static_cast<std::size_t>(3 * n));
    std::vector<std::int64_t> sample(static_cast<std::size_t>(n)), ids(static_cast<std::size_t>(n));
    std::mt19937 gen(static_cast<unsigned>(rank) + 1u);
    std::uniform_real_distribution<float> uniform;
    for (float& v : positions) v = uniform(gen);
    for (std::int64_t i = 0; i < n; ++i) {
      ids[static_cast<std::size_t>(i)] = first + i;
      sample[static_cast<std::size_t>(i)] = (first + i) * samples / total;
    }
    const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm, n, sample.data());
    surrogate::PointGeometry geometry;
    geometry.positions = positions.data();
    geometry.ld_positions = 3;
    geometry.global_ids = ids.data();
    const Probe probe(surrogate::ModelFile::read(argv[1]));
    comm.barrier();
    { std::ofstream("/proc/self/clear_refs") << "5"; }
    const long before = status_kb("VmRSS");
    const auto t0 = std::chrono::steady_clock::now();
    const surrogate::CanonicalBatch all = probe.gather_canonical(comm, layout, geometry, nullptr, 0, false, true, 1);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const long peak = status_kb("VmHWM");
    std::printf("rank %d of %d: %lld local points of %lld, step peak above its start %ld kB, largest point buffer %lld, "
                "block %lld rows, %.3f s\n",
                rank, P, static_cast<long long>(n), static_cast<long long>(total), peak - before,
                static_cast<long long>(all.largest_point_buffer), static_cast<long long>(all.owner_rank.size()), seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "canonical_order_bench: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
