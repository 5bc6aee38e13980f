// The registered Sequoia model (architecture "sequoia"; root attribute model_class TreeTransformerSeg or
// TreeTransformerCls): the plan (plan.hpp: whole samples on owner ranks) and the CPU forward (network.cpp).
// share/docs/sequoia.md.
#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "../balltree/point_cloud_model.hpp"
#include "../device_support.hpp"
#include "../thread_count.hpp"
#include "cuda/device.hpp"
#include "plan.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {
namespace {

const ModelFile& checked(const ModelFile& file, const Config& cfg) {
  file.check_weights(cfg.expected_shapes());
  return file;
}

bool segmentation(const Config& c) { return c.kind == Config::Kind::segmentation; }

class Model final : public PointCloudModel {
 public:
  explicit Model(const ModelFile& file) : Model(file, Config::from_file(file)) {}
  Model(const ModelFile& file, const Config& cfg)
      : PointCloudModel(file, cfg.c, segmentation(cfg) ? cfg.n_part : 0, 3, false),
        cfg_(cfg),
        network_(checked(file, cfg), cfg) {
    for (const auto& [name, tensor] : file.weights) parameters_ += tensor.numel();
  }
  index_t parameter_count() const override { return parameters_; }
  int sample_in_channels() const override { return segmentation(cfg_) ? cfg_.n_class : 0; }
  int sample_out_channels() const override { return segmentation(cfg_) ? 0 : cfg_.classes; }
  std::vector<std::pair<std::string, std::string>> describe() const override {
    auto d = cfg_.describe();
    d.emplace_back("multi-rank", "whole samples on owner ranks, or samples split by lowest voxels when one is larger "
                                 "than N / P points");
    d.emplace_back("device forward", "CUDA, fp32 / tf32 / bf16 (either scheme across ranks); the voxel hierarchy and "
                                     "neighbour lists built on the device");
    return d;
  }

 protected:
  /// The collated hierarchy of samples (with their ids in the caller's batch).
  using HierarchyBuilder = std::function<Hierarchy(const std::vector<SamplePoints>&, std::vector<index_t>)>;

  std::unique_ptr<surrogate::Plan> build_plan(const Comm& comm, surrogate::Plan::Basis basis,
                                              const RunOptions& options) override {
    const detail::ThreadCount threads(options.threads);
    auto plan = std::make_unique<Plan>(std::move(basis));
    const std::vector<index_t>& sizes = plan->layout().sample_sizes();
    const index_t total = std::accumulate(sizes.begin(), sizes.end(), index_t{0});
    const index_t largest = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
    // On a CUDA device the hierarchy and the neighbour lists are computed there (the same ones).
    HierarchyBuilder build = [this](const std::vector<SamplePoints>& samples, std::vector<index_t> ids) {
      return collate(build_sample_hierarchies(samples, cfg_.divide, cfg_.depth), std::move(ids));
    };
    NearestFinder find;
    if (options.cuda_device >= 0) {
      prepare_device(comm, options);
      build = [this](const std::vector<SamplePoints>& samples, std::vector<index_t> ids) {
        return device_->hierarchy(samples, cfg_.divide, cfg_.depth, std::move(ids));
      };
      find = [this](const std::vector<float>& positions, const std::vector<std::int64_t>& batch, int k,
                    const std::vector<std::int64_t>& queries) {
        return device_->nearest_lists(positions, batch, k, queries);
      };
    }
    if (comm.size() > 1 && largest * comm.size() > total) build_split(comm, *plan, build, find);
    else build_whole_samples(comm, *plan, build, find);
    return plan;
  }

