// The CUDA forward of DiscoConvS2 and ResampleS2 (surrogate/sphere/grid_ops_device.hpp; CUDA builds only).
// Host code: the regrouped filter table, the grouped weight and the interpolation tables on the device,
// the scratch, and the launches of kernels/cuda/sphere_grid_ops.cu. share/docs/sphere.md.
#include "surrogate/sphere/grid_ops_device.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>

#include "on_device.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_sphere_grid_ops.hpp"

namespace surrogate::sphere {

namespace cu = kernels::cuda;
using device_ops::on_device;
using device_ops::upload;
using kernels::index_t;

DiscoSegments disco_segments(const FilterTable& t, int K) {
  DiscoSegments s;
  const std::size_t nnz = t.val.size(), groups = static_cast<std::size_t>(t.nlat_out) * static_cast<std::size_t>(K);
  s.segment.assign(groups + 1, 0);
  for (std::size_t i = 0; i < nnz; ++i) ++s.segment[static_cast<std::size_t>(t.row[i] * K + t.ker[i]) + 1];
  std::partial_sum(s.segment.begin(), s.segment.end(), s.segment.begin());
  std::vector<std::int64_t> fill(s.segment.begin(), s.segment.end() - 1);
  s.lat_in.resize(nnz);
  s.lon_in.resize(nnz);
  s.value.resize(nnz);
  for (std::size_t i = 0; i < nnz; ++i) {
    const auto dst = static_cast<std::size_t>(fill[static_cast<std::size_t>(t.row[i] * K + t.ker[i])]++);
    s.lat_in[dst] = static_cast<std::int32_t>(t.col[i] / t.nlon_in);
    s.lon_in[dst] = static_cast<std::int32_t>(t.col[i] % t.nlon_in);
    s.value[dst] = static_cast<float>(t.val[i]);
  }
  return s;
}

std::vector<float> disco_grouped_weight(const DiscoConfig& c, int K, const std::vector<float>& weight) {
  const std::size_t G = static_cast<std::size_t>(c.groups), Cg = static_cast<std::size_t>(c.in_channels) / G,
                    Og = static_cast<std::size_t>(c.out_channels) / G, J = static_cast<std::size_t>(K) * Cg;
  std::vector<float> w(G * J * Og);
  for (std::size_t g = 0; g < G; ++g)
    for (std::size_t o = 0; o < Og; ++o)
      for (std::size_t ch = 0; ch < Cg; ++ch)
        for (std::size_t k = 0; k < static_cast<std::size_t>(K); ++k)
          w[(g * J + k * Cg + ch) * Og + o] = weight[((g * Og + o) * Cg + ch) * static_cast<std::size_t>(K) + k];
  return w;
}

// ---------------------------------------------------------------------------------------------------

namespace {
constexpr const char* kDiscoName = "DiscoConvS2 (CUDA)";
constexpr const char* kResampleName = "ResampleS2 (CUDA)";
}  // namespace

struct DiscoConvS2Device::Impl {
  Impl(const DiscoConfig& config, const std::vector<float>& weight, const std::vector<float>& bias,
       const FilterTable* table, int device_index)
      // gather first, the order the device kernels follow (the emulation tests compare bitwise with it)
      : owned(std::in_place, config, weight, bias, table, DiscoOrder::gather_first), cpu(&*owned),
        device(device_index) {
    upload_operator(weight, bias);
  }
  Impl(const DiscoConvS2& host, int device_index) : cpu(&host), device(device_index) {
    upload_operator(host.weight(), host.bias());
  }
  /// The regrouped table of the CPU operator and the weights (its own, as the constructor took them).
  void upload_operator(const std::vector<float>& weight, const std::vector<float>& bias) {
    const int K = cpu->kernel_size();
    const DiscoSegments s = disco_segments(cpu->table(), K);
    on_device(kDiscoName, device, [&] {
      upload(segment, s.segment, device);
      upload(lat_in, s.lat_in, device);
      upload(lon_in, s.lon_in, device);
      upload(value, s.value, device);
      upload(grouped_weight, disco_grouped_weight(cpu->config(), K, weight), device);
      if (cpu->config().bias) upload(bias_values, bias, device);
      cu::device_synchronize(device);  // after uploading the table and weights
    });
  }
  std::optional<DiscoConvS2> owned;  // the CPU operator, unless the caller's is borrowed
  const DiscoConvS2* cpu;
  int device;
  cu::DeviceBuffer<std::int64_t> segment;
  cu::DeviceBuffer<std::int32_t> lat_in, lon_in;
  cu::DeviceBuffer<float> value, grouped_weight, bias_values, y;
  // forward_rows: lat_in with the entries of output rows [band_begin, band_end) rebased to band_in.
  cu::DeviceBuffer<std::int32_t> band_lat_in;
  int band_begin = -1, band_end = -1, band_in = -1;

