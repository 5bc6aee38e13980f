// Structure-aware libFuzzer harness of the point-file reader (share/docs/reliability.md §4): the input builds
// a point file (/coords, /features, /batch_idx, /target, /sample_features, /edge_index: presence, class,
// shape, values), written well formed, then read with read_point_file on one rank and its samples laid out
// as `surrogate predict` does. surrogate::Error is the expected outcome; anything else is a finding.
#include <dlfcn.h>
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "structured_h5.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"
#include "surrogate/point_file.hpp"

namespace {

using fuzz::Cls;
using fuzz::Item;

std::unique_ptr<surrogate::MpiComm> comm;

Item real_dataset(FuzzedDataProvider& fdp, const char* name, std::vector<std::uint64_t> shape) {
  Item item{"", name, true, fdp.ConsumeBool() ? Cls::f32 : Cls::f64, std::move(shape), {}, {}, {}};
  for (std::uint64_t i = 0; i < fuzz::numel(item.shape) && i < 4096; ++i)
    item.reals.push_back(fdp.ConsumeIntegralInRange<int>(0, 31) == 0 ? fuzz::pick_real(fdp)
                                                                     : fdp.ConsumeFloatingPointInRange<double>(-1, 1));
  return item;
}

std::vector<Item> build(FuzzedDataProvider& fdp) {
  const std::uint64_t n = fdp.ConsumeIntegralInRange<std::uint64_t>(0, 40);
  const std::uint64_t dim = fdp.ConsumeIntegralInRange<std::uint64_t>(1, 3);
  const std::uint64_t channels = fdp.ConsumeIntegralInRange<std::uint64_t>(0, 4);
  const std::uint64_t samples = fdp.ConsumeIntegralInRange<std::uint64_t>(1, 3);
  std::vector<Item> items;
  const std::uint8_t present = fdp.ConsumeIntegral<std::uint8_t>();
  if (present & 1) items.push_back(real_dataset(fdp, "coords", {n, dim}));
  if (present & 2) items.push_back(real_dataset(fdp, "features", {n, channels}));
  if (present & 4) {  // sample-major ids 0 .. samples-1
    Item ids{"", "batch_idx", true, Cls::i64, {n}, {}, {}, {}};
    for (std::uint64_t i = 0; i < n; ++i) ids.ints.push_back(static_cast<std::int64_t>(i * samples / n));
    items.push_back(std::move(ids));
  }
  if (present & 8) items.push_back(real_dataset(fdp, "target", {n, channels}));
  if (present & 16) items.push_back(real_dataset(fdp, "sample_features", {samples, 2}));
  if (present & 32) {
    const std::uint64_t e = fdp.ConsumeIntegralInRange<std::uint64_t>(0, 20);
    Item edges{"", "edge_index", true, Cls::i64, {2, e}, {}, {}, {}};
    for (std::uint64_t k = 0; k < 2 * e; ++k)
      edges.ints.push_back(fdp.ConsumeIntegralInRange<std::int64_t>(0, static_cast<std::int64_t>(n)));
    items.push_back(std::move(edges));
  }
  if (present & 64) items.push_back(Item{"", "features", false, Cls::str_vlen, {}, {}, {}, {"an attribute"}});
  static const std::vector<std::string> pool = {"coords", "features", "batch_idx", "target", "sample_features",
                                                "edge_index", "prediction"};
  const int count = fdp.ConsumeIntegralInRange<int>(0, 4);
  for (int m = 0; m < count && !items.empty(); ++m) {
    Item& item = items[fdp.ConsumeIntegralInRange<std::size_t>(0, items.size() - 1)];
    switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: fuzz::convert(item, static_cast<Cls>(fdp.ConsumeIntegralInRange<int>(0, fuzz::kClasses - 1))); break;
      case 1: item.shape = fuzz::pick_shape(fdp, item.shape, item.dataset); break;
      case 2: item.name = pool[fdp.ConsumeIntegralInRange<std::size_t>(0, pool.size() - 1)]; break;
      default: fuzz::mutate_values(fdp, item, pool); break;
    }
  }
  return items;
}

}  // namespace

// Open MPI's allocations at exit are not ours; libFuzzer still checks every input for leaks.
extern "C" const char* __asan_default_options() { return "leak_check_at_exit=0"; }
// Open MPI's MPI-IO components (io, fcoll, coll) allocate state on their first use and keep it; an input
// that reaches one makes LeakSanitizer report that and everything MPI_Init left unreachable (PMIx, hwloc,
// opal). Those allocations are Open MPI's: suppressed by module. libmpi itself is not, so an MPI object
// this library failed to free would still be reported.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:mca_coll_\nleak:mca_fcoll_\nleak:mca_io_\nleak:mca_fbtl_\nleak:mca_sharedfp_\n"
         "leak:libmca_common_ompio\nleak:libopen-pal\nleak:libpmix\nleak:libhwloc\nleak:__vasprintf_internal\n";
}

namespace {
/// Keeps Open MPI's component libraries loaded for the whole run (RTLD_NODELETE), so that LeakSanitizer can
/// name the module of their allocations after Open MPI closes them (the suppressions above match by name).
void pin_open_mpi_components() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&MPI_Init), &info) || !info.dli_fname) return;
  const std::filesystem::path lib = std::filesystem::path(info.dli_fname).parent_path();
  for (const auto& dir : {lib / "openmpi3", lib / "openmpi" / "lib" / "openmpi3", lib / "openmpi"}) {  // Debian: the second
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
      if (entry.path().extension() == ".so" && entry.path().filename().string().rfind("mca_", 0) == 0)
        (void)dlopen(entry.path().c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
  }
}

/// Builds the file of one input, reads it and lays out its samples.
void run_one(const std::uint8_t* data, std::size_t size) {
  static const std::string path = fuzz::scratch_path("surrogate_fuzz_points");
  FuzzedDataProvider fdp(data, size);
  fuzz::write_file(path, build(fdp));
  try {
    const surrogate::PointSlab slab = surrogate::read_point_file(*comm, path);
    (void)surrogate::SampleLayout::build(*comm, slab.count, slab.sample_ids.empty() ? nullptr : slab.sample_ids.data());
  } catch (const surrogate::Error&) {
  }
  std::remove(path.c_str());
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  pin_open_mpi_components();
  MPI_Init(argc, argv);
  comm = std::make_unique<surrogate::MpiComm>(MPI_COMM_SELF);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  run_one(data, size);
  if (fuzz::open_hdf5_objects() != 0) __builtin_trap();
  return 0;
}
