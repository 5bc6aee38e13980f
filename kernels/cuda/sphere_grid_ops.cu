// Launchers of the DISCO contraction, the grouped linear layer and ResampleS2 (the device code is in
// sphere_grid_ops_kernels.cuh; what they compute: surrogate/kernels/cuda_sphere_grid_ops.hpp). Argument
// errors are std::invalid_argument, thrown before anything is enqueued.
#include <stdexcept>
#include <string>

#include "launch.cuh"
#include "sphere_grid_ops_kernels.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_sphere_grid_ops.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

using namespace sphere_grid_kernels;

[[noreturn]] void bad(const char* what, const std::string& m) { throw std::invalid_argument(std::string(what) + ": " + m); }

unsigned blocks_for(index_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

void disco_contraction(const DiscoContractionArgs& a, const DiscoTable& table, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, disco_contraction(a, table, stream));
  constexpr const char* what = "cuda::disco_contraction";
  if (a.batch < 0 || a.nlat_in < 1 || a.nlon_in < 1 || a.nlat_out < 1 || a.nlon_out < 1 || a.nlon_in % a.nlon_out)
    bad(what, "grid sizes must be positive and nlon_out must divide nlon_in");
  if (a.channels < 1 || a.groups < 1 || a.channels % a.groups) bad(what, "channels must be a positive multiple of groups");
  if (table.kernel_size < 1) bad(what, "kernel_size must be positive");
  if (a.ldx < a.channels || a.ldy < static_cast<index_t>(table.kernel_size) * a.channels)
    bad(what, "row strides ldx >= channels and ldy >= kernel_size * channels required");
  if (a.rows_begin < 0 || a.rows_end < a.rows_begin || a.rows_end > static_cast<index_t>(a.batch) * a.nlat_out ||
      a.rows_end - a.rows_begin > 65535)
    bad(what, "rows [" + std::to_string(a.rows_begin) + ", " + std::to_string(a.rows_end) +
                  ") must lie in [0, batch * nlat_out) and number at most 65535");
  if (a.rows_end == a.rows_begin) return;
  const dim3 grid(blocks_for(static_cast<index_t>(a.nlon_out) * a.channels), static_cast<unsigned>(a.rows_end - a.rows_begin));
  launch(disco_contraction_kernel, grid, kThreads, 0, stream, a, table);
  check_launch("disco_contraction_kernel");
}

void grouped_linear(const GroupedLinearArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, grouped_linear(a, stream));
  constexpr const char* what = "cuda::grouped_linear";
  if (a.in < 1 || a.out < 1 || a.groups < 1 || a.groups > 65535 || (a.out + kTileOut - 1) / kTileOut > 65535)
    bad(what, "in, out and groups must be positive (out and groups within the launch limits)");
  if (a.rows < 0 || (a.rows + kTileRows - 1) / kTileRows > 2147483647)
    bad(what, "rows = " + std::to_string(a.rows) + " outside the launch limits");
  if (a.ldx < static_cast<index_t>(a.groups) * a.in || a.ldy < static_cast<index_t>(a.groups) * a.out)
    bad(what, "row strides below groups * in / groups * out");
  if (a.rows == 0) return;
  const dim3 grid(static_cast<unsigned>((a.rows + kTileRows - 1) / kTileRows),
                  static_cast<unsigned>((a.out + kTileOut - 1) / kTileOut), static_cast<unsigned>(a.groups));
  launch(grouped_linear_kernel, grid, kThreads, 0, stream, a);
  check_launch("grouped_linear_kernel");
}

void resample(const ResampleArgs& a, const ResampleTables& t, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, resample(a, t, stream));
  constexpr const char* what = "cuda::resample";
  if (a.batch < 0 || a.channels < 1 || a.nlat_in < 1 || a.nlon_in < 1 || a.nlat_out < 1 || a.nlon_out < 1)
    bad(what, "sizes must be positive");
  if (t.expand_poles && !a.poles) bad(what, "the pole expansion needs the poles scratch");
  if (a.batch == 0) return;
  if (t.expand_poles) {
    launch(resample_poles_kernel, blocks_for(static_cast<index_t>(a.batch) * 2 * a.channels), kThreads, 0, stream, 
        a, t.spherical);
    check_launch("resample_poles_kernel");
  }
  const index_t n = static_cast<index_t>(a.batch) * ((a.out_end < 0 ? a.nlat_out : a.out_end) - a.out_begin) * a.nlon_out * a.channels;
  if ((n + kThreads - 1) / kThreads > 2147483647) bad(what, "too many output values for one launch");
  launch(resample_interpolate_kernel, blocks_for(n), kThreads, 0, stream, a, t);
  check_launch("resample_interpolate_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