  /// The band's rebased input latitudes on the device (Error(invalid_argument) for an entry outside the
  /// input rows [in_begin, in_end)).
  void set_band(int out_begin, int out_end, int in_begin, int in_end) {
    if (out_begin == band_begin && out_end == band_end && in_begin == band_in) return;
    const int K = cpu->kernel_size();
    DiscoSegments s = disco_segments(cpu->table(), K);
    const auto first = static_cast<std::size_t>(s.segment[static_cast<std::size_t>(out_begin) * static_cast<std::size_t>(K)]);
    const auto last = static_cast<std::size_t>(s.segment[static_cast<std::size_t>(out_end) * static_cast<std::size_t>(K)]);
    for (std::size_t z = first; z < last; ++z) {
      const int hi = s.lat_in[z];
      if (hi < in_begin || hi >= in_end)
        throw Error(ErrorCode::invalid_argument, std::string(kDiscoName) + ": forward_rows for output rows [" +
                                                     std::to_string(out_begin) + ", " + std::to_string(out_end) +
                                                     ") reads input row " + std::to_string(hi) + ", outside the given rows [" +
                                                     std::to_string(in_begin) + ", " + std::to_string(in_end) +
                                                     ") (input_rows() names the rows needed)");
      s.lat_in[z] = hi - in_begin;
    }
    band_begin = band_end = band_in = -1;
    on_device(kDiscoName, device, [&] {
      // A forward still running may read the buffer about to be replaced.
      cu::device_synchronize(device);  // before replacing the band's table
      upload(band_lat_in, s.lat_in, device);
      cu::device_synchronize(device);  // after uploading the band's table
    });
    band_begin = out_begin;
    band_end = out_end;
    band_in = in_begin;
  }

