// A layout's geometry on the device for the Erwin CUDA forward (forward.hpp).
#include <algorithm>
#include <string>
#include <vector>

#include "../../balltree/cuda/geometry.hpp"
#include "forward.hpp"
#include "surrogate/kernels/cuda_ball_geometry.hpp"

namespace surrogate::erwin::detail::cuda_forward {

// The geometry of a layout on the device: the positions of every level (level 0 the slots, then the
// children's means), ball-relative positions (tree and rotated order), the children's positions relative
// to their parent, the edges grouped by receiver, the layout's index arrays, and the work arrays. Computed
// on the device from the points' or a plan's slots' positions and the edges (each uploaded once;
// surrogate/kernels/cuda_ball_geometry.hpp), bit for
// bit the CPU forward's arithmetic (balltree::mean_pool, program::relative_to_group, program::order_edges);
// the rotated positions are the layout's movement of the level's positions (an exchange on a plan). The
// host waits once, for the edges' offsets (the receiver chunks of the message passing).
void ErwinCudaForward::set_geometry(Geometry& geometry) {
  g_ = &geometry;
  DeviceLayout& layout = *g_->layout;
  const int d = cfg_.dimensionality, L = cfg_.levels();
  const std::span<const index_t> nodes = layout.level_nodes();
  const bool rotate = cfg_.rotate > 0;
  const index_t n = layout.points(), n_all = layout.points() + layout.halo_rows();
  const auto du = static_cast<std::size_t>(d);
  const bool one_process = layout.comm() == nullptr, messages = cfg_.mp_steps > 0;
  steps_.run([&] { layout.upload(device_, stream_); });

  g_->levels.clear();
  g_->levels.resize(static_cast<std::size_t>(L));
  cu::DeviceBuffer<float> centres;  // a level's ball centres
  std::size_t scratch_ld = 1, scratch_u = 1, scratch_h = 1, scratch_join = 1, scratch_z = 1;
  steps_.run([&] {
    for (int i = 0; i < L; ++i) {
      const auto iu = static_cast<std::size_t>(i);
      Level& lv = g_->levels[iu];
      lv.index = i;
      lv.nodes = nodes[iu];
      lv.width = cfg_.c_hidden[iu];
      const auto rows = static_cast<std::size_t>(lv.nodes), D = static_cast<std::size_t>(lv.width);
      for (cu::DeviceBuffer<float>* b : {&lv.pos, &lv.rel}) b->resize(rows * du, device_);
      if (rotate)
        for (cu::DeviceBuffer<float>* b : {&lv.pos_rot, &lv.rel_rot}) b->resize(rows * du, device_);
      lv.x.resize(std::max<std::size_t>(1, rows * D), device_);
      scratch_u = std::max(scratch_u, rows * 3 * D);
      scratch_h = std::max(scratch_h, rows * D * static_cast<std::size_t>(cfg_.mlp_ratio));
      scratch_ld = std::max(scratch_ld, rows * D);
      if (i + 1 == L) break;
      lv.child_rel.resize(rows * du, device_);
      const auto s = static_cast<std::size_t>(cfg_.strides[iu]);
      const auto np = static_cast<std::size_t>(nodes[iu + 1]), Dn = static_cast<std::size_t>(cfg_.c_hidden[iu + 1]);
      scratch_join = std::max({scratch_join, np * s * (D + du), np * (Dn + s * du)});
      scratch_z = std::max(scratch_z, np * s * D);
    }
    // The positions go up once: the points' (with message passing, followed by the halo's, the edges'
    // sources). In one process the slots' positions are gathered from them; the edges' offsets and the
    // wrapper's features read them.
    if (messages) upload(g_->positions, layout.edge_positions());
    else if (one_process || wrapper_) upload(g_->positions, layout.point_positions());
    if (one_process)
      layout.to_slots(g_->positions.data(), d, g_->levels[0].pos.data(), d, d, stream_);
    else
      upload(g_->levels[0].pos, layout.slot_positions());
  });
  const auto relative = [&](const float* rows, index_t count, int ball, float* rel) {
    balltree::device::ball_relative(rows, count, d, ball, rel, centres, device_, stream_.get());
  };
  for (int i = 0; i < L; ++i) {
    const auto iu = static_cast<std::size_t>(i);
    Level& lv = g_->levels[iu];
    const int ball = cfg_.ball_sizes[iu];
    steps_.run([&] {
      if (i > 0) {  // this level's positions: the previous level's pooled by its stride (copied for 1)
        Level& prev = g_->levels[iu - 1];
        const int s = cfg_.strides[iu - 1];
        if (s == 1)
          cu::copy_on_device(lv.pos.data(), prev.pos.data(), static_cast<std::size_t>(lv.nodes) * du * sizeof(float),
                             stream_.get());
        else
          cu::group_means({prev.pos.data(), lv.nodes, d, s, lv.pos.data()}, stream_.get());
        // The children's positions relative to their parent (pooling and unpooling use the same differences).
        cu::group_offsets({prev.pos.data(), prev.nodes, d, s, lv.pos.data(), prev.child_rel.data()}, stream_.get());
      }
      relative(lv.pos.data(), lv.nodes, ball, lv.rel.data());
    });
    if (!rotate) continue;
    move([&] { layout.to_rotated(i, lv.pos.data(), lv.pos_rot.data(), d, stream_); });  // collective on a plan
    steps_.run([&] { relative(lv.pos_rot.data(), lv.nodes, ball, lv.rel_rot.data()); });
  }

  // Edges grouped by receiver, each group in edge order, and p_src - p_dst per edge.
  const auto D0 = static_cast<std::size_t>(cfg_.c_hidden[0]);
  const auto nu = static_cast<std::size_t>(n);
  g_->receiver_chunks.clear();
  g_->edge_start_host.clear();
  std::size_t most = 1;
  if (messages) {
    const std::span<const std::int64_t> edge_index = layout.edges();
    const auto E = static_cast<index_t>(edge_index.size() / 2);
    cu::DeviceBuffer<std::int64_t> edges;
    cu::EdgeOrderWork work;
    steps_.run([&] {
      upload(edges, edge_index);
      g_->edge_start.resize(nu + 2, device_);  // the offsets, then the first bad edge (one download)
      for (cu::DeviceBuffer<std::int64_t>* b : {&g_->edge_src, &g_->edge_dst})
        b->resize(std::max<std::size_t>(1, static_cast<std::size_t>(E)), device_);
      g_->edge_rel.resize(std::max<std::size_t>(1, static_cast<std::size_t>(E) * du), device_);
      cu::EdgeOrderArgs a;
      a.edges = E;
      a.edge_index = edges.data();
      a.receivers = n;
      a.sources = n_all;
      a.positions = g_->positions.data();
      a.dim = d;
      a.first_bad = g_->edge_start.data() + nu + 1;
      a.start = g_->edge_start.data();
      a.src = g_->edge_src.data();
      a.dst = g_->edge_dst.data();
      a.rel = g_->edge_rel.data();
      a.work = &work;
      cu::edges_by_receiver(a, stream_.get());
      g_->edge_start_host.resize(nu + 2);
      cu::copy_to_host(g_->edge_start_host.data(), g_->edge_start.data(), (nu + 2) * sizeof(std::int64_t), stream_.get());
      const std::int64_t bad = g_->edge_start_host.back();
      g_->edge_start_host.pop_back();
      if (bad >= 0)  // the layouts check: a bug, agreed below
        throw Error(ErrorCode::internal, "erwin: local edge " + std::to_string(bad) + " out of range");
      g_->receiver_chunks = program::receiver_chunks(g_->edge_start_host, n, edge_chunk_);
      for (const auto& [r0, r1] : g_->receiver_chunks)
        most = std::max<std::size_t>(most, static_cast<std::size_t>(g_->edge_start_host[static_cast<std::size_t>(r1)] -
                                                                    g_->edge_start_host[static_cast<std::size_t>(r0)]));
    });
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
    if (messages) {
      work(program::Slot::msg_in, most * (2 * D0 + du));
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
