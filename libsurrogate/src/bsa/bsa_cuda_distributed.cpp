// The BSA CUDA forward on several ranks (bsa_device.hpp, forward_distributed): every rank runs the layers
// of bsa_cuda.cpp on its own slots of the distributed tree (built on the host by DistributedPlan,
// bsa_distributed.hpp: whole balls, compression blocks and selection groups on every rank), and what
// crosses ranks goes through host memory and the CPU path's MPI plans:
//  - the rotated layers: the rotated tree's exchange plan, forward and back, through a
//    balltree::device::DeviceExchange (own rows copied on the device; only the rows to and from other
//    ranks packed, downloaded, moved, uploaded, scattered), kept with the geometry;
//  - sparse layers: the rank's compressed K and V downloaded, all-gathered (gather_compressed_blocks, the
//    CPU path's all-gather) and uploaded; the top-S selection on the host runs per segment on the
//    all-gathered keys, as the CPU path's (bsa_cuda.cpp); the token K/V rows of the blocks that the
//    rank's partial segments (parts of samples) selected are fetched from their owners by the plan the
//    CPU path builds per layer (block_fetch_plan) through a DeviceExchange into fetched_, which the
//    selected-block kernel reads through first_row_ (whole samples read their own rows);
//  - global attention: the K/V rows of the samples the rank holds only part of, by the plan built with
//    the tree (the CPU path's), through a DeviceExchange kept with the geometry.
// NCCL is not used. A failure on one rank (device, selection) is kept (on_device) and agreed before each
// collective (agree(); DeviceExchange agrees its own device steps), so every rank throws the same Error and
// none waits in a collective: about one allreduce per exchange, not per stretch of launches.
//
// NOT YET RUN ON A GPU: tests/gpu/test_bsa_device_mpi_emulated.cpp runs this code on the CPU under mpirun.
#include <omp.h>

#include <algorithm>
#include <string>

#include "bsa_cuda_forward.hpp"
#include "bsa_distributed.hpp"
#include "surrogate/error.hpp"

namespace surrogate::bsa::detail {

using balltree::device::DeviceExchange;

void BsaCudaForward::set_distributed_geometry(const DistributedRows& rows) {
  geometry_ = Geometry::none;
  rotation_.reset();
  sample_rows_.reset();
  layout_ = *rows.layout;
  rows_ = layout_.rows;
  n_ = layout_.n;
  // Whether any rank holds part of a sample (the same answer on every rank, from the global rank
  // ranges): if none does, no rank fetches selected blocks or sample rows, and the exchanges are skipped.
  const balltree::RankRanges& slots = rows.tree->slots;
  any_partial_ = false;
  for (int r = 0; r < rows.comm->size(); ++r)
    if (slots.size(r) > 0 && (slots.begin(r) % n_ != 0 || slots.end(r) % n_ != 0)) any_partial_ = true;
  on_device([&] {
    geometry_ = Geometry::distributed;  // (set_rows then sizes no one-rank arrays)
    set_rows(rows.positions, rows.rotated_positions, rows_);
    if (rows.rotation != nullptr) rotation_ = std::make_unique<DeviceExchange>(*rows.rotation, device_, stream_, "bsa");
    if (rows.sample_rows != nullptr)
      sample_rows_ = std::make_unique<DeviceExchange>(*rows.sample_rows, device_, stream_, "bsa");
    stream_.synchronize();  // the host arrays of set_rows are released on return
  });
}

void BsaCudaForward::gather_compressed(index_t local_blocks) {
  const int D = cfg_.c_hidden, C = cfg_.compress_block_size;
  const auto local = static_cast<std::size_t>(local_blocks * D);
  const auto all = static_cast<std::size_t>(layout_.samples * (n_ / C) * D);
  on_device([&] {
    kc_host_.resize(std::max<std::size_t>(1, local));
    vc_host_.resize(kc_host_.size());
    kc_all_host_.resize(all);
    vc_all_host_.resize(all);
    if (local > 0) {
      cu::copy_to_host(kc_host_.data(), kc_.data(), local * sizeof(float), stream_.get());
      cu::copy_to_host(vc_host_.data(), vc_.data(), local * sizeof(float), stream_.get());
    }
    stream_.synchronize();
  });
  agree();
  gather_compressed_blocks(*dist_->comm, *dist_->tree, C, kc_host_.data(), local_blocks, D, kc_all_host_.data());
  gather_compressed_blocks(*dist_->comm, *dist_->tree, C, vc_host_.data(), local_blocks, D, vc_all_host_.data());
  on_device([&] {
    upload(kc_all_, kc_all_host_);
    upload(vc_all_, vc_all_host_);
  });
}

void BsaCudaForward::fetch_selected_blocks() {
  const int D = cfg_.c_hidden, C = cfg_.compress_block_size;
  const index_t nb = n_ / C;
  const std::vector<RowLayout::Segment>& segments = layout_.segments;
  agree();  // (the selection is complete on every rank)
  // The union of the blocks the partial segments selected (all heads and rows), ascending global ids.
  std::vector<std::int64_t> wanted;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].length == n_) continue;
    for (std::size_t j = sel_offsets_[i]; j < sel_offsets_[i + 1]; ++j)
      wanted.push_back(segments[i].sample * nb + sel_host_[j]);
  }
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  const ExchangePlan plan = block_fetch_plan(*dist_->comm, *dist_->tree, C, wanted);
  std::unique_ptr<DeviceExchange> exchange;
  on_device([&] {
    exchange = std::make_unique<DeviceExchange>(plan, device_, stream_, "bsa");
    fetched_.resize(std::max<std::size_t>(1, wanted.size() * static_cast<std::size_t>(C) * 2 * D), device_);
    // Per partial segment, block b of its sample -> its first fetched row (-1: not selected).
    first_row_host_.clear();
    for (const RowLayout::Segment& g : segments) {
      if (g.length == n_) continue;
      for (index_t b = 0; b < nb; ++b) {
        const auto it = std::lower_bound(wanted.begin(), wanted.end(), g.sample * nb + b);
        first_row_host_.push_back(it != wanted.end() && *it == g.sample * nb + b ? (it - wanted.begin()) * C : -1);
      }
    }
    upload(first_row_, first_row_host_);
  });
  agree();
  exchange->forward(u_.data() + D, 3 * D, fetched_.data(), 2 * D, 2 * D, stream_);
}

