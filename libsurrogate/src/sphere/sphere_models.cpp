// The spherical families as generic Models ("sphere_transformer", "s2_attention",
// "s2_neighborhood_attention"). A sample is one field on the model's latitude-longitude grid: its points,
// concatenated over the ranks in rank order, are the grid in row-major order (latitude 0 = north first,
// then longitude): global row b*nlat*nlon + lat*nlon + lon of `surrogate predict`'s /features.
//
// Multi-rank mode: latitude bands. Every rank computes whole latitude rows of each grid (solver_pieces
// gives the partition rule); the rows an operator needs beyond the band (DISCO and resampling stencils,
// neighbourhood-attention halos, every row for global attention) are fetched from the ranks holding them
// (fetch_rows, surrogate/sphere/bands.hpp), and the result goes back to the solver's pieces the same way.
// Every value is computed by the same arithmetic as on one process, so predictions are bitwise identical
// for any number of ranks and any split of the rows (share/docs/sphere.md, "Multi-rank mode").
#include <omp.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/bands.hpp"
#include "surrogate/sphere/layer_file.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"
#include "surrogate/sphere/sht.hpp"
#include "surrogate/sphere/transformer.hpp"
#include "../device_support.hpp"
#include "release.hpp"
#include "layer_device.hpp"
#include "transformer_device.hpp"

