// Forward of DiscreteContinuousConvS2 on the CPU (docs/reference-models.md §5.6, share/docs/sphere.md
// "DISCO convolution"). Per (sample, output latitude t) row, independently and in parallel:
//  1. y[wo][g][k][c] = sum_z psi_z x[hi_z, (wi_z + p*wo) mod nlon_in, g*Cg + c] over the entries z of the
//     groups (k, t), in table order, in float32 with psi rounded to float32 - the arithmetic of the
//     official float32 CPU kernel, which casts psi to the input dtype and accumulates in it;
//  2. out[wo][g*Og + o] = sum_{k,c} W[g*Og + o, c, k] y[wo][g][k][c] (+ bias): one packed linear layer per
//     group (kernels::PackedLinear, K*Cg inputs) over the nlon_out rows.
// The scratch is one row's y (nlon_out x K*Cin floats) per thread, never the whole grid.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/kernels/aligned_buffer.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/sphere/disco.hpp"

namespace surrogate::sphere {

namespace {

using kernels::index_t;

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, "DiscoConvS2: " + message); }

void check_config(const DiscoConfig& c) {
  if (c.in_channels < 1 || c.out_channels < 1)
    fail(ErrorCode::invalid_argument, "in_channels and out_channels must be positive");
  if (c.groups < 1) fail(ErrorCode::invalid_argument, "groups must be positive, got " + std::to_string(c.groups));
  if (c.in_channels % c.groups || c.out_channels % c.groups)
    fail(ErrorCode::invalid_argument, "in_channels (" + std::to_string(c.in_channels) + ") and out_channels (" +
                                          std::to_string(c.out_channels) + ") must be multiples of groups (" +
                                          std::to_string(c.groups) + ")");
  if (c.nlat_in < 1 || c.nlon_in < 1 || c.nlat_out < 1 || c.nlon_out < 1)
    fail(ErrorCode::invalid_argument, "grid sizes (nlat_in, nlon_in, nlat_out, nlon_out) must be positive");
  if (c.nlon_in % c.nlon_out)
    throw Error(ErrorCode::unsupported,
                "DiscoConvS2: nlon_in (" + std::to_string(c.nlon_in) + ") must be an integer multiple of nlon_out (" +
                    std::to_string(c.nlon_out) +
                    "); the transpose / upsampling convolution (DiscreteContinuousConvTransposeS2) is not implemented");
}

void check_table(const DiscoConfig& c, int K, const FilterTable& t) {
  auto bad = [](const std::string& m) { fail(ErrorCode::weights, "table: " + m); };
  if (t.kernel_size != K)
    bad("kernel_size " + std::to_string(t.kernel_size) + " differs from the basis size K = " + std::to_string(K) +
        " of the configuration");
  if (t.nlat_out != c.nlat_out || t.nlat_in != c.nlat_in || t.nlon_in != c.nlon_in)
    bad("grid (nlat_out, nlat_in, nlon_in) = (" + std::to_string(t.nlat_out) + ", " + std::to_string(t.nlat_in) + ", " +
        std::to_string(t.nlon_in) + ") differs from the configuration");
  const std::size_t n = t.val.size();
  if (t.ker.size() != n || t.row.size() != n || t.col.size() != n)
    bad("ker, row, col and val must have the same length");
  const std::int64_t ncol = static_cast<std::int64_t>(c.nlat_in) * c.nlon_in;
  for (std::size_t i = 0; i < n; ++i) {
    if (t.ker[i] < 0 || t.ker[i] >= K) bad("ker[" + std::to_string(i) + "] = " + std::to_string(t.ker[i]) + " out of range");
    if (t.row[i] < 0 || t.row[i] >= c.nlat_out)
      bad("row[" + std::to_string(i) + "] = " + std::to_string(t.row[i]) + " out of range");
    if (t.col[i] < 0 || t.col[i] >= ncol) bad("col[" + std::to_string(i) + "] = " + std::to_string(t.col[i]) + " out of range");
    if (!std::isfinite(t.val[i])) bad("val[" + std::to_string(i) + "] is not finite");
  }
}

}  // namespace

struct DiscoConvS2::Impl {
  DiscoConfig config;
  FilterTable table;
  int K = 0, Cg = 0, Og = 0, blk = 0, ld_y = 0, out_pad = 0;
  // Entries regrouped by (t, k), table order kept within a group: segment [seg[t*K+k], seg[t*K+k+1]).
  std::vector<std::int64_t> seg;
  std::vector<std::int32_t> e_hi, e_wi;
  std::vector<float> e_val;
  std::vector<kernels::PackedLinear> layers;  // one per group, inputs ordered (k, c)
};

