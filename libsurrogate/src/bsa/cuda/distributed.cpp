// The BSA CUDA forward on a plan (device.hpp): every rank runs program.hpp's stages (forward.cpp's
// DeviceExec) on its slots of the distributed tree; here the plan's geometry and what crosses ranks: the
// rotated layers, the compressed K/V all-gather, the selected blocks' fetch and the global branch's sample
// rows are the plan's exchanges on device rows (NCCL, or staged through host memory); a failure on one
// rank is kept and agreed before the next collective.
// share/docs/balltree.md, "BSA on a CUDA device", "Several ranks".
#include <algorithm>
#include <string>

#include "forward.hpp"
#include "surrogate/error.hpp"

namespace surrogate::bsa::detail {

Place BsaCudaForward::place() const { return {device_, stream_.get(), &plan_->comm().device_transport(device_)}; }

void BsaCudaForward::set_plan_geometry(Geometry& geometry, const BsaPlan& plan) {
  g_ = &geometry;
  g_->on_plan = true;  // (set_rows then sizes no one-process arrays)
  g_->layout = plan.row_layout();
  g_->rows = g_->layout.rows;
  g_->n = g_->layout.n;
  // Whether any rank holds part of a sample (the same answer on every rank, from the global rank
  // ranges): if none does, no rank fetches selected blocks or sample rows, and the exchanges are skipped.
  const balltree::RankRanges& slots = plan.trees().tree.slots;
  g_->any_partial = false;
  for (int r = 0; r < plan.comm().size(); ++r)
    if (slots.size(r) > 0 && (slots.begin(r) % g_->n != 0 || slots.end(r) % g_->n != 0)) g_->any_partial = true;
  steps_.run([&] {
    upload(g_->pos, plan.slot_positions());
    if (cfg_.should_rotate) upload(g_->pos_rot, plan.rotated_positions());
    set_rows(g_->rows);
    if (wrapper_) wrapper_features(g_->pos.data(), g_->rows);  // the slots' positions (padding: duplicates)
    stream_.synchronize();  // the host arrays of set_rows are released on return
  });
}

void BsaCudaForward::gather_compressed() {
  const int D = cfg_.c_hidden;
  const ExchangePlan& all_gather = plan_->compressed_blocks();
  const auto all = static_cast<std::size_t>(all_gather.target_rows() * D);
  steps_.run([&] {
    g_->kc_all.resize(std::max<std::size_t>(1, all), device_);
    g_->vc_all.resize(std::max<std::size_t>(1, all), device_);
  });
  steps_.agree();
  all_gather.forward(g_->kc.data(), D, g_->kc_all.data(), D, D, place());
  all_gather.forward(g_->vc.data(), D, g_->vc_all.data(), D, D, place());
}

void BsaCudaForward::fetch_selected_blocks() {
  const int D = cfg_.c_hidden, C = cfg_.compress_block_size;
  const index_t nb = g_->n / C;
  const std::vector<RowLayout::Segment>& segments = g_->layout.segments;
  steps_.agree();  // (the selection is complete on every rank)
  // The union of the blocks the partial segments selected (all heads and rows), ascending global ids.
  std::vector<std::int64_t> wanted;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].length == g_->n) continue;
    for (std::size_t j = g_->sel_offsets[i]; j < g_->sel_offsets[i + 1]; ++j)
      wanted.push_back(segments[i].sample * nb + g_->sel_host[j]);
  }
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  const ExchangePlan fetch = plan_->fetch_plan(wanted);
  steps_.run([&] {
    g_->fetched.resize(std::max<std::size_t>(1, wanted.size() * static_cast<std::size_t>(C) * 2 * D), device_);
    // Per partial segment, block b of its sample -> its first fetched row (-1: not selected).
    g_->first_row_host.clear();
    for (const RowLayout::Segment& g : segments) {
      if (g.length == g_->n) continue;
      for (index_t b = 0; b < nb; ++b) {
        const auto it = std::lower_bound(wanted.begin(), wanted.end(), g.sample * nb + b);
        g_->first_row_host.push_back(it != wanted.end() && *it == g.sample * nb + b ? (it - wanted.begin()) * C : -1);
      }
    }
    upload(g_->first_row, g_->first_row_host);
  });
  steps_.agree();
  fetch.forward(g_->u.data() + D, 3 * D, g_->fetched.data(), 2 * D, 2 * D, place());
}

void BsaCudaForward::fetch_sample_rows() {
  const int D = cfg_.c_hidden;
  steps_.run([&] {
    const auto rows = static_cast<std::size_t>(g_->layout.partial_samples() * g_->n);
    g_->fetched.resize(std::max<std::size_t>(1, rows * 2 * D), device_);
  });
  steps_.agree();
  plan_->sample_rows().forward(g_->u.data() + D, 3 * D, g_->fetched.data(), 2 * D, 2 * D, place());
}