namespace surrogate::sphere {
namespace {

/// Sets the OpenMP thread count of the calling thread for one forward and restores it.
class ThreadCount {
 public:
  explicit ThreadCount(int threads) : saved_(omp_get_max_threads()) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  ~ThreadCount() { omp_set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

/// This rank's pieces of the solver's field (global rows b*points + p; each sample's points concatenated
/// over the ranks in rank order) and the latitude bands the ranks compute.
struct SolverPieces {
  std::vector<HeldRows> held;          // this rank's input rows, one range per sample it holds
  std::vector<index_t> working_begin;  // the first working row (layout order) of each range
  BandPartition bands;                 // image-grid rows per rank
};

/// Collective. Throws Error(input) on every rank when a sample does not have exactly nlat*nlon points.
///
/// Partition rule: with one sample, rank r computes the rows whose first point (longitude 0) it holds
/// - a solver that already partitions in latitude bands keeps its own band and exchanges only halos -
/// unless that puts more than twice the balanced share ceil(nlat/ranks) on some rank (e.g. everything
/// on one rank); then, and for batches of several samples, the rows are split evenly in rank order.
SolverPieces solver_pieces(const Comm& comm, const SampleLayout& layout, const float* rows, index_t ld, int nlat,
                           int nlon, const std::string& what) {
  const index_t B = layout.num_samples(), points = static_cast<index_t>(nlat) * nlon;
  for (index_t s = 0; s < B; ++s)
    if (layout.sample_sizes()[static_cast<std::size_t>(s)] != points)
      throw Error(ErrorCode::input, what + ": sample " + std::to_string(s) + " has " +
                                        std::to_string(layout.sample_sizes()[static_cast<std::size_t>(s)]) +
                                        " points, the model's grid has " + std::to_string(points) +
                                        " (nlat*nlon; rows in row-major latitude-longitude order, concatenated over "
                                        "the ranks in rank order)");
  std::vector<index_t> local_count(static_cast<std::size_t>(B), 0);
  for (const auto& seg : layout.segments()) local_count[static_cast<std::size_t>(seg.sample)] = seg.end - seg.begin;
  const int P = comm.size(), me = comm.rank();
  std::vector<index_t> counts(static_cast<std::size_t>(B * P));  // counts[r*B + s]
  comm.allgather(local_count.data(), sizeof(index_t) * static_cast<std::size_t>(B), counts.data());
  SolverPieces pieces;
  for (const auto& seg : layout.segments()) {
    index_t first = 0;  // the sample's points on the lower ranks
    for (int r = 0; r < me; ++r) first += counts[static_cast<std::size_t>(r * B + seg.sample)];
    const index_t g = seg.sample * points + first;
    pieces.held.push_back({{g, g + seg.end - seg.begin}, rows + seg.begin * ld, ld});
    pieces.working_begin.push_back(seg.begin);
  }
  pieces.bands = balanced_bands(nlat, P);
  if (B == 1) {
    std::vector<index_t> first_point(static_cast<std::size_t>(P) + 1, 0);
    for (int r = 0; r < P; ++r)
      first_point[static_cast<std::size_t>(r) + 1] = first_point[static_cast<std::size_t>(r)] + counts[static_cast<std::size_t>(r)];
    BandPartition own = bands_from_points(nlat, nlon, first_point);
    int widest = 0;
    for (int r = 0; r < P; ++r) widest = std::max(widest, own.rows(r));
    if (widest <= 2 * ((nlat + P - 1) / P)) pieces.bands = std::move(own);
  }
  return pieces;
}

/// Collective. The ranks' bands of the result (out_band: this rank's rows [bands.begin, bands.end) of
/// every sample, `width` floats each) back to the solver's pieces (rows of `out`, stride ld_out).
void return_to_pieces(const Comm& comm, const SolverPieces& pieces, index_t batch, int nlat, int nlon,
                      const float* out_band, int width, float* out, index_t ld_out) {
  const int me = comm.rank();
  const index_t points = static_cast<index_t>(nlat) * nlon;
  const std::vector<HeldRows> held =
      band_held(batch, points, nlon, pieces.bands.begin(me), pieces.bands.end(me), out_band, width);
  std::vector<RowRange> wanted;
  for (const HeldRows& h : pieces.held) wanted.push_back(h.range);
  const std::vector<float> mine = fetch_rows(comm, held, wanted, width);
  const float* src = mine.data();
  for (std::size_t i = 0; i < wanted.size(); ++i)
    for (index_t r = 0; r < wanted[i].size(); ++r, src += width)
      std::copy(src, src + width, out + (pieces.working_begin[i] + r) * ld_out);
}

class SphereTransformerModel final : public Model {
 public:
  SphereTransformerModel(const ModelFile& f, SphericalTransformer net)
      : Model(f, net.config().in_chans, net.config().out_chans), net_(std::move(net)), file_(f) {}

  index_t parameter_count() const override { return net_.parameter_count(); }
  std::vector<std::pair<std::string, std::string>> describe() const override {
    const TransformerConfig& c = net_.config();
    auto grid = [](int a, int b) { return std::to_string(a) + " x " + std::to_string(b); };
    return {{"torch-harmonics release", c.torch_harmonics_version},
            {"image grid", grid(c.nlat, c.nlon) + " " + to_string(c.grid)},
            {"internal grid", grid(c.internal_nlat(), c.internal_nlon()) + " " + to_string(c.grid_internal)},
            {"attention", c.neighborhood ? "neighborhood" : "global"},
            {"embed_dim / heads / layers", std::to_string(c.embed_dim) + " / " + std::to_string(c.num_heads) + " / " +
                                               std::to_string(c.num_layers)},
            {"encoder/decoder DISCO", c.filter_basis_type + ", basis_norm_mode " + c.basis_norm_mode},
            {"decoder upsampling",
             c.upsample_sht ? "SHT, lmax = mmax = " +
                                  std::to_string(sht_truncation(c.internal_nlat(), c.internal_nlon(), c.grid_internal).lmax)
                            : std::string("bilinear (ResampleS2)")},
            {"multi-rank mode", "latitude bands: DISCO/resample/neighbourhood halos from their owners, SHT orders split "
                                 "over the ranks, global attention "
                                 "on all-gathered rows, instance-norm sums per row in row order (bitwise any rank count)"}};
  }

 protected:
  void forward_host(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out, index_t ld_out,
               const RunOptions& options) override {
    if (options.cuda_device >= 0) {
      forward_on_device(comm, layout, in, ld_in, out, ld_out, options);
      return;
    }
    const TransformerConfig& c = net_.config();
    const SolverPieces pieces = solver_pieces(comm, layout, in, ld_in, c.nlat, c.nlon, "sphere_transformer");
    const index_t B = layout.num_samples();
    const int me = comm.rank();
    std::vector<float> band_out(static_cast<std::size_t>(B * pieces.bands.rows(me) * c.nlon * c.out_chans));
    {
      ThreadCount threads(options.threads);
      net_.forward_bands(comm, static_cast<int>(B), pieces.bands, pieces.held, band_out.data());
    }
    return_to_pieces(comm, pieces, B, c.nlat, c.nlon, band_out.data(), c.out_chans, out, ld_out);
  }

 private:
  /// The CUDA forward (transformer_device.hpp), fp32. One rank: the samples gathered into grid order,
  /// the device forward, the rows back. Several ranks: the latitude bands of the CPU path on the devices.
  /// The device object is built on the first call (and again when the device changes).
  void forward_on_device(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out,
                         index_t ld_out, const RunOptions& options) {
    const TransformerConfig& c = net_.config();
    if (options.precision != Precision::fp32)
      throw Error(ErrorCode::unsupported, std::string("sphere_transformer: the CUDA forward computes in fp32 only "
                                                      "(precision '") + precision_name(options.precision) + "' requested)");
    const index_t B = layout.num_samples(), P = static_cast<index_t>(c.nlat) * c.nlon;
    for (index_t s = 0; s < B; ++s)
      if (layout.sample_sizes()[static_cast<std::size_t>(s)] != P)
        throw Error(ErrorCode::input, "sphere_transformer: sample " + std::to_string(s) + " has " +
                                          std::to_string(layout.sample_sizes()[static_cast<std::size_t>(s)]) +
                                          " points, the model's grid has " + std::to_string(P) + " (nlat*nlon)");
    if (comm.size() > 1) {
      // Latitude bands, as the CPU path: each rank's band on its device, the exchanges through host memory
      // (SphereTransformerDeviceForward::forward_bands); a failure anywhere agreed on every rank.
      const SolverPieces pieces = solver_pieces(comm, layout, in, ld_in, c.nlat, c.nlon, "sphere_transformer");
      std::vector<float> band_out(static_cast<std::size_t>(B * pieces.bands.rows(comm.rank()) * c.nlon * c.out_chans));
      collectively(comm, [&] { ensure_device(options.cuda_device); });
      {
        ThreadCount threads(options.threads);
        device_->forward_bands(comm, static_cast<int>(B), pieces.bands, pieces.held, band_out.data());
      }
      return_to_pieces(comm, pieces, B, c.nlat, c.nlon, band_out.data(), c.out_chans, out, ld_out);
      return;
    }
    ensure_device(options.cuda_device);
    const int cin = c.in_chans, cout = c.out_chans;
    std::vector<float> grid_in(static_cast<std::size_t>(B * P * cin)), grid_out(static_cast<std::size_t>(B * P * cout));
    for (const auto& seg : layout.segments())  // one rank: each segment is a whole sample
      for (index_t p = 0; p < seg.end - seg.begin; ++p)
        std::copy_n(in + (seg.begin + p) * ld_in, cin, grid_in.data() + (seg.sample * P + p) * cin);
    device_->forward(static_cast<int>(B), grid_in.data(), grid_out.data());
    for (const auto& seg : layout.segments())
      for (index_t p = 0; p < seg.end - seg.begin; ++p)
        std::copy_n(grid_out.data() + (seg.sample * P + p) * cout, cout, out + (seg.begin + p) * ld_out);
  }

  /// The device object for `cuda_device` (built on the first call, and again when the device changes).
  void ensure_device(int cuda_device) {
    if (device_ && device_->device() == cuda_device) return;
    device_.reset();
#if SURROGATE_HAVE_CUDA
    device_ = make_sphere_transformer_device_forward(net_, file_, cuda_device);
#else
    detail::refuse_without_cuda_backend("sphere_transformer", cuda_device);
#endif
  }

  SphericalTransformer net_;
  ModelFile file_;  // the attention and DISCO weights the device forward uploads
  std::unique_ptr<SphereTransformerDeviceForward> device_;
};

// ------------------------------------------------------------------------------------------------------
// Single layers: AttentionS2 / NeighborhoodAttentionS2 as self-attention on one grid.

struct LayerSetup {
  AttentionS2Config att;
  NeighborhoodAttentionS2Config nbh;
  AttentionS2Weights weights;
};

std::vector<float> weight_or_empty(const ModelFile& f, const std::string& key) {
  return f.weights.count(key) ? f.weight(key).values : std::vector<float>{};
}

LayerSetup layer_setup(const ModelFile& f, bool neighborhood, bool between_grids) {
  const AttributeMap& a = f.config;
  const std::string family = f.architecture;
  detail::check_release(a, family);
  LayerSetup s;
  AttentionS2Config& c = s.att;
  c.in_channels = static_cast<int>(a.get_int("in_channels"));
  c.num_heads = static_cast<int>(a.get_int("num_heads", 1));
  const auto in_shape = a.get_int_list("in_shape");
  const auto out_shape = a.has("out_shape") ? a.get_int_list("out_shape") : in_shape;
  if (in_shape.size() != 2 || out_shape.size() != 2)
    throw Error(ErrorCode::format, family + " /config: in_shape and out_shape must hold two integers");
  if (in_shape != out_shape && !between_grids)
    throw Error(ErrorCode::unsupported,
                "'" + f.path + "': " + family + " with in_shape != out_shape (" + std::to_string(in_shape[0]) + "x" +
                    std::to_string(in_shape[1]) + " -> " + std::to_string(out_shape[0]) + "x" +
                    std::to_string(out_shape[1]) +
                    ") is not a generic Model: its query lies on the output grid and its keys/values on the input "
                    "grid (two fields), while a Model maps each input point to one output row; build the operator "
                    "with surrogate::sphere::" + (neighborhood ? "neighborhood_attention_from_file" : "attention_from_file") +
                    " (surrogate/sphere/layer_file.hpp) and call its forward(query, key, value)");
  c.nlat_in = static_cast<int>(in_shape[0]);
  c.nlon_in = static_cast<int>(in_shape[1]);
  c.nlat_out = static_cast<int>(out_shape[0]);
  c.nlon_out = static_cast<int>(out_shape[1]);
  c.grid_in = parse_grid(a.has("grid_in") ? a.get_string("grid_in") : "equiangular", "grid_in");
  c.grid_out = parse_grid(a.has("grid_out") ? a.get_string("grid_out") : "equiangular", "grid_out");
  c.bias = a.has("bias") ? a.get_bool("bias") : true;
  c.use_qknorm = a.has("use_qknorm") && a.get_bool("use_qknorm");
  c.k_channels = static_cast<int>(a.get_int("k_channels", 0));
  c.out_channels = static_cast<int>(a.get_int("out_channels", 0));
  if (a.has("scale")) {
    c.scale_mode = a.has("scale_is_tensor") && a.get_bool("scale_is_tensor") ? ScaleMode::tensor : ScaleMode::value;
    c.scale = static_cast<float>(a.get_double("scale"));
  }
  AttentionS2Weights& w = s.weights;
  w.q_weights = f.weight("q_weights").values;
  w.k_weights = f.weight("k_weights").values;
  w.v_weights = f.weight("v_weights").values;
  w.proj_weights = f.weight("proj_weights").values;
  w.q_bias = weight_or_empty(f, "q_bias");
  w.k_bias = weight_or_empty(f, "k_bias");
  w.v_bias = weight_or_empty(f, "v_bias");
  w.proj_bias = weight_or_empty(f, "proj_bias");
  w.q_norm_weights = weight_or_empty(f, "q_norm_weights");
  w.k_norm_weights = weight_or_empty(f, "k_norm_weights");
  if (neighborhood) {
    NeighborhoodAttentionS2Config& n = s.nbh;
    n.in_channels = c.in_channels;
    n.num_heads = c.num_heads;
    n.nlat_in = c.nlat_in;
    n.nlon_in = c.nlon_in;
    n.nlat_out = c.nlat_out;
    n.nlon_out = c.nlon_out;
    n.grid_in = c.grid_in;
    n.grid_out = c.grid_out;
    n.bias = c.bias;
    n.use_qknorm = c.use_qknorm;
    n.k_channels = c.k_channels;
    n.out_channels = c.out_channels;
    n.scale_mode = c.scale_mode;
    n.scale = c.scale;
    n.theta_cutoff = a.get_double("theta_cutoff", 0.0);
  }
  // Every stored tensor must be one the operator takes (the operator checks the sizes of those).
  for (const auto& [key, t] : f.weights) {
    static const char* known[] = {"q_weights", "k_weights", "v_weights", "proj_weights", "q_bias",
                                  "k_bias",    "v_bias",    "proj_bias", "q_norm_weights", "k_norm_weights"};
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return key == k; }) == std::end(known))
      throw Error(ErrorCode::weights, "'" + f.path + "': unexpected tensor '" + key + "' for " + family);
  }
  return s;
}

template <class Op>
class S2LayerModel final : public Model {
 public:
  S2LayerModel(const ModelFile& f, Op op, LayerSetup setup, int in, int out, index_t points, std::int64_t params)
      : Model(f, in, out), op_(std::move(op)), setup_(std::move(setup)), points_(points), parameters_(params) {}
  index_t parameter_count() const override { return parameters_; }
  std::vector<std::pair<std::string, std::string>> describe() const override {
    const auto& c = op_.config();
    return {{"grid", std::to_string(c.nlat_in) + " x " + std::to_string(c.nlon_in) + " " + to_string(c.grid_in)},
            {"channels in / k / out", std::to_string(c.in_channels) + " / " + std::to_string(c.k_channels) + " / " +
                                          std::to_string(c.out_channels)},
            {"heads", std::to_string(c.num_heads)},
            {"multi-rank mode", std::is_same_v<Op, AttentionS2>
                                    ? "latitude bands; keys/values all-gathered (global attention)"
                                    : "latitude bands; key/value halo of the rows inside the cutoff"}};
  }

