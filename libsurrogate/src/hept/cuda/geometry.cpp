// HEPT's plan rows on a CUDA device (geometry.hpp): the steps of ../geometry.cpp on device arrays. The host
// computes what depends on the graphs' sizes only (offsets, the quantile bin sizes, its checks) and the bit
// widths of the rows' maxima (two small copies, which the ranks reduce anyway); the sorts, ranks, regions,
// codes and padding run on the device (surrogate/kernels/cuda_hept_plan.hpp).
#include "geometry.hpp"

#include <algorithm>
#include <exception>
#include <numeric>
#include <span>
#include <string>

#include "../../device/layers.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda_bucket_attention.hpp"
#include "surrogate/kernels/cuda_hept_plan.hpp"

namespace surrogate::hept::gpu {
namespace {

namespace cu = kernels::cuda;
using surrogate::device::sized;
using surrogate::device::upload;

template <class T>
std::vector<T> download_array(const cu::DeviceBuffer<T>& b, std::int64_t n, cudaStream_t stream) {
  std::vector<T> v(static_cast<std::size_t>(n));
  if (n > 0) cu::copy_to_host(v.data(), b.data(), v.size() * sizeof(T), stream);
  return v;
}

/// The rows' maxima on the host, reduced over the ranks, as bit widths (finish_geometry's batch_max). A
/// failure so far: -1 handed to the reduction (every rank stops there), then rethrown.
std::vector<std::int64_t> bit_widths(const std::int64_t* values, int rows, std::int64_t columns, const ReduceMax& reduce,
                                     std::int64_t* local_first, std::exception_ptr& failed, cudaStream_t stream,
                                     int device, cu::DeviceBuffer<std::int64_t>& maxima) {
  std::vector<std::int64_t> m(static_cast<std::size_t>(rows), 0);
  if (!failed) try {
      if (columns > 0) {
        cu::hept_row_max(values, rows, columns, sized(maxima, rows, device), stream);
        cu::copy_to_host(m.data(), maxima.data(), m.size() * sizeof(std::int64_t), stream);  // returns when done
      }
    } catch (...) {
      failed = std::current_exception();
    }
  if (local_first) *local_first = m.front();
  if (failed) {
    std::fill(m.begin(), m.end(), -1);
    try {
      if (reduce) reduce(m);
    } catch (...) {  // every rank stops there; this rank's own error is the one to agree on
    }
    std::rethrow_exception(failed);
  }
  if (reduce) reduce(m);
  for (auto& b : m) b = bit_width(b);
  return m;
}

/// Stable sorts of `rows` rows of n keys within each of the G graphs (offsets scratch.first): perm.
template <class T>
void sort_in_graphs(const T* keys, int rows, std::int64_t n, int G, PlanScratch& scratch, std::int64_t* perm,
                    cudaStream_t stream) {
  cu::SegmentSortLaunchOf<T> a;
  a.rows = rows;
  a.points = n;
  a.segments = G;
  a.first = scratch.first.data();
  a.keys = keys;
  a.perm = perm;
  a.work = &scratch.sort;
  if constexpr (sizeof(T) == sizeof(float)) cu::segment_sort(a, stream);
  else cu::segment_sort_f64(a, stream);
}

/// The padded rows' coordinates from the input rows' (`raw`, device), with the zero flags of src's pads.
void pad_coordinates(PlanRows& p, const float* raw, cudaStream_t stream) {
  cu::HeptPadRowsArgs a;
  a.padded = p.np;
  a.pad_seq = p.pad_seq.data();
  a.in = raw;
  a.ldi = p.coords_dim;
  a.kept = p.coords_dim;
  a.out = sized(p.coords, p.np * p.coords_dim, p.device_id);
  a.ldo = p.coords_dim;
  a.zero = sized(p.zero, p.np, p.device_id);
  cu::hept_pad_rows(a, stream);
}

}  // namespace

std::unique_ptr<PlanRows> build_plan_rows(const Config& cfg, const std::vector<float>& regions, int device,
                                          cudaStream_t stream, PlanScratch& scratch, const float* coords,
                                          const std::vector<std::int64_t>& sizes,
                                          const std::vector<std::int64_t>& graph_ids, const ReduceMax& reduce_max) {
  const int H = cfg.num_heads, rows = cfg.n_hashes * H, cd = cfg.coords_dim;
  const bool src = cfg.layout == Config::Layout::src;
  const std::int64_t bs = cfg.block_size;
  const auto G = static_cast<int>(sizes.size());
  auto p = std::make_unique<PlanRows>();
  p->device_id = device;
  p->rows = rows;
  p->coords_dim = cd;
  Geometry& small = p->small;
  std::exception_ptr failed;
  // Offsets of the points, of the ranked columns (src: the padded graph) and of the padded rows; the bin
  // sizes in float (quantile_bins<float>); the CPU's errors.
  std::vector<std::int64_t> first{0}, ranked_first{0}, padded_first{0}, bins(2 * static_cast<std::size_t>(G) * rows);
  try {
    if (src && G > 1)
      throw Error(ErrorCode::input, "hept: the src layout runs one graph per batch; this batch has " +
                                        std::to_string(G) + " graphs");
    small.sizes = sizes;
    small.bin_eta.assign(static_cast<std::size_t>(G) * rows, 0.0);
    small.bin_phi.assign(small.bin_eta.size(), 0.0);
    for (int g = 0; g < G; ++g) {
      const std::int64_t ng = sizes[static_cast<std::size_t>(g)], pg = (ng + bs - 1) / bs * bs, mg = src ? pg : ng;
      first.push_back(first.back() + ng);
      ranked_first.push_back(ranked_first.back() + mg);
      padded_first.push_back(padded_first.back() + pg);
      for (int axis = 0; axis < 2; ++axis)
        for (int r = 0; r < rows; ++r) {
          const float R = regions[static_cast<std::size_t>(((r / H) * 2 + axis) * H + r % H)];
          const std::int64_t bin = quantile_bin<float>(mg, R);
          bins[(static_cast<std::size_t>(axis) * G + static_cast<std::size_t>(g)) * rows + static_cast<std::size_t>(r)] = bin;
          (axis == 0 ? small.bin_eta : small.bin_phi)[static_cast<std::size_t>(g) * rows + static_cast<std::size_t>(r)] =
              static_cast<double>(bin);
        }
    }
    if (!src)
      for (int g = 0; g < G; ++g)
        if (sizes[static_cast<std::size_t>(g)] < bs)
          throw Error(ErrorCode::input, "hept: graph " + std::to_string(graph_ids[static_cast<std::size_t>(g)]) +
                                            " has " + std::to_string(sizes[static_cast<std::size_t>(g)]) +
                                            " points, fewer than the block size " + std::to_string(bs) +
                                            " (the official code then pads it with points of other graphs)");
  } catch (...) {
    failed = std::current_exception();
  }
  const std::int64_t n = first.back(), ranked = ranked_first.back();
  p->n = n;
  p->np = src ? ranked : padded_first.back();
  small.padded_sizes = src ? std::vector<std::int64_t>{ranked} : std::vector<std::int64_t>();
  if (!src)
    for (int g = 0; g < G; ++g) small.padded_sizes.push_back(padded_first[static_cast<std::size_t>(g) + 1] - padded_first[static_cast<std::size_t>(g)]);

  PlanScratch& w = scratch;
  // Ranks of eta and phi within each graph, the regions of every row.
  if (!failed && n > 0) try {
      upload(w.coords, std::span<const float>(coords, static_cast<std::size_t>(n * cd)), device, stream);
      cu::hept_axis_keys(w.coords.data(), cd, n, sized(w.keys, 2 * n, device), stream);
      upload(w.first, std::span<const std::int64_t>(first), device, stream);
      upload(w.ranked_first, std::span<const std::int64_t>(ranked_first), device, stream);
      sort_in_graphs(w.keys.data(), 2, n, G, w, sized(w.order, 2 * n, device), stream);
      upload(w.bins, std::span<const std::int64_t>(bins), device, stream);
      cu::HeptRegionArgs ra;
      ra.rows = rows;
      ra.graphs = G;
      ra.points = n;
      ra.ranked = ranked;
      ra.first = w.first.data();
      ra.ranked_first = w.ranked_first.data();
      ra.order = w.order.data();
      ra.bins = w.bins.data();
      ra.rank = sized(w.rank, 2 * ranked, device);
      ra.region_eta = sized(p->region_eta, rows * ranked, device);
      ra.region_phi = sized(p->region_phi, rows * ranked, device);
      cu::hept_regions(ra, stream);
      p->region_values = rows * ranked;
    } catch (...) {
      failed = std::current_exception();
    }
  if (src) {
    if (failed) std::rethrow_exception(failed);
    if (n == 0) return p;
    // No codes: the points in order, then zero pads (pad_seq -1).
    cu::HeptPaddingArgs pa;
    pa.graphs = 1;
    pa.block = static_cast<int>(bs);
    pa.zero_pads = true;
    pa.points = n;
    pa.padded = p->np;
    pa.first = w.first.data();
    pa.padded_first = w.ranked_first.data();
    pa.pad_seq = sized(p->pad_seq, p->np, device);
    pa.point_row = sized(p->point_row, n, device);
    pa.unpad = sized(p->unpad, p->np, device);
    cu::hept_padding(pa, stream);
    upload(p->padded_first, std::span<const std::int64_t>(ranked_first), device, stream);
  } else {
    // Bit widths over the batch, the codes, the stable order of row 0's codes in each graph, the tags.
    std::int64_t local_max0 = 0;
    small.bits_eta = bit_widths(p->region_eta.data(), rows, n, reduce_max, nullptr, failed, stream, device, w.maxima);
    cu::HeptCodeArgs ca;
    ca.rows = rows;
    ca.graphs = G;
    ca.points = n;
    if (n > 0) try {
        upload(w.bits_eta, std::span<const std::int64_t>(small.bits_eta), device, stream);
        ca.first = w.first.data();
        ca.region_eta = p->region_eta.data();
        ca.region_phi = p->region_phi.data();
        ca.bits_eta = w.bits_eta.data();
        ca.codes = sized(p->codes, rows * n, device);
        cu::hept_region_codes(ca, stream);
        p->code_values = rows * n;
      } catch (...) {
        failed = std::current_exception();
      }
    small.bits_code1 =
        bit_widths(p->codes.data(), rows, n, reduce_max, &local_max0, failed, stream, device, w.maxima);
    if (n == 0) return p;
    // Row 0's codes before the tags (constant within a graph) as exact sort keys.
    std::int64_t* order = sized(p->pad_sort_order, n, device);
    if (local_max0 < (std::int64_t{1} << 24)) {
      cu::hept_code_keys(p->codes.data(), n, sized(w.keys, n, device), stream);
      sort_in_graphs(w.keys.data(), 1, n, G, w, order, stream);
    } else {
      if (local_max0 >= (std::int64_t{1} << 53))
        throw Error(ErrorCode::unsupported, "hept: region codes up to " + std::to_string(local_max0) +
                                                " exceed the device sort's exact keys (2^53)");
      cu::hept_code_keys_f64(p->codes.data(), n, sized(w.keys64, n, device), stream);
      sort_in_graphs(w.keys64.data(), 1, n, G, w, order, stream);
    }
    upload(w.bits_code1, std::span<const std::int64_t>(small.bits_code1), device, stream);
    upload(w.ids, std::span<const std::int64_t>(graph_ids), device, stream);
    ca.graph_ids = w.ids.data();
    ca.bits_code1 = w.bits_code1.data();
    cu::hept_tag_codes(ca, stream);
    upload(p->padded_first, std::span<const std::int64_t>(padded_first), device, stream);
    cu::HeptPaddingArgs pa;
    pa.graphs = G;
    pa.block = static_cast<int>(bs);
    pa.points = n;
    pa.padded = p->np;
    pa.first = w.first.data();
    pa.padded_first = p->padded_first.data();
    pa.order = p->pad_sort_order.data();
    pa.pad_seq = sized(p->pad_seq, p->np, device);
    pa.point_row = sized(p->point_row, n, device);
    pa.unpad = sized(p->unpad, p->np, device);
    cu::hept_padding(pa, stream);
    cu::hept_gather_columns(p->codes.data(), rows, n, p->pad_seq.data(), p->np,
                            sized(p->padded_codes, rows * p->np, device), stream);
    p->padded_code_values = rows * p->np;
  }
  // The padded rows' coordinates (zero rows and flags at src's pads).
  pad_coordinates(*p, w.coords.data(), stream);
  return p;  // the host arrays above were staged when uploaded: nothing to wait for
}

std::unique_ptr<PlanRows> upload_plan_rows(const Config& cfg, int device, cudaStream_t stream, PlanScratch& scratch,
                                           const Geometry& g, const float* coords, std::int64_t inputs) {
  const int rows = cfg.n_hashes * cfg.num_heads, cd = cfg.coords_dim;
  auto p = std::make_unique<PlanRows>();
  p->device_id = device;
  p->rows = rows;
  p->coords_dim = cd;
  p->small.sizes = g.sizes;
  p->small.padded_sizes = g.padded_sizes;
  p->small.bin_eta = g.bin_eta;
  p->small.bin_phi = g.bin_phi;
  p->small.bits_eta = g.bits_eta;
  p->small.bits_code1 = g.bits_code1;
  p->n = inputs;
  p->np = g.padded_points();
  // Each input row answered by its original's padded row, or by its own row.
  std::vector<std::int64_t> point_row(static_cast<std::size_t>(inputs));
  std::iota(point_row.begin(), point_row.end(), std::int64_t{0});
  for (std::size_t j = 0; j < g.pad_seq.size(); ++j)
    if (g.unpad[j]) point_row[static_cast<std::size_t>(g.pad_seq[j])] = static_cast<std::int64_t>(j);
  std::vector<std::int64_t> padded_first{0};
  for (const std::int64_t s : g.padded_sizes) padded_first.push_back(padded_first.back() + s);
  const auto span64 = [](const auto& v) { return std::span<const std::int64_t>(v.data(), v.size()); };
  upload(p->pad_seq, span64(g.pad_seq), device, stream);
  upload(p->point_row, span64(point_row), device, stream);
  upload(p->unpad, std::span<const std::uint8_t>(g.unpad), device, stream);
  upload(p->padded_first, span64(padded_first), device, stream);
  upload(p->padded_codes, span64(g.padded_codes), device, stream);
  upload(p->region_eta, span64(g.region_eta), device, stream);
  upload(p->region_phi, span64(g.region_phi), device, stream);
  upload(scratch.coords, std::span<const float>(coords, static_cast<std::size_t>(inputs * cd)), device, stream);
  pad_coordinates(*p, scratch.coords.data(), stream);
  p->region_values = static_cast<std::int64_t>(g.region_eta.size());
  p->padded_code_values = static_cast<std::int64_t>(g.padded_codes.size());
  return p;
}

Geometry PlanRows::download() const {
  const cu::DeviceGuard guard(device_id);
  cu::device_synchronize(device_id);  // after the work of the stream that built the rows
  const cu::Stream stream(device_id);
  const cudaStream_t s = stream.get();
  Geometry g = small;
  const auto rows64 = [&](const cu::DeviceBuffer<std::int64_t>& b, std::int64_t count) {
    const std::vector<std::int64_t> v = download_array(b, count, s);
    return Geometry::RowsArray(v.begin(), v.end());
  };
  g.region_eta = rows64(region_eta, region_values);
  g.region_phi = rows64(region_phi, region_values);
  g.codes = rows64(codes, code_values);
  if (code_values > 0) g.pad_sort_order = download_array(pad_sort_order, n, s);
  g.pad_seq = download_array(pad_seq, np, s);
  g.unpad = download_array(unpad, np, s);
  g.padded_codes = rows64(padded_codes, padded_code_values);
  cu::synchronize(s);
  return g;
}

}  // namespace surrogate::hept::gpu