template <class Load, class Store>
void BsaCudaForward::run_on_plan(BsaPlan& plan, Load&& load, Store&& store, bool timed) {
  const int d = cfg_.dimensionality, D = cfg_.c_hidden;
  const RowLayout& layout = plan.row_layout();
  collectively(plan.comm(), [&] {
    auto wrong = [](const std::string& what) { throw Error(ErrorCode::internal, "bsa (device, plan): " + what); };
    if (static_cast<index_t>(plan.slot_positions().size()) != layout.rows * d) wrong("slot positions of the wrong size");
    if (cfg_.should_rotate && plan.rotated_positions().size() != plan.slot_positions().size())
      wrong("a rotated model without the rotated order");
    if (layout.samples < 1 || layout.n < 1) wrong("no samples");
    Stages::check_sample_size(*net_, layout.n);
  });
  // The plan's geometry on this device: uploaded by the first forward there, kept in the plan.
  std::unique_ptr<balltree::DeviceGeometry>& kept = plan.device_geometry();
  plan_ = &plan;
  steps_.begin(&plan.comm());
  geometry_ms_ = 0.0;
  try {
    if (!kept || kept->device() != device_) {
      kept.reset();
      auto geometry = std::make_unique<Geometry>(device_);
      geometry_ms_ = steps_.timed(stream_.get(), true, [&] { set_plan_geometry(*geometry, plan); });
      steps_.agree();
      kept = std::move(geometry);
    }
    g_ = static_cast<Geometry*>(kept.get());
    const double ms = steps_.timed(stream_.get(), timed, [&] {
      load();
      const auto dev = ops::Place::device;
      run({g_->features.data(), cfg_.c_in, g_->rows, cfg_.c_in, dev}, {g_->x.data(), D, g_->rows, D, dev}, nullptr);
      if (wrapper_) wrapper_head(g_->x.data(), g_->rows);
      store();
    });
    if (timed) forward_ms_ = ms;
    steps_.agree();
  } catch (...) {
    plan_ = nullptr;
    g_ = nullptr;
    steps_.begin(nullptr);
    kept.reset();  // the next call uploads the geometry again
    throw;
  }
  plan_ = nullptr;
  steps_.begin(nullptr);
  g_ = nullptr;
}

std::vector<float> BsaCudaForward::forward(BsaPlan& plan, std::span<const float> slot_features) {
  const RowLayout& layout = plan.row_layout();
  collectively(plan.comm(), [&] {
    if (static_cast<index_t>(slot_features.size()) != (wrapper_ ? 0 : layout.rows * cfg_.c_in))
      throw Error(ErrorCode::internal, "bsa (device, plan): slot features of the wrong size");
  });
  std::vector<float> result(static_cast<std::size_t>(layout.rows * out_width()));
  run_on_plan(
      plan,
      [&] {
        if (!wrapper_) steps_.run([&] { upload(g_->features, slot_features); });
      },
      [&] {
        steps_.run([&] {
          const float* y = wrapper_ ? g_->values.data() : g_->x.data();
          if (!result.empty()) cu::copy_to_host(result.data(), y, result.size() * sizeof(float), stream_.get());
        });
      },
      true);
  return result;
}

void BsaCudaForward::forward_plan_rows(BsaPlan& plan, const float* rows, index_t ld, float* out, index_t ld_out) {
  const int cin = cfg_.c_in, D = cfg_.c_hidden, width = out_width();
  const ExchangePlan& to_slots = plan.trees().tree.plan.exchange();
  // The rows to the rank's block (c_in values) and its slots, the layers, the slots' rows back to the
  // block and to the caller's rows: every move an exchange on device rows.
  run_on_plan(
      plan,
      [&] {
        steps_.run([&] {
          const auto block = static_cast<std::size_t>(plan.block_rows() * std::max(cin, D));
          g_->block.resize(std::max<std::size_t>(1, block), device_);
          g_->features.resize(std::max<std::size_t>(1, static_cast<std::size_t>(g_->rows * cin)), device_);
        });
        if (wrapper_) return;  // (its features come from the slots' positions)
        steps_.agree();
        plan.to_block(rows, ld, g_->block.data(), cin, cin, place());
        to_slots.forward(g_->block.data(), cin, g_->features.data(), cin, cin, place());
      },
      [&] {
        steps_.agree();
        to_slots.backward(wrapper_ ? g_->values.data() : g_->x.data(), width, g_->block.data(), width, width, place());
        plan.to_solver(g_->block.data(), width, out, ld_out, width, place());
      },
      false);
  forward_ms_ = 0.0;
}

}  // namespace surrogate::bsa::detail