 protected:
  void forward_host(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out, index_t ld_out,
               const RunOptions& options) override {
    if (options.cuda_device >= 0) {
      forward_on_device(comm, layout, in, ld_in, out, ld_out, options);
      return;
    }
    const BandInput band = band_input(comm, layout, in, ld_in);
    const index_t B = layout.num_samples();
    const int g0 = band.lat_begin, g1 = band.lat_end, nlon = op_.config().nlon_in;
    std::vector<float> band_out(static_cast<std::size_t>(B * (g1 - g0) * nlon * out_channels()));
    {
      ThreadCount threads(options.threads);
      if constexpr (std::is_same_v<Op, NeighborhoodAttentionS2>)
        op_.forward_rows(static_cast<int>(B), g0, g1, band.query(), band.kv_rows.first, band.kv_rows.second, band.kv(),
                         band.kv(), band_out.data());
      else
        op_.forward_rows(static_cast<int>(B), g0, g1, band.query(), band.kv(), band.kv(), band_out.data());
    }
    return_to_pieces(comm, band.pieces, B, op_.config().nlat_in, nlon, band_out.data(), out_channels(), out, ld_out);
  }

 private:
  /// This rank's latitude band and the input rows it needs: the band's own rows (queries), then the
  /// key/value rows - every row for global attention, the rows inside the cutoff for neighbourhood
  /// attention - fetched in one collective from the ranks holding them.
  struct BandInput {
    SolverPieces pieces;
    int lat_begin = 0, lat_end = 0;
    std::pair<int, int> kv_rows;
    std::vector<float> rows;
    std::size_t query_floats = 0;
    const float* query() const { return rows.data(); }
    const float* kv() const { return rows.data() + query_floats; }
  };
  /// Collective (solver_pieces, fetch_rows).
  BandInput band_input(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in) const {
    const auto& c = op_.config();
    const int nlat = c.nlat_in, nlon = c.nlon_in, me = comm.rank();
    BandInput band;
    band.pieces = solver_pieces(comm, layout, in, ld_in, nlat, nlon, architecture());
    const index_t B = layout.num_samples();
    const int g0 = band.pieces.bands.begin(me), g1 = band.pieces.bands.end(me);
    band.lat_begin = g0;
    band.lat_end = g1;
    band.kv_rows = {0, g0 < g1 ? nlat : 0};  // an empty band fetches nothing
    if constexpr (std::is_same_v<Op, NeighborhoodAttentionS2>) band.kv_rows = op_.input_rows(g0, g1);
    std::vector<RowRange> wanted = band_ranges(B, points_, nlon, g0, g1);
    band.query_floats = static_cast<std::size_t>(B * (g1 - g0) * nlon * in_channels());
    for (const RowRange& r : band_ranges(B, points_, nlon, band.kv_rows.first, band.kv_rows.second)) wanted.push_back(r);
    band.rows = fetch_rows(comm, band.pieces.held, wanted, in_channels());
    return band;
  }