DiscoConvS2::DiscoConvS2(const DiscoConfig& config, std::vector<float> weight, std::vector<float> bias,
                         const FilterTable* table)
    : impl_(std::make_unique<Impl>()) {
  check_config(config);
  Impl& m = *impl_;
  m.config = config;
  m.K = filter_basis_size(config.basis, config.kernel_shape);
  m.table = table ? *table : compute_filter_table(config);
  if (table) check_table(config, m.K, m.table);
  const int K = m.K, G = config.groups;
  m.Cg = config.in_channels / G;
  m.Og = config.out_channels / G;

  const std::size_t wsize = static_cast<std::size_t>(config.out_channels) * static_cast<std::size_t>(m.Cg) * static_cast<std::size_t>(K);
  if (weight.size() != wsize)
    fail(ErrorCode::weights, "weight has " + std::to_string(weight.size()) + " values, expected (out_channels, in_channels/groups, K) = " +
                                 std::to_string(wsize));
  for (float v : weight)
    if (!std::isfinite(v)) fail(ErrorCode::weights, "weight has a non-finite value");
  if (config.bias) {
    if (bias.size() != static_cast<std::size_t>(config.out_channels))
      fail(ErrorCode::weights, "bias has " + std::to_string(bias.size()) + " values, expected out_channels = " +
                                   std::to_string(config.out_channels));
    for (float v : bias)
      if (!std::isfinite(v)) fail(ErrorCode::weights, "bias has a non-finite value");
  } else if (!bias.empty()) {
    fail(ErrorCode::weights, "bias given but config.bias is false");
  }

  // Per-group linear layers: W'[o][k*Cg + c] = W[g*Og + o][c][k].
  m.blk = static_cast<int>(kernels::round_up(static_cast<index_t>(K) * m.Cg, kernels::kPad));
  m.ld_y = G * m.blk;
  std::vector<float> wg(static_cast<std::size_t>(m.Og) * static_cast<std::size_t>(K) * static_cast<std::size_t>(m.Cg));
  for (int g = 0; g < G; ++g) {
    for (int o = 0; o < m.Og; ++o)
      for (int c = 0; c < m.Cg; ++c)
        for (int k = 0; k < K; ++k)
          wg[(static_cast<std::size_t>(o) * K + k) * m.Cg + c] =
              weight[((static_cast<std::size_t>(g) * m.Og + o) * m.Cg + c) * K + k];
    m.layers.emplace_back(wg.data(), config.bias ? bias.data() + static_cast<std::size_t>(g) * m.Og : nullptr, m.Og, K * m.Cg);
  }
  m.out_pad = m.layers.front().out_pad();

  // Regroup the entries by (t, k), keeping the table order inside each group.
  const FilterTable& t = m.table;
  const std::size_t nnz = t.val.size(), S = static_cast<std::size_t>(config.nlat_out) * static_cast<std::size_t>(K);
  m.seg.assign(S + 1, 0);
  for (std::size_t i = 0; i < nnz; ++i) ++m.seg[static_cast<std::size_t>(t.row[i] * K + t.ker[i]) + 1];
  std::partial_sum(m.seg.begin(), m.seg.end(), m.seg.begin());
  std::vector<std::int64_t> fill(m.seg.begin(), m.seg.end() - 1);
  m.e_hi.resize(nnz);
  m.e_wi.resize(nnz);
  m.e_val.resize(nnz);
  for (std::size_t i = 0; i < nnz; ++i) {
    const auto dst = static_cast<std::size_t>(fill[static_cast<std::size_t>(t.row[i] * K + t.ker[i])]++);
    m.e_hi[dst] = static_cast<std::int32_t>(t.col[i] / config.nlon_in);
    m.e_wi[dst] = static_cast<std::int32_t>(t.col[i] % config.nlon_in);
    m.e_val[dst] = static_cast<float>(t.val[i]);
  }
}

DiscoConvS2::~DiscoConvS2() = default;
DiscoConvS2::DiscoConvS2(DiscoConvS2&&) noexcept = default;
DiscoConvS2& DiscoConvS2::operator=(DiscoConvS2&&) noexcept = default;

const DiscoConfig& DiscoConvS2::config() const { return impl_->config; }
int DiscoConvS2::kernel_size() const { return impl_->K; }
const FilterTable& DiscoConvS2::table() const { return impl_->table; }

void DiscoConvS2::forward(int batch, const float* in, float* out) const {
  forward_rows(batch, in, 0, impl_->config.nlat_in, out, 0, impl_->config.nlat_out);
}

std::pair<int, int> DiscoConvS2::input_rows(int lat_begin, int lat_end) const {
  const Impl& m = *impl_;
  int first = m.config.nlat_in, last = -1;
  const auto K = static_cast<std::size_t>(m.K);
  for (int t = std::max(lat_begin, 0); t < std::min(lat_end, m.config.nlat_out); ++t)
    for (std::int64_t z = m.seg[static_cast<std::size_t>(t) * K]; z < m.seg[static_cast<std::size_t>(t + 1) * K]; ++z) {
      first = std::min(first, m.e_hi[static_cast<std::size_t>(z)]);
      last = std::max(last, m.e_hi[static_cast<std::size_t>(z)]);
    }
  return last < 0 ? std::pair{lat_begin, lat_begin} : std::pair{first, last + 1};
}

