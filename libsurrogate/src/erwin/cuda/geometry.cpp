// A layout's geometry on the device for the Erwin CUDA forward (forward.hpp).
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "forward.hpp"

namespace surrogate::erwin::detail::cuda_forward {

// The geometry of a layout on the device: the positions of every level (level 0 the slots, then the
// children's means), ball-relative positions (tree and rotated order), the children's positions relative
// to their parent, the edges grouped by receiver, the layout's index arrays, and the work arrays. Host
// arithmetic is the CPU forward's (mean_pool, program::relative_to_group, program::order_edges); the
// rotated positions come from the layout (a collective exchange on a plan).
void ErwinCudaForward::set_geometry(Geometry& geometry) {
  g_ = &geometry;
  const DeviceLayout& layout = *g_->layout;
  const int d = cfg_.dimensionality, L = cfg_.levels();
  const std::span<const index_t> nodes = layout.level_nodes();
  const bool rotate = cfg_.rotate > 0;
  const index_t n = layout.points(), n_all = layout.points() + layout.halo_rows();
  steps_.run([&] { g_->layout->upload(device_, stream_); });

  g_->levels.clear();
  g_->levels.resize(static_cast<std::size_t>(L));
  std::vector<float> pos(layout.slot_positions().begin(), layout.slot_positions().end());
  std::size_t scratch_ld = 1, scratch_u = 1, scratch_h = 1, scratch_join = 1, scratch_z = 1;
  for (int i = 0; i < L; ++i) {
    const auto iu = static_cast<std::size_t>(i);
    Level& lv = g_->levels[iu];
    lv.index = i;
    lv.nodes = nodes[iu];
    lv.width = cfg_.c_hidden[iu];
    const int ball = cfg_.ball_sizes[iu];
    std::vector<float> rotated_pos;
    if (rotate) rotated_pos = layout.rotated_rows(i, pos, d);  // collective when distributed
    steps_.run([&] {
      upload(lv.pos, pos);
      upload(lv.rel, program::relative_to_group(pos, d, ball, d));
      if (rotate) {
        upload(lv.pos_rot, rotated_pos);
        upload(lv.rel_rot, program::relative_to_group(rotated_pos, d, ball, d));
      }
      lv.x.resize(static_cast<std::size_t>(std::max<index_t>(1, lv.nodes * lv.width)), device_);
    });
    const auto rows = static_cast<std::size_t>(lv.nodes);
    const auto D = static_cast<std::size_t>(lv.width);
    scratch_u = std::max(scratch_u, rows * 3 * D);
    scratch_h = std::max(scratch_h, rows * D * static_cast<std::size_t>(cfg_.mlp_ratio));
    scratch_ld = std::max(scratch_ld, rows * D);
    if (i + 1 == L) break;
    // The next level's positions and the children's positions relative to their parent (pooling and
    // unpooling use the same differences: child - mean of the stride group).
    const int s = cfg_.strides[iu];
    std::vector<float> parent = s == 1 ? pos : balltree::mean_pool(pos, d, s);
    const std::vector<float> child_rel = program::relative_to_group(pos, d, s, d);
    steps_.run([&] { upload(lv.child_rel, child_rel); });
    const auto np = static_cast<std::size_t>(nodes[iu + 1]), Dn = static_cast<std::size_t>(cfg_.c_hidden[iu + 1]);
    const auto su = static_cast<std::size_t>(s), du = static_cast<std::size_t>(d);
    scratch_join = std::max({scratch_join, np * su * (D + du), np * (Dn + su * du)});
    scratch_z = std::max(scratch_z, np * su * D);
    pos = std::move(parent);
  }

  // Edges grouped by receiver, each group in edge order, and p_src - p_dst per edge (program::order_edges).
  const auto D0 = static_cast<std::size_t>(cfg_.c_hidden[0]);
  const auto nu = static_cast<std::size_t>(n);
  g_->receiver_chunks.clear();
  program::EdgeOrder order;
  std::size_t most = 1;
  if (cfg_.mp_steps > 0) {
    order = program::order_edges(layout.edges(), layout.edge_positions(), d, n, n_all, edge_chunk_,
                                 omp_get_max_threads());  // the per-edge gathers on the run's threads
    if (order.bad_edge >= 0)  // the layouts check: a bug, agreed below
      steps_.run([&] {
        throw Error(ErrorCode::internal, "erwin: local edge " + std::to_string(order.bad_edge) + " out of range");
      });
    for (const auto& [r0, r1] : order.chunks)
      most = std::max<std::size_t>(most, static_cast<std::size_t>(order.start[static_cast<std::size_t>(r1)] -
                                                                  order.start[static_cast<std::size_t>(r0)]));
    g_->receiver_chunks = order.chunks;
    g_->edge_start_host = order.start;
  }
  steps_.run([&] {
    auto work = [&](program::Slot slot, std::size_t size) {
      g_->work[static_cast<std::size_t>(slot)].resize(std::max<std::size_t>(1, size), device_);
    };
    g_->xr.resize(scratch_ld, device_);
    work(program::Slot::h, scratch_ld);
    work(program::Slot::att, scratch_ld);
    work(program::Slot::u, scratch_u);
    work(program::Slot::a1, scratch_h);
    work(program::Slot::a2, scratch_h);
    work(program::Slot::join, scratch_join);
    work(program::Slot::z, scratch_z);
    if (cfg_.mp_steps > 0) {
      upload(g_->edge_src, std::span<const std::int64_t>(order.src));
      upload(g_->edge_dst, std::span<const std::int64_t>(order.dst));
      upload(g_->edge_start, order.start);
      upload(g_->edge_rel, std::span<const float>(order.rel));
      work(program::Slot::msg_in, most * (2 * D0 + static_cast<std::size_t>(d)));
      work(program::Slot::msg, most * D0);
      work(program::Slot::upd_in, nu * 2 * D0);
      work(program::Slot::upd, nu * D0);
      g_->agg.resize(std::max<std::size_t>(1, nu * D0), device_);
    }
    g_->h.resize(std::max<std::size_t>(1, static_cast<std::size_t>(n_all) * D0), device_);
    g_->out.resize(std::max<std::size_t>(1, nu * D0), device_);
    g_->features.resize(std::max<std::size_t>(1, nu * static_cast<std::size_t>(cfg_.c_in)), device_);
    if (wrapper_) {  // the network's features (the wrapper's Fourier features: fixed by the points) and
                     // pred_head's rows
      upload(g_->positions, layout.point_positions());
      const auto dev = ops::Place::device;
      CudaOps ops = device_ops();
      balltree::wrapper::features(ops, *wrapper_, {g_->positions.data(), d, n, d, dev},
                                  {g_->features.data(), cfg_.c_in, n, cfg_.c_in, dev});
      g_->head_hidden.resize(std::max<std::size_t>(1, nu * D0), device_);
      g_->values.resize(std::max<std::size_t>(1, nu), device_);
    }
    stream_.synchronize();  // the host arrays above are released on return
  });
  steps_.agree();
}

}  // namespace surrogate::erwin::detail::cuda_forward