  /// The device object for `cuda_device` (built on the first call, and again when the device changes).
  void ensure_device(int cuda_device) {
    if (device_ && device_->device() == cuda_device) return;
    device_.reset();
#if SURROGATE_HAVE_CUDA
    if constexpr (std::is_same_v<Op, NeighborhoodAttentionS2>)
      device_ = make_s2_neighborhood_attention_device_forward(setup_.nbh, setup_.weights, cuda_device);
    else
      device_ = make_s2_attention_device_forward(setup_.att, setup_.weights, cuda_device);
#else
    detail::refuse_without_cuda_backend(architecture(), cuda_device);
#endif
  }

  /// Several ranks on devices: the same band and the same one fetch as the CPU path (host memory, MPI),
  /// the band's rows uploaded, the device operator's row-range forward, the rows downloaded and returned
  /// to the solver's pieces. A failure on any rank (no device, out of memory, a launch) is agreed: every
  /// rank throws the same Error. Bitwise the one-rank device forward (same kernels on the same rows).
  void forward_bands_on_device(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out,
                               index_t ld_out, const RunOptions& options) {
    const BandInput band = band_input(comm, layout, in, ld_in);
    const index_t B = layout.num_samples();
    const int nlon = op_.config().nlon_in;
    std::vector<float> band_out(static_cast<std::size_t>(B * (band.lat_end - band.lat_begin) * nlon * out_channels()));
    collectively(comm, [&] {
      ensure_device(options.cuda_device);
      device_->forward_band(static_cast<int>(B), band.lat_begin, band.lat_end, band.query(), band.kv_rows.first,
                            band.kv_rows.second, band.kv(), band_out.data());
    });
    return_to_pieces(comm, band.pieces, B, op_.config().nlat_in, nlon, band_out.data(), out_channels(), out, ld_out);
  }