  /// Every sample on one owner rank, its hierarchy built there.
  void build_whole_samples(const Comm& comm, Plan& plan, const HierarchyBuilder& build, const NearestFinder& find) {
    plan.set_owners(detail::SampleOwners::build(comm, plan.layout(), plan.geometry().global_ids));
    detail::SampleOwners& owners = plan.owners();
    // The positions of the owned samples, each sample's points by increasing global id.
    std::vector<float> positions(static_cast<std::size_t>(std::max<index_t>(1, owners.rows() * 3)));
    owners.rows_plan().forward(plan.geometry().positions, 3, positions.data());
    collectively(comm, [&] {
      if (owners.owned().empty()) return;
      std::vector<SamplePoints> samples;
      std::vector<index_t> ids;
      for (const detail::SampleOwners::Owned& o : owners.owned()) {
        samples.push_back({positions.data() + o.begin * 3, o.end - o.begin, "sample " + std::to_string(o.sample)});
        ids.push_back(o.sample);
      }
      Hierarchy h = build(samples, std::move(ids));
      network_.check(h);
      Share share = Share::whole(h, cfg_, nullptr, find);
      plan.set_hierarchy(std::move(h), std::move(share));
    });
  }

  /// Every sample split over the ranks by lowest voxels: every rank gathers all positions and builds the
  /// whole hierarchy, then computes its share.
  void build_split(const Comm& comm, Plan& plan, const HierarchyBuilder& build, const NearestFinder& find) {
    const SampleLayout& layout = plan.layout();
    const index_t n = layout.local_points();
    const std::vector<std::int64_t> ids = detail::SampleOwners::working_ids(comm, layout, plan.geometry().global_ids);
    // (sample, id) and the position of every working row of every rank, rank-major.
    std::vector<std::int64_t> keys(static_cast<std::size_t>(n) * 2);
    for (const SampleLayout::Segment& seg : layout.segments())
      for (index_t i = seg.begin; i < seg.end; ++i) {
        keys[static_cast<std::size_t>(i) * 2] = seg.sample;
        keys[static_cast<std::size_t>(i) * 2 + 1] = ids[static_cast<std::size_t>(i)];
      }
    const int P = comm.size();
    std::vector<index_t> counts(static_cast<std::size_t>(P));
    comm.allgather(&n, sizeof n, counts.data());
    std::vector<index_t> first(static_cast<std::size_t>(P) + 1, 0);
    std::partial_sum(counts.begin(), counts.end(), first.begin() + 1);
    const auto gather = [&](const void* mine, std::size_t row_bytes, void* all) {
      std::vector<std::size_t> bytes(static_cast<std::size_t>(P)), offsets(static_cast<std::size_t>(P));
      for (int r = 0; r < P; ++r) {
        bytes[static_cast<std::size_t>(r)] = static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]) * row_bytes;
        offsets[static_cast<std::size_t>(r)] = static_cast<std::size_t>(first[static_cast<std::size_t>(r)]) * row_bytes;
      }
      comm.allgatherv(mine, static_cast<std::size_t>(n) * row_bytes, all, bytes, offsets);
    };
    const auto N = static_cast<std::size_t>(first.back());
    std::vector<std::int64_t> all_keys(N * 2);
    std::vector<float> all_positions(N * 3), positions(N * 3);
    gather(keys.data(), 2 * sizeof(std::int64_t), all_keys.data());
    gather(plan.geometry().positions, 3 * sizeof(float), all_positions.data());
    // The batch's points sample-major, by increasing id within a sample: the hierarchy's level-0 rows.
    std::vector<std::size_t> order(N);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return std::make_pair(all_keys[a * 2], all_keys[a * 2 + 1]) < std::make_pair(all_keys[b * 2], all_keys[b * 2 + 1]);
    });
    Hierarchy h;
    Share share;
    collectively(comm, [&] {
      std::vector<SamplePoints> samples;
      std::vector<index_t> sample_ids;
      for (std::size_t t = 0; t < N; ++t) {
        const std::size_t g = order[t];
        std::copy_n(all_positions.begin() + static_cast<std::ptrdiff_t>(g * 3), 3, positions.begin() + static_cast<std::ptrdiff_t>(t * 3));
        if (t > 0 && all_keys[g * 2] == all_keys[order[t - 1] * 2] && all_keys[g * 2 + 1] == all_keys[order[t - 1] * 2 + 1])
          throw Error(ErrorCode::input, "sequoia: global id " + std::to_string(all_keys[g * 2 + 1]) +
                                            " is given to two points of sample " + std::to_string(all_keys[g * 2]) +
                                            " (ids must be unique)");
      }
      for (std::size_t t = 0; t < N;) {
        std::size_t u = t;
        while (u < N && all_keys[order[u] * 2] == all_keys[order[t] * 2]) ++u;
        sample_ids.push_back(all_keys[order[t] * 2]);
        samples.push_back({positions.data() + t * 3, static_cast<index_t>(u - t), "sample " + std::to_string(sample_ids.back())});
        t = u;
      }
      h = build(samples, std::move(sample_ids));
      network_.check(h);
    });
    share = Share::split_over(comm, h, cfg_, find);
    // The share's points from the working rows that hold them.
    std::vector<int> source_rank;
    std::vector<std::int64_t> source_key;
    for (const index_t r : share.points) {
      const std::size_t g = order[static_cast<std::size_t>(r)];
      const auto rank = static_cast<int>(std::upper_bound(first.begin(), first.end(), static_cast<index_t>(g)) - first.begin()) - 1;
      source_rank.push_back(rank);
      source_key.push_back(static_cast<std::int64_t>(g) - first[static_cast<std::size_t>(rank)]);
    }
    plan.set_split(ExchangePlan::from_requests(comm, n, source_rank, source_key, {}, {}));
    plan.set_hierarchy(std::move(h), std::move(share));
  }

  void forward(const Comm& comm, surrogate::Plan& base, const Io& io, const RunOptions& options) override {
    const detail::ThreadCount threads(options.threads);
    auto& plan = static_cast<Plan&>(base);
    if (options.cuda_device >= 0) prepare_device(comm, options);
    const Hierarchy& h = plan.hierarchy();
    if (io.on_device) return forward_rows(comm, plan, io, options);
    // This rank's points' features (the share's order), the class vectors of the hierarchy's samples.
    const auto rows = static_cast<index_t>(plan.share().points.size());
    std::vector<float> features(static_cast<std::size_t>(std::max<index_t>(1, rows * cfg_.c)));
    if (plan.split()) plan.split_rows().forward(io.in, io.ld_in, features.data(), cfg_.c, cfg_.c);
    else plan.owners().rows_plan().forward(io.in, io.ld_in, features.data(), cfg_.c, cfg_.c);
    const std::vector<float> classes = class_vectors(h, io);
    std::vector<float> result;
    if (plan.split()) {
      result = options.cuda_device >= 0
                   ? device_->forward(comm, plan.share(), h, features.data(), classes.data(), plan.hierarchy_serial())
                   : network_.forward(plan.share(), h, features.data(), classes.data());
    } else {
      collectively(comm, [&] {
        if (h.samples() == 0) return;
        if (options.cuda_device >= 0)
          result =
              device_->forward(comm, plan.share(), h, features.data(), classes.data(), plan.hierarchy_serial());
        else result = network_.forward(plan.share(), h, features.data(), classes.data());
      });
    }
    // Per-point outputs back to the rows' ranks; per-sample outputs to every rank, in sample order.
    if (!segmentation(cfg_)) return write_sample_outputs(plan, io, result);
    result.resize(std::max<std::size_t>(1, result.size()));
    if (plan.split()) plan.split_rows().backward(result.data(), cfg_.n_part, io.out, io.ld_out, cfg_.n_part);
    else plan.owners().rows_plan().backward(result.data(), cfg_.n_part, io.out, io.ld_out, cfg_.n_part);
  }

  /// The class vectors of the hierarchy's samples (samples x n_class, dense) from the caller's rows.
  std::vector<float> class_vectors(const Hierarchy& h, const Io& io) const {
    std::vector<float> classes;
    for (std::size_t b = 0; b < h.sample_ids.size() && sample_in_channels() > 0; ++b) {
      const float* row = io.sample_in + h.sample_ids[b] * io.ld_sample_in;
      classes.insert(classes.end(), row, row + cfg_.n_class);
    }
    return classes;
  }
  /// A classification's B x classes results (the hierarchy's samples; one process: this rank's, if any)
  /// into every rank's per-sample rows, in sample order.
  void write_sample_outputs(Plan& plan, const Io& io, std::vector<float>& result) const {
    const Hierarchy& h = plan.hierarchy();
    result.resize(std::max<std::size_t>(1, result.size()));
    if (plan.split()) {
      for (std::size_t b = 0; b < h.sample_ids.size(); ++b)
        std::copy_n(result.begin() + static_cast<std::ptrdiff_t>(b) * cfg_.classes, cfg_.classes,
                    io.sample_out + h.sample_ids[b] * io.ld_sample_out);
    } else {
      plan.owners().samples_to_all().forward(result.data(), cfg_.classes, io.sample_out, io.ld_sample_out, cfg_.classes);
    }
  }

  /// predict_device's rows: to the share's points, the network and back (a segmentation's per-point
  /// outputs), every move an exchange on device rows; the class vectors and a classification's B x classes
  /// results are the host's per-sample arrays.
  DeviceInput device_input() const override { return DeviceInput::device_rows; }
  void* device_stream(const Comm& comm, const RunOptions& options) override {
    prepare_device(comm, options);
    return device_->stream();
  }
  void forward_rows(const Comm& comm, Plan& plan, const Io& io, const RunOptions& options) {
    const Hierarchy& h = plan.hierarchy();
    const int dev = options.cuda_device;
    const auto rows = static_cast<index_t>(plan.share().points.size());
    float *x = nullptr, *y = nullptr;
    collectively(comm, [&] {
      x = device_->input_rows(rows);
      y = device_->output_rows(rows);
    });
    const Place place{dev, device_->stream(), &comm.device_transport(dev)};
    const ExchangePlan& points = plan.split() ? plan.split_rows() : plan.owners().rows_plan();
    points.forward(io.in, io.ld_in, x, cfg_.c, cfg_.c, place);
    const std::vector<float> classes = class_vectors(h, io);
    std::vector<float> result;
    const auto run = [&] {
      result = device_->forward_rows(comm, plan.share(), h, x, classes.data(), plan.hierarchy_serial(), y);
    };
    if (plan.split()) {
      run();
    } else {
      collectively(comm, [&] {
        if (h.samples() > 0) run();
      });
    }
    if (!segmentation(cfg_)) return write_sample_outputs(plan, io, result);
    points.backward(y, cfg_.n_part, io.out, io.ld_out, cfg_.n_part, place);  // left enqueued (Model::Io)
  }

  /// The device forward of `options` (weights uploaded on first use) in its precision (fp32, or the dense
  /// layers in tf32 / bf16 on the tensor cores); agreed errors for fp64, a build without CUDA or a missing
  /// device.
  void prepare_device(const Comm& comm, const RunOptions& options) {
    collectively(comm, [&] {
      surrogate::detail::refuse_fp64_on_device("sequoia", options.precision);
      if (!device_ || device_->device() != options.cuda_device) {
        device_.reset();
#if SURROGATE_HAVE_CUDA
        device_ = gpu::make_cuda_forward(network_, options.cuda_device);
#else
        surrogate::detail::refuse_without_cuda_backend("sequoia", options.cuda_device);
#endif
      }
      device_->set_precision(options.precision);
    });
  }

 private:
  Config cfg_;
  Network network_;
  std::unique_ptr<gpu::DeviceForward> device_;
  index_t parameters_ = 0;
};

}  // namespace

std::unique_ptr<surrogate::Model> make_model(const ModelFile& file) { return std::make_unique<Model>(file); }

}  // namespace surrogate::sequoia
