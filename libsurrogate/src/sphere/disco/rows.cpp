// The DISCO row contraction (rows.hpp), shared by the forward and the transpose convolution.
#include "rows.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include <omp.h>

#include "surrogate/error.hpp"
#include "surrogate/kernels/aligned_buffer.hpp"

namespace surrogate::sphere::detail {

using kernels::index_t;

DiscoRows::DiscoRows(const char* who, const DiscoConfig& config, int kernel_size, const FilterTable& table,
                     bool transpose, const std::vector<float>& weight, const std::vector<float>& bias,
                     DiscoOrder order)
    : who_(who), config_(config), transpose_(transpose), K(kernel_size) {
  auto fail = [&](const std::string& m) { throw Error(ErrorCode::weights, who_ + ": " + m); };
  const int G = config.groups;
  Cg = config.in_channels / G;
  Og = config.out_channels / G;
  const std::size_t wsize = static_cast<std::size_t>(config.out_channels) * static_cast<std::size_t>(Cg) * static_cast<std::size_t>(K);
  if (weight.size() != wsize)
    fail("weight has " + std::to_string(weight.size()) + " values, expected (out_channels, in_channels/groups, K) = " +
         std::to_string(wsize));
  for (float v : weight)
    if (!std::isfinite(v)) fail("weight has a non-finite value");
  if (config.bias) {
    if (bias.size() != static_cast<std::size_t>(config.out_channels))
      fail("bias has " + std::to_string(bias.size()) + " values, expected out_channels = " + std::to_string(config.out_channels));
    for (float v : bias)
      if (!std::isfinite(v)) fail("bias has a non-finite value");
  } else if (!bias.empty()) {
    fail("bias given but config.bias is false");
  }

  // Per-group linear layers: W'[o][k*Cg + c] = W[g*Og + o][c][k].
  blk = static_cast<int>(kernels::round_up(static_cast<index_t>(K) * Cg, kernels::kPad));
  ld_y = G * blk;
  std::vector<float> wg(static_cast<std::size_t>(Og) * static_cast<std::size_t>(K) * static_cast<std::size_t>(Cg));
  for (int g = 0; g < G; ++g) {
    for (int o = 0; o < Og; ++o)
      for (int c = 0; c < Cg; ++c)
        for (int k = 0; k < K; ++k)
          wg[(static_cast<std::size_t>(o) * K + k) * Cg + c] = weight[((static_cast<std::size_t>(g) * Og + o) * Cg + c) * K + k];
    layers.emplace_back(wg.data(), config.bias ? bias.data() + static_cast<std::size_t>(g) * Og : nullptr, Og, K * Cg);
  }
  out_pad = layers.front().out_pad();

  // Weights first when it costs fewer multiply-adds per sample (padded widths): gather Cin channels for
  // each entry and longitude pair, then the linear layer on the output grid, against the linear layer on
  // the input grid, then a gather of Cout channels. Each entry pairs nj longitudes (nlon_out for the
  // forward, nlon_in for the transpose).
  {
    const double nnz = static_cast<double>(table.val.size());
    const double nj = transpose ? config.nlon_in : config.nlon_out;
    const double Pi = static_cast<double>(config.nlat_in) * config.nlon_in;
    const double Po = static_cast<double>(config.nlat_out) * config.nlon_out;
    const double pad_xw = static_cast<double>(kernels::round_up(static_cast<index_t>(K) * Og, kernels::kPad));
    const double gather_first = nnz * nj * config.in_channels + Po * G * static_cast<double>(K) * Cg * out_pad;
    const double weights_first = Pi * G * static_cast<double>(Cg) * pad_xw + nnz * nj * config.out_channels;
    weights_first_ = order == DiscoOrder::automatic ? weights_first < gather_first : order == DiscoOrder::weights_first;
  }
  if (weights_first_) {
    std::vector<float> wk(static_cast<std::size_t>(K) * static_cast<std::size_t>(Og) * static_cast<std::size_t>(Cg));
    for (int g = 0; g < G; ++g) {
      for (int k = 0; k < K; ++k)
        for (int o = 0; o < Og; ++o)
          for (int c = 0; c < Cg; ++c)
            wk[(static_cast<std::size_t>(k) * Og + o) * Cg + c] = weight[((static_cast<std::size_t>(g) * Og + o) * Cg + c) * K + k];
      in_layers.emplace_back(wk.data(), nullptr, K * Og, Cg);
    }
    xw_pad = in_layers.front().out_pad();
    bias_ = bias;
  }

  // Regroup the entries by (output row, k), keeping the table order inside each group. The table's column
  // grid is the input grid (forward) or the output grid (transpose).
  const std::size_t nnz = table.val.size(), S = static_cast<std::size_t>(config.nlat_out) * static_cast<std::size_t>(K);
  const std::int64_t ncol_lon = transpose ? config.nlon_out : config.nlon_in;
  auto out_row = [&](std::size_t i) { return transpose ? table.col[i] / ncol_lon : table.row[i]; };
  seg.assign(S + 1, 0);
  for (std::size_t i = 0; i < nnz; ++i) ++seg[static_cast<std::size_t>(out_row(i) * K + table.ker[i]) + 1];
  std::partial_sum(seg.begin(), seg.end(), seg.begin());
  std::vector<std::int64_t> fill(seg.begin(), seg.end() - 1);
  e_lat.resize(nnz);
  e_lon.resize(nnz);
  e_val.resize(nnz);
  for (std::size_t i = 0; i < nnz; ++i) {
    const auto dst = static_cast<std::size_t>(fill[static_cast<std::size_t>(out_row(i) * K + table.ker[i])]++);
    e_lat[dst] = static_cast<std::int32_t>(transpose ? table.row[i] : table.col[i] / ncol_lon);
    e_lon[dst] = static_cast<std::int32_t>(table.col[i] % ncol_lon);
    e_val[dst] = static_cast<float>(table.val[i]);
  }
}

std::vector<float> DiscoRows::weight() const {
  const int G = config_.groups;
  std::vector<float> w(static_cast<std::size_t>(G) * Og * Cg * K);
  for (int g = 0; g < G; ++g) {
    const std::vector<float> wg = layers[static_cast<std::size_t>(g)].weight();  // (o, k*Cg + c)
    for (int o = 0; o < Og; ++o)
      for (int c = 0; c < Cg; ++c)
        for (int k = 0; k < K; ++k)
          w[((static_cast<std::size_t>(g) * Og + o) * Cg + c) * K + k] = wg[(static_cast<std::size_t>(o) * K + k) * Cg + c];
  }
  return w;
}

std::vector<float> DiscoRows::bias() const {
  std::vector<float> b;
  if (!config_.bias) return b;
  for (const kernels::PackedLinear& l : layers) b.insert(b.end(), l.bias(), l.bias() + Og);
  return b;
}

std::pair<int, int> DiscoRows::input_rows(int lat_begin, int lat_end) const {
  int first = config_.nlat_in, last = -1;
  const auto Ks = static_cast<std::size_t>(K);
  for (int t = std::max(lat_begin, 0); t < std::min(lat_end, config_.nlat_out); ++t)
    for (std::int64_t z = seg[static_cast<std::size_t>(t) * Ks]; z < seg[static_cast<std::size_t>(t + 1) * Ks]; ++z) {
      first = std::min(first, e_lat[static_cast<std::size_t>(z)]);
      last = std::max(last, e_lat[static_cast<std::size_t>(z)]);
    }
  return last < 0 ? std::pair{lat_begin, lat_begin} : std::pair{first, last + 1};
}

void DiscoRows::run(int batch, const float* in, int in_begin, int in_end, float* out, int out_begin, int out_end) const {
  auto fail = [&](const std::string& m) { throw Error(ErrorCode::invalid_argument, who_ + ": " + m); };
  if (batch < 0) fail("batch must be non-negative, got " + std::to_string(batch));
  const DiscoConfig& c = config_;
  if (out_begin < 0 || out_end > c.nlat_out || out_begin > out_end)
    fail("output rows [" + std::to_string(out_begin) + ", " + std::to_string(out_end) + ") outside [0, nlat_out = " +
         std::to_string(c.nlat_out) + ")");
  if (batch == 0 || out_begin == out_end) return;
  if (!in || !out) fail("in and out must not be null");
  const auto needed = input_rows(out_begin, out_end);
  if (needed.first < needed.second && (needed.first < in_begin || needed.second > in_end))
    fail("output rows [" + std::to_string(out_begin) + ", " + std::to_string(out_end) + ") read input rows [" +
         std::to_string(needed.first) + ", " + std::to_string(needed.second) + "), the given input holds [" +
         std::to_string(in_begin) + ", " + std::to_string(in_end) + ")");
  if (weights_first_) {
    run_weights_first(batch, in, in_begin, in_end, out, out_begin, out_end, needed);
    return;
  }
  const int G = c.groups, Cin = c.in_channels, Cout = c.out_channels;
  const int Wi = c.nlon_in, Wo = c.nlon_out, Ho = out_end - out_begin;
  // The stride pairing of rows.hpp: j runs over nj values; src = (s0 + ss*j) mod Wi, dst = (d0 + ds*j) mod Wo.
  const int nj = transpose_ ? Wi : Wo;
  const int ss = transpose_ ? 1 : Wi / Wo, ds = transpose_ ? Wo / Wi : 1;
  const index_t Pi = static_cast<index_t>(in_end - in_begin) * Wi, Po = static_cast<index_t>(Ho) * Wo;
  const index_t rows = static_cast<index_t>(batch) * Ho;

  const auto scratch = scratch_.acquire();
  scratch->reserve_threads(omp_get_max_threads());
#pragma omp parallel
  {
    const auto thread = static_cast<std::size_t>(omp_get_thread_num());
    float* yd = take(scratch->first[thread], static_cast<index_t>(Wo) * ld_y);
    float* od = take(scratch->second[thread], static_cast<index_t>(Wo) * out_pad);
#pragma omp for schedule(dynamic, 1)
    for (index_t r = 0; r < rows; ++r) {
      const index_t b = r / Ho;
      const int t = out_begin + static_cast<int>(r % Ho);  // the global output latitude
      const float* xb = in + b * Pi * Cin;                 // input row hi at (hi - in_begin) * Wi * Cin
      std::memset(yd, 0, sizeof(float) * static_cast<std::size_t>(Wo) * static_cast<std::size_t>(ld_y));
      for (int k = 0; k < K; ++k) {
        const auto sk = static_cast<std::size_t>(t) * static_cast<std::size_t>(K) + static_cast<std::size_t>(k);
        for (std::int64_t z = seg[sk]; z < seg[sk + 1]; ++z) {
          const auto zi = static_cast<std::size_t>(z);
          const float v = e_val[zi];
          const float* xrow = xb + static_cast<index_t>(e_lat[zi] - in_begin) * Wi * Cin;
          // (src, dst) longitudes of j: one of them runs j, the other s0 + p*j and wraps once, at j_wrap:
          // two runs without wrap tests, in increasing j (the order of the sums is that of j).
          const int lon0 = e_lon[zi];
          const int p_step = transpose_ ? ds : ss, wrap_at = transpose_ ? Wo : Wi;
          const int j_wrap = std::min(nj, (wrap_at - lon0 + p_step - 1) / p_step);
          for (int run = 0; run < 2; ++run) {
            const int j0 = run == 0 ? 0 : j_wrap, j1 = run == 0 ? j_wrap : nj;
            if (j0 >= j1) continue;
            const int strided0 = lon0 + p_step * j0 - (run == 0 ? 0 : wrap_at);
            const index_t s0 = transpose_ ? j0 : strided0, d0 = transpose_ ? strided0 : j0;
            const index_t src_step = static_cast<index_t>(transpose_ ? 1 : p_step) * Cin;
            const index_t dst_step = static_cast<index_t>(transpose_ ? p_step : 1) * ld_y;
            const float* src = xrow + s0 * Cin;
            float* dst = yd + d0 * ld_y + static_cast<index_t>(k) * Cg;
            if (G == 1) {
              for (int j = j0; j < j1; ++j, src += src_step, dst += dst_step)
                for (int ch = 0; ch < Cg; ++ch) dst[ch] += v * src[ch];
            } else {
              for (int j = j0; j < j1; ++j, src += src_step, dst += dst_step)
                for (int g = 0; g < G; ++g) {
                  const float* sg = src + static_cast<index_t>(g) * Cg;
                  float* dg = dst + static_cast<index_t>(g) * blk;
                  for (int ch = 0; ch < Cg; ++ch) dg[ch] += v * sg[ch];
                }
            }
          }
        }
      }
      float* orow = out + (b * Po + static_cast<index_t>(t - out_begin) * Wo) * Cout;
      for (int g = 0; g < G; ++g) {
        kernels::LinearArgs a;
        a.layer = &layers[static_cast<std::size_t>(g)];
        a.x = yd + static_cast<index_t>(g) * blk;
        a.ldx = ld_y;
        a.y = od;
        a.ldy = out_pad;
        a.rows = Wo;
        kernels::cpu().linear(a);
        for (int wo = 0; wo < Wo; ++wo)
          std::memcpy(orow + static_cast<index_t>(wo) * Cout + static_cast<index_t>(g) * Og, od + static_cast<index_t>(wo) * out_pad,
                      sizeof(float) * static_cast<std::size_t>(Og));
      }
    }
  }
}

void DiscoRows::run_weights_first(int batch, const float* in, int in_begin, int in_end, float* out, int out_begin,
                                  int out_end, std::pair<int, int> needed) const {
  const DiscoConfig& c = config_;
  const int G = c.groups, Cin = c.in_channels, Cout = c.out_channels;
  const int Wi = c.nlon_in, Wo = c.nlon_out, Ho = out_end - out_begin;
  // The stride pairing of rows.hpp: j < nj; forward: src (lon_z + p*j) mod Wi, dst j; transpose:
  // src j, dst (lon_z + p*j) mod Wo.
  const int nj = transpose_ ? Wi : Wo, p = transpose_ ? Wo / Wi : Wi / Wo, wrap_at = transpose_ ? Wo : Wi;
  const int i0 = needed.first, i1 = needed.second;  // input rows read (none: the outputs are the bias)
  const index_t nrows = i1 - i0, ldw = static_cast<index_t>(G) * xw_pad;
  const index_t Pi = static_cast<index_t>(in_end - in_begin) * Wi, Po = static_cast<index_t>(Ho) * Wo;
  // xw of one sample in planes per basis function: plane k holds [input row][longitude][Cout] contiguous,
  // so that an entry's walk over the input longitudes reads consecutive Cout-blocks.
  const index_t plane = nrows * Wi * Cout;
  const auto scratch = scratch_.acquire();
  scratch->reserve_threads(omp_get_max_threads());
  float* xwd = take(scratch->xw, plane * K);
  for (int b = 0; b < batch; ++b) {
    const float* xb = in + static_cast<index_t>(b) * Pi * Cin;
#pragma omp parallel
    {
      float* ld = take(scratch->first[static_cast<std::size_t>(omp_get_thread_num())], static_cast<index_t>(Wi) * ldw);
#pragma omp for schedule(static)
      for (int h = i0; h < i1; ++h) {
        for (int g = 0; g < G; ++g) {
          kernels::LinearArgs a;
          a.layer = &in_layers[static_cast<std::size_t>(g)];
          a.x = xb + static_cast<index_t>(h - in_begin) * Wi * Cin + static_cast<index_t>(g) * Cg;
          a.ldx = Cin;
          a.y = ld + static_cast<index_t>(g) * xw_pad;
          a.ldy = ldw;
          a.rows = Wi;
          kernels::cpu().linear(a);
        }
        for (int k = 0; k < K; ++k) {
          float* dst = xwd + k * plane + static_cast<index_t>(h - i0) * Wi * Cout;
          for (int wi = 0; wi < Wi; ++wi)
            for (int g = 0; g < G; ++g)
              std::memcpy(dst + static_cast<index_t>(wi) * Cout + static_cast<index_t>(g) * Og,
                          ld + static_cast<index_t>(wi) * ldw + static_cast<index_t>(g) * xw_pad + static_cast<index_t>(k) * Og,
                          sizeof(float) * static_cast<std::size_t>(Og));
        }
      }
    }
#pragma omp parallel
    {
      float* ad = take(scratch->second[static_cast<std::size_t>(omp_get_thread_num())], static_cast<index_t>(Wo) * Cout);
#pragma omp for schedule(dynamic, 1)
      for (int t = out_begin; t < out_end; ++t) {
        std::memset(ad, 0, sizeof(float) * static_cast<std::size_t>(Wo) * static_cast<std::size_t>(Cout));
        for (int k = 0; k < K; ++k) {
          const auto sk = static_cast<std::size_t>(t) * static_cast<std::size_t>(K) + static_cast<std::size_t>(k);
          for (std::int64_t z = seg[sk]; z < seg[sk + 1]; ++z) {
            const auto zi = static_cast<std::size_t>(z);
            const float v = e_val[zi];
            const float* xrow = xwd + k * plane + static_cast<index_t>(e_lat[zi] - i0) * Wi * Cout;
            // the strided longitude (lon_z + p*j) wraps once: two runs in increasing j
            const int lon0 = e_lon[zi];
            const int j_wrap = std::min(nj, (wrap_at - lon0 + p - 1) / p);
            const index_t src_step = static_cast<index_t>(transpose_ ? 1 : p) * Cout;
            const index_t dst_step = static_cast<index_t>(transpose_ ? p : 1) * Cout;
            for (int run = 0; run < 2; ++run) {
              const int j0 = run == 0 ? 0 : j_wrap, j1 = run == 0 ? j_wrap : nj;
              if (j0 >= j1) continue;
              const index_t strided0 = lon0 + p * j0 - (run == 0 ? 0 : wrap_at);
              const float* src = xrow + (transpose_ ? j0 : strided0) * Cout;
              float* dst = ad + (transpose_ ? strided0 : j0) * Cout;
              for (int j = j0; j < j1; ++j, src += src_step, dst += dst_step)
                for (int o = 0; o < Cout; ++o) dst[o] += v * src[o];
            }
          }
        }
        float* orow = out + (static_cast<index_t>(b) * Po + static_cast<index_t>(t - out_begin) * Wo) * Cout;
        if (c.bias) {
          for (int wo = 0; wo < Wo; ++wo)
            for (int o = 0; o < Cout; ++o)
              orow[static_cast<index_t>(wo) * Cout + o] = ad[static_cast<index_t>(wo) * Cout + o] + bias_[static_cast<std::size_t>(o)];
        } else {
          std::memcpy(orow, ad, sizeof(float) * static_cast<std::size_t>(Wo) * static_cast<std::size_t>(Cout));
        }
      }
    }
  }
}

}  // namespace surrogate::sphere::detail