  /// The CUDA forward (layer_device.hpp), fp32. One rank: the samples gathered into grid order, the
  /// device operator on the whole grid, the rows back. Several ranks: forward_bands_on_device. The device
  /// object is built on the first call (and again when the device changes); the device operator refuses
  /// the upsampling mode at construction.
  void forward_on_device(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out,
                         index_t ld_out, const RunOptions& options) {
    if (options.precision != Precision::fp32)
      throw Error(ErrorCode::unsupported, architecture() + ": the CUDA forward computes in fp32 only (precision '" +
                                              precision_name(options.precision) + "' requested)");
    const index_t B = layout.num_samples();
    for (index_t s = 0; s < B; ++s)
      if (layout.sample_sizes()[static_cast<std::size_t>(s)] != points_)
        throw Error(ErrorCode::input, architecture() + ": sample " + std::to_string(s) + " has " +
                                          std::to_string(layout.sample_sizes()[static_cast<std::size_t>(s)]) +
                                          " points, the model's grid has " + std::to_string(points_) +
                                          " (nlat*nlon)");
    if (comm.size() > 1) {
      forward_bands_on_device(comm, layout, in, ld_in, out, ld_out, options);
      return;
    }
    ensure_device(options.cuda_device);
    const int cin = in_channels(), cout = out_channels();
    const index_t P = points_;
    std::vector<float> grid_in(static_cast<std::size_t>(B * P * cin)), grid_out(static_cast<std::size_t>(B * P * cout));
    for (const auto& seg : layout.segments())  // one rank: each segment is a whole sample
      for (index_t p = 0; p < seg.end - seg.begin; ++p)
        std::copy_n(in + (seg.begin + p) * ld_in, cin, grid_in.data() + (seg.sample * P + p) * cin);
    device_->forward(static_cast<int>(B), grid_in.data(), grid_out.data());
    for (const auto& seg : layout.segments())
      for (index_t p = 0; p < seg.end - seg.begin; ++p)
        std::copy_n(grid_out.data() + (seg.sample * P + p) * cout, cout, out + (seg.begin + p) * ld_out);
  }