  /// The contraction and the GEMM of output rows [out_first, out_first + out_rows) of every sample from
  /// `in_rows` input rows per sample, whose entries' latitudes `lat` (relative to the first row of `in`).
  void contract(int batch, const float* in, int in_rows, const std::int32_t* lat, int out_first, int out_rows,
                float* out, cudaStream_t stream) {
    const DiscoConfig& c = cpu->config();
    const int K = cpu->kernel_size();
    const index_t width = static_cast<index_t>(K) * c.in_channels;  // y columns
    const index_t rows = static_cast<index_t>(batch) * out_rows;    // (sample, output latitude) rows
    const index_t per_row = width * c.nlon_out;
    const index_t chunk = std::clamp<index_t>(static_cast<index_t>(kDiscoScratchFloats) / per_row, 1, 65535);
    on_device(kDiscoName, device, [&] {
      y.resize(static_cast<std::size_t>(std::min(chunk, rows) * per_row), device);
      cu::DiscoTable table;
      table.segment = segment.data() + static_cast<index_t>(out_first) * K;  // the band's first output row
      table.lat_in = lat;
      table.lon_in = lon_in.data();
      table.value = value.data();
      table.kernel_size = K;
      for (index_t r0 = 0; r0 < rows; r0 += chunk) {
        const index_t r1 = std::min(rows, r0 + chunk);
        cu::DiscoContractionArgs a;
        a.x = in;
        a.ldx = c.in_channels;
        a.y = y.data();
        a.ldy = width;
        a.batch = batch;
        a.nlat_in = in_rows;
        a.nlon_in = c.nlon_in;
        a.nlat_out = out_rows;
        a.nlon_out = c.nlon_out;
        a.channels = c.in_channels;
        a.groups = c.groups;
        a.rows_begin = r0;
        a.rows_end = r1;
        cu::disco_contraction(a, table, stream);
        cu::GroupedLinearArgs l;
        l.x = y.data();
        l.ldx = width;
        l.weight = grouped_weight.data();
        l.bias = c.bias ? bias_values.data() : nullptr;
        l.y = out + r0 * c.nlon_out * c.out_channels;
        l.ldy = c.out_channels;
        l.rows = (r1 - r0) * c.nlon_out;
        l.in = static_cast<int>(width / c.groups);
        l.out = c.out_channels / c.groups;
        l.groups = c.groups;
        cu::grouped_linear(l, stream);
      }
    });
  }
};

DiscoConvS2Device::DiscoConvS2Device(const DiscoConfig& config, std::vector<float> weight, std::vector<float> bias,
                                     const FilterTable* table, int device)
    : impl_(std::make_unique<Impl>(config, weight, bias, table, device)) {}
DiscoConvS2Device::DiscoConvS2Device(const DiscoConvS2& host, int device) : impl_(std::make_unique<Impl>(host, device)) {}
DiscoConvS2Device::~DiscoConvS2Device() = default;
DiscoConvS2Device::DiscoConvS2Device(DiscoConvS2Device&&) noexcept = default;
DiscoConvS2Device& DiscoConvS2Device::operator=(DiscoConvS2Device&&) noexcept = default;
const DiscoConvS2& DiscoConvS2Device::host() const noexcept { return *impl_->cpu; }
int DiscoConvS2Device::device() const noexcept { return impl_->device; }

void DiscoConvS2Device::forward(int batch, const float* in, float* out, cudaStream_t stream) {
  Impl& m = *impl_;
  const DiscoConfig& c = m.cpu->config();
  if (batch < 0) throw Error(ErrorCode::invalid_argument, std::string(kDiscoName) + ": batch must be non-negative, got " + std::to_string(batch));
  if (batch == 0) return;
  if (!in || !out) throw Error(ErrorCode::invalid_argument, std::string(kDiscoName) + ": in and out must not be null");
  m.contract(batch, in, c.nlat_in, m.lat_in.data(), 0, c.nlat_out, out, stream);
}

void DiscoConvS2Device::forward_rows(int batch, const float* in, int in_begin, int in_end, float* out, int out_begin,
                                     int out_end, cudaStream_t stream) {
  Impl& m = *impl_;
  const DiscoConfig& c = m.cpu->config();
  const auto invalid = [](const std::string& msg) { throw Error(ErrorCode::invalid_argument, std::string(kDiscoName) + ": " + msg); };
  if (batch < 0) invalid("batch must be non-negative, got " + std::to_string(batch));
  if (out_begin < 0 || out_begin > out_end || out_end > c.nlat_out)
    invalid("output rows [" + std::to_string(out_begin) + ", " + std::to_string(out_end) + ") outside [0, " +
            std::to_string(c.nlat_out) + ")");
  if (in_begin < 0 || in_begin > in_end || in_end > c.nlat_in)
    invalid("input rows [" + std::to_string(in_begin) + ", " + std::to_string(in_end) + ") outside [0, " +
            std::to_string(c.nlat_in) + ")");
  if (batch == 0 || out_begin == out_end) return;
  if (!in || !out) invalid("in and out must not be null");
  m.set_band(out_begin, out_end, in_begin, in_end);
  m.contract(batch, in, in_end - in_begin, m.band_lat_in.data(), out_begin, out_end - out_begin, out, stream);
}

// ---------------------------------------------------------------------------------------------------

struct ResampleS2Device::Impl {
  Impl(const ResampleConfig& config, int device_index) : owned(std::in_place, config), cpu(&*owned), device(device_index) {
    upload_tables();
  }
  Impl(const ResampleS2& host, int device_index) : cpu(&host), device(device_index) { upload_tables(); }
  void upload_tables() {
    on_device(kResampleName, device, [&] {
      upload(lat_index, cpu->lat_index(), device);
      upload(lat_weight, cpu->lat_weight(), device);
      upload(lon_left, cpu->lon_left(), device);
      upload(lon_right, cpu->lon_right(), device);
      upload(lon_weight, cpu->lon_weight(), device);
      cu::device_synchronize(device);  // after uploading the interpolation tables
    });
  }
  std::optional<ResampleS2> owned;  // the CPU operator, unless the caller's is borrowed
  const ResampleS2* cpu;
  int device;
  cu::DeviceBuffer<int> lat_index, lon_left, lon_right;
  cu::DeviceBuffer<float> lat_weight, lon_weight, poles;
};

ResampleS2Device::ResampleS2Device(const ResampleConfig& config, int device)
    : impl_(std::make_unique<Impl>(config, device)) {}
ResampleS2Device::ResampleS2Device(const ResampleS2& host, int device) : impl_(std::make_unique<Impl>(host, device)) {}
ResampleS2Device::~ResampleS2Device() = default;
ResampleS2Device::ResampleS2Device(ResampleS2Device&&) noexcept = default;
ResampleS2Device& ResampleS2Device::operator=(ResampleS2Device&&) noexcept = default;
const ResampleS2& ResampleS2Device::host() const noexcept { return *impl_->cpu; }
int ResampleS2Device::device() const noexcept { return impl_->device; }

void ResampleS2Device::forward(int batch, int channels, const float* in, float* out, cudaStream_t stream) {
  const ResampleConfig& c = impl_->cpu->config();
  forward_rows(batch, channels, in, 0, c.nlat_in, out, 0, c.nlat_out, stream);
}

void ResampleS2Device::forward_rows(int batch, int channels, const float* in, int in_begin, int in_end, float* out,
                                    int out_begin, int out_end, cudaStream_t stream) {
  Impl& m = *impl_;
  const ResampleConfig& c = m.cpu->config();
  const auto invalid = [](const std::string& msg) { throw Error(ErrorCode::invalid_argument, std::string(kResampleName) + ": " + msg); };
  const auto rows = [](int b, int e) {
    std::string r(1, '[');
    r += std::to_string(b);
    r += ", ";
    r += std::to_string(e);
    r += ')';
    return r;
  };
  if (batch < 1) invalid("batch must be at least 1, got " + std::to_string(batch));
  if (channels < 1) invalid("channels must be at least 1, got " + std::to_string(channels));
  if (out_begin < 0 || out_begin > out_end || out_end > c.nlat_out)
    invalid("output rows " + rows(out_begin, out_end) + " outside [0, nlat_out = " + std::to_string(c.nlat_out) + ")");
  if (in_begin < 0 || in_begin > in_end || in_end > c.nlat_in)
    invalid("input rows " + rows(in_begin, in_end) + " outside [0, nlat_in = " + std::to_string(c.nlat_in) + ")");
  if (out_begin == out_end) return;
  if (!in || !out) invalid("in and out must not be null");
  {  // cudaMemcpyAsync and the kernels need disjoint buffers; only the identity on the same rows runs in place
    const std::size_t in_values = static_cast<std::size_t>(batch) * static_cast<std::size_t>(in_end - in_begin) *
                                  static_cast<std::size_t>(c.nlon_in) * static_cast<std::size_t>(channels);
    const std::size_t out_values = static_cast<std::size_t>(batch) * static_cast<std::size_t>(out_end - out_begin) *
                                   static_cast<std::size_t>(c.nlon_out) * static_cast<std::size_t>(channels);
    const bool same_rows = in == out && m.cpu->identity() && in_begin == out_begin && in_end == out_end;
    const auto a = reinterpret_cast<std::uintptr_t>(in), b = reinterpret_cast<std::uintptr_t>(out);
    if (!same_rows && a < b + out_values * sizeof(float) && b < a + in_values * sizeof(float))
      invalid("in and out overlap (only the identity resampling of the same rows may run in place)");
  }
  const auto needed = m.cpu->input_rows(out_begin, out_end);
  if (needed.first < in_begin || needed.second > in_end)
    invalid("output rows " + rows(out_begin, out_end) + " read input rows " + rows(needed.first, needed.second) +
            ", the given input holds " + rows(in_begin, in_end));
  on_device(kResampleName, m.device, [&] {
    if (m.cpu->identity()) {
      const std::size_t row_values = static_cast<std::size_t>(c.nlon_in) * static_cast<std::size_t>(channels);
      const std::size_t in_sample = static_cast<std::size_t>(in_end - in_begin) * row_values;
      const std::size_t out_sample = static_cast<std::size_t>(out_end - out_begin) * row_values;
      const std::size_t skip = static_cast<std::size_t>(out_begin - in_begin) * row_values;
      if (in_sample == out_sample) {
        if (in != out) cu::copy_on_device(out, in, static_cast<std::size_t>(batch) * out_sample * sizeof(float), stream);
        return;
      }
      for (int b = 0; b < batch; ++b)
        cu::copy_on_device(out + static_cast<std::size_t>(b) * out_sample,
                           in + static_cast<std::size_t>(b) * in_sample + skip, out_sample * sizeof(float), stream);
      return;
    }
    if (m.cpu->expand_poles())
      m.poles.resize(static_cast<std::size_t>(batch) * 2 * static_cast<std::size_t>(channels), m.device);
    cu::ResampleTables t;
    t.lat_index = m.lat_index.data();
    t.lat_weight = m.lat_weight.data();
    t.lon_left = m.lon_left.data();
    t.lon_right = m.lon_right.data();
    t.lon_weight = m.lon_weight.data();
    t.expand_poles = m.cpu->expand_poles();
    t.spherical = c.mode == ResampleMode::bilinear_spherical;
    cu::ResampleArgs a;
    a.x = in;
    a.y = out;
    a.poles = m.poles.data();
    a.batch = batch;
    a.channels = channels;
    a.nlat_in = c.nlat_in;
    a.nlon_in = c.nlon_in;
    a.nlat_out = c.nlat_out;
    a.nlon_out = c.nlon_out;
    a.in_begin = in_begin;
    a.in_end = in_end;
    a.out_begin = out_begin;
    a.out_end = out_end;
    // The pole rows these output rows read (the extended rows 0 and nlat_in + 1), as the CPU decides.
    const std::vector<int>& lat = m.cpu->lat_index();
    a.north = t.expand_poles && lat[static_cast<std::size_t>(out_begin)] == 0;
    a.south = t.expand_poles && lat[static_cast<std::size_t>(out_end - 1)] + 1 == c.nlat_in + 1;
    cu::resample(a, t, stream);
  });
}

}  // namespace surrogate::sphere