void BsaCudaForward::fetch_sample_rows() {
  const int D = cfg_.c_hidden;
  on_device([&] {
    const auto rows = static_cast<std::size_t>(layout_.partial_samples() * n_);
    fetched_.resize(std::max<std::size_t>(1, rows * 2 * D), device_);
  });
  agree();
  sample_rows_->forward(u_.data() + D, 3 * D, fetched_.data(), 2 * D, 2 * D, stream_);
}

std::vector<float> BsaCudaForward::forward_distributed(const DistributedRows& rows, std::span<const float> slot_features,
                                                       bool same_geometry, int threads) {
  if (rows.comm == nullptr || rows.tree == nullptr || rows.layout == nullptr)
    throw Error(ErrorCode::internal, "bsa (device, distributed): no communicator, tree or layout");
  const Comm& comm = *rows.comm;
  const int d = cfg_.dimensionality, D = cfg_.c_hidden;
  const RowLayout& layout = *rows.layout;
  if (threads <= 0) threads = omp_get_max_threads();
  collectively(comm, [&] {
    auto wrong = [](const std::string& what) {
      throw Error(ErrorCode::internal, "bsa (device, distributed): " + what);
    };
    if (static_cast<index_t>(slot_features.size()) != layout.rows * cfg_.c_in) wrong("slot features of the wrong size");
    if (static_cast<index_t>(rows.positions.size()) != layout.rows * d) wrong("slot positions of the wrong size");
    if (cfg_.should_rotate && (rows.rotation == nullptr || rows.rotated_positions.size() != rows.positions.size()))
      wrong("a rotated model without the rotated order");
    if (cfg_.attention_type == AttentionType::global && rows.sample_rows == nullptr)
      wrong("global attention without the plan of the samples' rows");
    if (layout.samples < 1 || layout.n < 1) wrong("no samples");
    Stages::check_sample_size(*net_, layout.n);
  });
  std::vector<float> result(static_cast<std::size_t>(layout.rows * D));
  dist_ = &rows;
  pending_ = nullptr;
  try {
    geometry_ms_ = 0.0;
    cu::Event g0, g1, t0, t1;
    if (!same_geometry || geometry_ != Geometry::distributed || rows_ != layout.rows || n_ != layout.n) {
      on_device([&] {
        g0 = cu::Event(device_);
        g1 = cu::Event(device_);
        g0.record(stream_.get());
      });
      set_distributed_geometry(rows);
      on_device([&] {
        g1.record(stream_.get());
        stream_.synchronize();
        geometry_ms_ = g1.elapsed_ms_since(g0);
      });
    }
    on_device([&] {
      t0 = cu::Event(device_);
      t1 = cu::Event(device_);
      t0.record(stream_.get());
      upload(features_, slot_features);
      dense(embed_, features_.data(), cfg_.c_in, x_.data(), D, rows_);
    });
    layers(threads);
    on_device([&] {
      if (!result.empty())
        cu::copy_to_host(result.data(), x_.data(), result.size() * sizeof(float), stream_.get());
      t1.record(stream_.get());
      stream_.synchronize();
      forward_ms_ = t1.elapsed_ms_since(t0);
    });
    agree();
  } catch (...) {
    dist_ = nullptr;
    pending_ = nullptr;
    geometry_ = Geometry::none;
    rotation_.reset();
    sample_rows_.reset();
    throw;
  }
  dist_ = nullptr;
  return result;
}

}  // namespace surrogate::bsa::detail