  Op op_;
  LayerSetup setup_;  // the configuration and weights the device operator uploads
  std::unique_ptr<S2LayerDeviceForward> device_;
  index_t points_;
  std::int64_t parameters_;
};

std::int64_t count_parameters(const ModelFile& f) {
  std::int64_t n = 0;
  for (const auto& [key, t] : f.weights) n += t.numel();
  return n;
}

}  // namespace

std::unique_ptr<Model> make_transformer_model(const ModelFile& file) {
  SphericalTransformer net(file);
  return std::make_unique<SphereTransformerModel>(file, std::move(net));
}

std::unique_ptr<Model> make_attention_model(const ModelFile& file) {
  LayerSetup s = layer_setup(file, false, false);
  AttentionS2 op(s.att, s.weights);
  const auto& c = op.config();
  const index_t points = static_cast<index_t>(c.nlat_in) * c.nlon_in;
  const int in = c.in_channels, out = c.out_channels;
  return std::make_unique<S2LayerModel<AttentionS2>>(file, std::move(op), std::move(s), in, out, points,
                                                     count_parameters(file));
}

std::unique_ptr<Model> make_neighborhood_attention_model(const ModelFile& file) {
  LayerSetup s = layer_setup(file, true, false);
  NeighborhoodAttentionS2 op(s.nbh, s.weights);
  const auto& c = op.config();
  const index_t points = static_cast<index_t>(c.nlat_in) * c.nlon_in;
  const int in = c.in_channels, out = c.out_channels;
  return std::make_unique<S2LayerModel<NeighborhoodAttentionS2>>(file, std::move(op), std::move(s), in, out, points,
                                                                 count_parameters(file));
}

AttentionS2 attention_from_file(const ModelFile& file) {
  if (file.architecture != "s2_attention")
    throw Error(ErrorCode::format, "'" + file.path + "': attention_from_file needs an s2_attention file, not " +
                                       file.architecture);
  LayerSetup s = layer_setup(file, false, true);
  return AttentionS2(s.att, s.weights);
}

NeighborhoodAttentionS2 neighborhood_attention_from_file(const ModelFile& file) {
  if (file.architecture != "s2_neighborhood_attention")
    throw Error(ErrorCode::format, "'" + file.path + "': neighborhood_attention_from_file needs an "
                                   "s2_neighborhood_attention file, not " + file.architecture);
  LayerSetup s = layer_setup(file, true, true);
  return NeighborhoodAttentionS2(s.nbh, s.weights);
}

}  // namespace surrogate::sphere
