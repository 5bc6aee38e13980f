// The CUDA forward of DiscoConvS2 and ResampleS2 (grid_ops_device.hpp; CUDA builds only, added by
// libsurrogate/cmake/cuda.cmake). Host code: the regrouped filter table, the grouped weight and the
// interpolation tables on the device, the scratch, and the launches of kernels/cuda/sphere_grid_ops.cu.
#include "surrogate/sphere/grid_ops_device.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "device_call.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_sphere_grid_ops.hpp"

namespace surrogate::sphere {

namespace cu = kernels::cuda;
using device_call::on_device;
using device_call::upload;
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
      : cpu(config, weight, bias, table, DiscoOrder::gather_first), device(device_index) {
    const int K = cpu.kernel_size();
    const DiscoSegments s = disco_segments(cpu.table(), K);
    on_device(kDiscoName, device, [&] {
      upload(segment, s.segment, device);
      upload(lat_in, s.lat_in, device);
      upload(lon_in, s.lon_in, device);
      upload(value, s.value, device);
      upload(grouped_weight, disco_grouped_weight(cpu.config(), K, weight), device);
      if (config.bias) upload(bias_values, bias, device);
      cu::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize(after uploading the table and weights)");
    });
  }
  DiscoConvS2 cpu;
  int device;
  cu::DeviceBuffer<std::int64_t> segment;
  cu::DeviceBuffer<std::int32_t> lat_in, lon_in;
  cu::DeviceBuffer<float> value, grouped_weight, bias_values, y;
};

DiscoConvS2Device::DiscoConvS2Device(const DiscoConfig& config, std::vector<float> weight, std::vector<float> bias,
                                     const FilterTable* table, int device)
    : impl_(std::make_unique<Impl>(config, weight, bias, table, device)) {}
DiscoConvS2Device::~DiscoConvS2Device() = default;
DiscoConvS2Device::DiscoConvS2Device(DiscoConvS2Device&&) noexcept = default;
DiscoConvS2Device& DiscoConvS2Device::operator=(DiscoConvS2Device&&) noexcept = default;
const DiscoConvS2& DiscoConvS2Device::host() const noexcept { return impl_->cpu; }
int DiscoConvS2Device::device() const noexcept { return impl_->device; }

void DiscoConvS2Device::forward(int batch, const float* in, float* out, cudaStream_t stream) {
  Impl& m = *impl_;
  const DiscoConfig& c = m.cpu.config();
  if (batch < 0) throw Error(ErrorCode::invalid_argument, std::string(kDiscoName) + ": batch must be non-negative, got " + std::to_string(batch));
  if (batch == 0) return;
  if (!in || !out) throw Error(ErrorCode::invalid_argument, std::string(kDiscoName) + ": in and out must not be null");
  const int K = m.cpu.kernel_size();
  const index_t width = static_cast<index_t>(K) * c.in_channels;  // y columns
  const index_t rows = static_cast<index_t>(batch) * c.nlat_out;  // (sample, output latitude) rows
  const index_t per_row = width * c.nlon_out;
  const index_t chunk = std::clamp<index_t>(static_cast<index_t>(kDiscoScratchFloats) / per_row, 1, 65535);
  on_device(kDiscoName, m.device, [&] {
    m.y.resize(static_cast<std::size_t>(std::min(chunk, rows) * per_row), m.device);
    cu::DiscoTable table;
    table.segment = m.segment.data();
    table.lat_in = m.lat_in.data();
    table.lon_in = m.lon_in.data();
    table.value = m.value.data();
    table.kernel_size = K;
    for (index_t r0 = 0; r0 < rows; r0 += chunk) {
      const index_t r1 = std::min(rows, r0 + chunk);
      cu::DiscoContractionArgs a;
      a.x = in;
      a.ldx = c.in_channels;
      a.y = m.y.data();
      a.ldy = width;
      a.batch = batch;
      a.nlat_in = c.nlat_in;
      a.nlon_in = c.nlon_in;
      a.nlat_out = c.nlat_out;
      a.nlon_out = c.nlon_out;
      a.channels = c.in_channels;
      a.groups = c.groups;
      a.rows_begin = r0;
      a.rows_end = r1;
      cu::disco_contraction(a, table, stream);
      cu::GroupedLinearArgs l;
      l.x = m.y.data();
      l.ldx = width;
      l.weight = m.grouped_weight.data();
      l.bias = c.bias ? m.bias_values.data() : nullptr;
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

// ---------------------------------------------------------------------------------------------------

struct ResampleS2Device::Impl {
  Impl(const ResampleConfig& config, int device_index) : cpu(config), device(device_index) {
    on_device(kResampleName, device, [&] {
      upload(lat_index, cpu.lat_index(), device);
      upload(lat_weight, cpu.lat_weight(), device);
      upload(lon_left, cpu.lon_left(), device);
      upload(lon_right, cpu.lon_right(), device);
      upload(lon_weight, cpu.lon_weight(), device);
      cu::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize(after uploading the interpolation tables)");
    });
  }
  ResampleS2 cpu;
  int device;
  cu::DeviceBuffer<int> lat_index, lon_left, lon_right;
  cu::DeviceBuffer<float> lat_weight, lon_weight, poles;
};

ResampleS2Device::ResampleS2Device(const ResampleConfig& config, int device)
    : impl_(std::make_unique<Impl>(config, device)) {}
ResampleS2Device::~ResampleS2Device() = default;
ResampleS2Device::ResampleS2Device(ResampleS2Device&&) noexcept = default;
ResampleS2Device& ResampleS2Device::operator=(ResampleS2Device&&) noexcept = default;
const ResampleS2& ResampleS2Device::host() const noexcept { return impl_->cpu; }
int ResampleS2Device::device() const noexcept { return impl_->device; }

void ResampleS2Device::forward(int batch, int channels, const float* in, float* out, cudaStream_t stream) {
  Impl& m = *impl_;
  const ResampleConfig& c = m.cpu.config();
  const auto invalid = [](const std::string& msg) { throw Error(ErrorCode::invalid_argument, std::string(kResampleName) + ": " + msg); };
  if (batch < 1) invalid("batch must be at least 1, got " + std::to_string(batch));
  if (channels < 1) invalid("channels must be at least 1, got " + std::to_string(channels));
  if (!in || !out) invalid("in and out must not be null");
  on_device(kResampleName, m.device, [&] {
    if (m.cpu.identity()) {
      const std::size_t values = static_cast<std::size_t>(batch) * static_cast<std::size_t>(c.nlat_in) *
                                 static_cast<std::size_t>(c.nlon_in) * static_cast<std::size_t>(channels);
      if (in != out) cu::copy_on_device(out, in, values * sizeof(float), stream);
      return;
    }
    if (m.cpu.expand_poles())
      m.poles.resize(static_cast<std::size_t>(batch) * 2 * static_cast<std::size_t>(channels), m.device);
    cu::ResampleTables t;
    t.lat_index = m.lat_index.data();
    t.lat_weight = m.lat_weight.data();
    t.lon_left = m.lon_left.data();
    t.lon_right = m.lon_right.data();
    t.lon_weight = m.lon_weight.data();
    t.expand_poles = m.cpu.expand_poles();
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
    cu::resample(a, t, stream);
  });
}

}  // namespace surrogate::sphere
