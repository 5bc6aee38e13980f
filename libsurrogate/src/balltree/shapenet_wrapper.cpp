// The ShapeNet-Car wrapper on the CPU (shapenet_wrapper.hpp): its programs over HostOps in tiles of rows.
#include "shapenet_wrapper.hpp"

#include <omp.h>

#include <algorithm>

#include "../layers.hpp"

namespace surrogate::balltree::wrapper {
namespace {

using kernels::index_t;
using kernels::kPad;
using kernels::round_up;

enum class Slot : std::uint8_t { in, hidden, out, count };
constexpr index_t kTile = 64;

int thread_count(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

}  // namespace

Layers<ops::HostOps> read(const ModelFile& file) {
  return {file.weight("pos_enc.linear.weight").values, pack_linear(file, "pred_head.0"),
          pack_linear(file, "pred_head.2")};
}

std::vector<float> fourier(const Layers<ops::HostOps>& w, std::span<const float> positions, int dim, int threads) {
  const auto c_in = static_cast<int>(2 * w.frequencies.size() / static_cast<std::size_t>(dim));
  const auto n = static_cast<index_t>(positions.size()) / dim;
  std::vector<float> out(static_cast<std::size_t>(n * c_in));
  ops::parallel_tiles<ops::HostOps, ops::HostWork<Slot>>(
      thread_count(threads), n, kTile * 16, [&](ops::HostOps& o, ops::HostWork<Slot>&, index_t r0, index_t rows) {
        features(o, w, ops::view(positions.data() + r0 * dim, dim, rows, dim, ops::Place::host),
                 {out.data() + r0 * c_in, c_in, rows, c_in, ops::Place::host});
      });
  return out;
}

std::vector<float> head(const Layers<ops::HostOps>& w, std::span<const float> y, int width, int threads) {
  const auto n = static_cast<index_t>(y.size()) / width;
  std::vector<float> out(static_cast<std::size_t>(n));
  ops::parallel_tiles<ops::HostOps, ops::HostWork<Slot>>(
      thread_count(threads), n, kTile, [&](ops::HostOps& o, ops::HostWork<Slot>& work, index_t r0, index_t rows) {
        // The kernels' rows: strides of kPad values, padding columns zero (the work rows are made zero).
        const Rows in = work.rows(Slot::in, kTile, width), hidden = work.rows(Slot::hidden, kTile, width);
        const Rows values = work.rows(Slot::out, kTile, 1);
        for (index_t r = 0; r < rows; ++r) std::copy_n(y.data() + (r0 + r) * width, width, in.row(r));
        head(o, w, in.range(0, rows), hidden.range(0, rows), values.range(0, rows));
        for (index_t r = 0; r < rows; ++r) out[static_cast<std::size_t>(r0 + r)] = *values.row(r);
      });
  return out;
}

}  // namespace surrogate::balltree::wrapper