void DiscoConvS2::forward_rows(int batch, const float* in, int in_begin, int in_end, float* out, int out_begin,
                               int out_end) const {
  if (batch < 0) fail(ErrorCode::invalid_argument, "batch must be non-negative, got " + std::to_string(batch));
  const Impl& m = *impl_;
  const DiscoConfig& c = m.config;
  if (out_begin < 0 || out_end > c.nlat_out || out_begin > out_end)
    fail(ErrorCode::invalid_argument, "output rows [" + std::to_string(out_begin) + ", " + std::to_string(out_end) +
                                          ") outside [0, nlat_out = " + std::to_string(c.nlat_out) + ")");
  if (batch == 0 || out_begin == out_end) return;
  if (!in || !out) fail(ErrorCode::invalid_argument, "in and out must not be null");
  const auto needed = input_rows(out_begin, out_end);
  if (needed.first < needed.second && (needed.first < in_begin || needed.second > in_end))
    fail(ErrorCode::invalid_argument, "output rows [" + std::to_string(out_begin) + ", " + std::to_string(out_end) +
                                          ") read input rows [" + std::to_string(needed.first) + ", " +
                                          std::to_string(needed.second) + "), the given input holds [" +
                                          std::to_string(in_begin) + ", " + std::to_string(in_end) + ")");
  const int K = m.K, G = c.groups, Cg = m.Cg, Og = m.Og, Cin = c.in_channels, Cout = c.out_channels;
  const int Wi = c.nlon_in, Wo = c.nlon_out, Ho = out_end - out_begin, p = Wi / Wo;
  const index_t Pi = static_cast<index_t>(in_end - in_begin) * Wi, Po = static_cast<index_t>(Ho) * Wo;
  const index_t rows = static_cast<index_t>(batch) * Ho;

#pragma omp parallel
  {
    kernels::AlignedBuffer<float> y(static_cast<std::size_t>(Wo) * static_cast<std::size_t>(m.ld_y));
    kernels::AlignedBuffer<float> o(static_cast<std::size_t>(Wo) * static_cast<std::size_t>(m.out_pad));
    float* yd = y.data();
    float* od = o.data();
#pragma omp for schedule(dynamic, 1)
    for (index_t r = 0; r < rows; ++r) {
      const index_t b = r / Ho;
      const int t = out_begin + static_cast<int>(r % Ho);  // the global output latitude
      const float* xb = in + b * Pi * Cin;  // input row hi at (hi - in_begin) * Wi * Cin
      std::memset(yd, 0, sizeof(float) * static_cast<std::size_t>(Wo) * static_cast<std::size_t>(m.ld_y));
      for (int k = 0; k < K; ++k) {
        const auto s = static_cast<std::size_t>(t) * static_cast<std::size_t>(K) + static_cast<std::size_t>(k);
        for (std::int64_t z = m.seg[s]; z < m.seg[s + 1]; ++z) {
          const auto zi = static_cast<std::size_t>(z);
          const float v = m.e_val[zi];
          const int wi = m.e_wi[zi];
          const float* xrow = xb + static_cast<index_t>(m.e_hi[zi] - in_begin) * Wi * Cin;
          for (int wo = 0; wo < Wo; ++wo) {
            int w = wi + p * wo;
            if (w >= Wi) w -= Wi;
            const float* src = xrow + static_cast<index_t>(w) * Cin;
            float* dst = yd + static_cast<index_t>(wo) * m.ld_y + static_cast<index_t>(k) * Cg;
            for (int g = 0; g < G; ++g) {
              const float* sg = src + static_cast<index_t>(g) * Cg;
              float* dg = dst + static_cast<index_t>(g) * m.blk;
              for (int ch = 0; ch < Cg; ++ch) dg[ch] += v * sg[ch];
            }
          }
        }
      }
      float* orow = out + (b * Po + static_cast<index_t>(t - out_begin) * Wo) * Cout;
      for (int g = 0; g < G; ++g) {
        kernels::LinearArgs a;
        a.layer = &m.layers[static_cast<std::size_t>(g)];
        a.x = yd + static_cast<index_t>(g) * m.blk;
        a.ldx = m.ld_y;
        a.y = od;
        a.ldy = m.out_pad;
        a.rows = Wo;
        kernels::cpu().linear(a);
        for (int wo = 0; wo < Wo; ++wo)
          std::memcpy(orow + static_cast<index_t>(wo) * Cout + static_cast<index_t>(g) * Og,
                      od + static_cast<index_t>(wo) * m.out_pad, sizeof(float) * static_cast<std::size_t>(Og));
      }
    }
  }
}

}  // namespace surrogate::sphere
