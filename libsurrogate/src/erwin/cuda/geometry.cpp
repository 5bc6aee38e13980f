// A layout's geometry on the device for the Erwin CUDA forward (forward.hpp).
#include <algorithm>
#include <string>
#include <vector>

#include "../../balltree/cuda/geometry.hpp"
#include "forward.hpp"

namespace surrogate::erwin::detail::cuda_forward {

// The geometry of a layout on the device: the positions of every level (level 0 the slots, then the
// children's means), ball-relative positions (tree and rotated order), the children's positions relative
// to their parent, the edges grouped by receiver, the layout's index arrays, and the work arrays. Host
// arithmetic is the CPU forward's (mean_pool, ball_relative); the rotated positions come from the layout
// (a collective exchange on a plan).
void ErwinCudaForward::set_geometry(Geometry& geometry) {
  g_ = &geometry;
  const DeviceLayout& layout = *g_->layout;
  const int d = cfg_.dimensionality, L = cfg_.levels();
  const std::span<const index_t> nodes = layout.level_nodes();
  const bool rotate = cfg_.rotate > 0;
  const index_t n = layout.points(), n_all = layout.points() + layout.halo_rows();
  launch([&] { g_->layout->upload(device_, stream_); });

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
    launch([&] {
      upload(lv.pos, pos);
      upload(lv.rel, balltree::device::ball_relative(pos, d, ball));
      if (rotate) {
        upload(lv.pos_rot, rotated_pos);
        upload(lv.rel_rot, balltree::device::ball_relative(rotated_pos, d, ball));
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
    std::vector<float> child_rel(pos.size());
    for (std::size_t c = 0; c < pos.size() / static_cast<std::size_t>(d); ++c)
      for (int e = 0; e < d; ++e)
        child_rel[c * d + e] = pos[c * d + e] - parent[(c / static_cast<std::size_t>(s)) * d + e];
    launch([&] { upload(lv.child_rel, child_rel); });
    const auto np = static_cast<std::size_t>(nodes[iu + 1]), Dn = static_cast<std::size_t>(cfg_.c_hidden[iu + 1]);
    const auto su = static_cast<std::size_t>(s), du = static_cast<std::size_t>(d);
    scratch_join = std::max({scratch_join, np * su * (D + du), np * (Dn + su * du)});
    scratch_z = std::max(scratch_z, np * su * D);
    pos = std::move(parent);
  }

  // Edges grouped by receiver, each group in edge order (as run_mpnn), and p_src - p_dst per edge.
  const auto D0 = static_cast<std::size_t>(cfg_.c_hidden[0]);
  const auto nu = static_cast<std::size_t>(n);
  g_->receiver_chunks.clear();
  std::vector<std::int64_t> start(nu + 1, 0), src_sorted, dst_sorted;
  std::vector<float> rel;
  std::size_t most = 1;
  if (cfg_.mp_steps > 0) {
    const std::span<const std::int64_t> edge_index = layout.edges();
    const std::span<const float> positions = layout.edge_positions();
    std::size_t E = edge_index.size() / 2;
    const std::int64_t* src = edge_index.data();
    const std::int64_t* dst = edge_index.data() + E;
    for (std::size_t e = 0; e < E; ++e)
      if (src[e] < 0 || src[e] >= n_all || dst[e] < 0 || dst[e] >= n) {  // the layouts check: a bug, agreed below
        if (pending_.ok()) pending_ = {ErrorCode::internal, "erwin: local edge " + std::to_string(e) + " out of range"};
        E = 0;
      }
    std::vector<std::int64_t> fill(nu);
    src_sorted.resize(E);
    dst_sorted.resize(E);
    for (std::size_t e = 0; e < E; ++e) ++start[static_cast<std::size_t>(dst[e]) + 1];
    for (std::size_t i = 0; i < nu; ++i) start[i + 1] += start[i];
    std::copy(start.begin(), start.end() - 1, fill.begin());
    rel.resize(E * static_cast<std::size_t>(d));
    for (std::size_t e = 0; e < E; ++e) {
      const auto q = static_cast<std::size_t>(fill[static_cast<std::size_t>(dst[e])]++);
      src_sorted[q] = src[e];
      dst_sorted[q] = dst[e];
      for (int c = 0; c < d; ++c) rel[q * d + c] = positions[static_cast<std::size_t>(src[e] * d + c)] - positions[static_cast<std::size_t>(dst[e] * d + c)];
    }
    for (index_t r0 = 0; r0 < n;) {
      index_t r1 = r0 + 1;
      while (r1 < n && start[static_cast<std::size_t>(r1) + 1] - start[static_cast<std::size_t>(r0)] <= edge_chunk_) ++r1;
      g_->receiver_chunks.emplace_back(r0, r1);
      most = std::max<std::size_t>(most, static_cast<std::size_t>(start[static_cast<std::size_t>(r1)] - start[static_cast<std::size_t>(r0)]));
      r0 = r1;
    }
    g_->edge_start_host = start;
  }
  launch([&] {
    for (cu::DeviceBuffer<float>* b : {&g_->xr, &g_->hb, &g_->att}) b->resize(scratch_ld, device_);
    g_->u.resize(scratch_u, device_);
    g_->a1.resize(scratch_h, device_);
    g_->a2.resize(scratch_h, device_);
    g_->join.resize(scratch_join, device_);
    g_->z.resize(scratch_z, device_);
    if (cfg_.mp_steps > 0) {
      upload(g_->edge_src, src_sorted);
      upload(g_->edge_dst, dst_sorted);
      upload(g_->edge_start, start);
      upload(g_->edge_rel, rel);
      g_->msg_in.resize(most * (2 * D0 + static_cast<std::size_t>(d)), device_);
      g_->msg.resize(most * D0, device_);
      g_->agg.resize(std::max<std::size_t>(1, nu * D0), device_);
      g_->upd_in.resize(std::max<std::size_t>(1, nu * 2 * D0), device_);
      g_->upd.resize(std::max<std::size_t>(1, nu * D0), device_);
    }
    g_->h.resize(std::max<std::size_t>(1, static_cast<std::size_t>(n_all) * D0), device_);
    g_->out.resize(std::max<std::size_t>(1, nu * D0), device_);
    g_->features.resize(std::max<std::size_t>(1, nu * static_cast<std::size_t>(cfg_.c_in)), device_);
    stream_.synchronize();  // the host arrays above are released on return
  });
  agree_pending();
}

}  // namespace surrogate::erwin::detail::cuda_forward
