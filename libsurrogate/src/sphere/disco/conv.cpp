// DiscoConvS2 (DiscreteContinuousConvS2) and DiscoConvTransposeS2 (DiscreteContinuousConvTransposeS2) on
// the CPU (docs/reference-models.md §5.6, share/docs/sphere.md "DISCO convolution"): argument and table
// checks; both run the row contraction of rows.hpp in either DiscoOrder (per (sample, output
// latitude) row: a float32 gather with psi rounded to float32, then the packed linear layer of each group;
// or the linear layer on the input rows read, then the gather).
#include <cmath>
#include <string>

#include "rows.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/disco.hpp"

namespace surrogate::sphere {

namespace {

void check_config(const char* who, const DiscoConfig& c, bool transpose) {
  const std::string w = std::string(who) + ": ";
  auto fail = [&](const std::string& m) { throw Error(ErrorCode::invalid_argument, w + m); };
  if (c.in_channels < 1 || c.out_channels < 1) fail("in_channels and out_channels must be positive");
  if (c.groups < 1) fail("groups must be positive, got " + std::to_string(c.groups));
  if (c.in_channels % c.groups || c.out_channels % c.groups)
    fail("in_channels (" + std::to_string(c.in_channels) + ") and out_channels (" + std::to_string(c.out_channels) +
         ") must be multiples of groups (" + std::to_string(c.groups) + ")");
  if (c.nlat_in < 1 || c.nlon_in < 1 || c.nlat_out < 1 || c.nlon_out < 1)
    fail("grid sizes (nlat_in, nlon_in, nlat_out, nlon_out) must be positive");
  if (!transpose && c.nlon_in % c.nlon_out)
    throw Error(ErrorCode::unsupported, w + "nlon_in (" + std::to_string(c.nlon_in) +
                                            ") must be an integer multiple of nlon_out (" + std::to_string(c.nlon_out) +
                                            "); for upsampling use DiscoConvTransposeS2");
  if (transpose && c.nlon_out % c.nlon_in)
    throw Error(ErrorCode::unsupported, w + "nlon_out (" + std::to_string(c.nlon_out) +
                                            ") must be an integer multiple of nlon_in (" + std::to_string(c.nlon_in) +
                                            "); for downsampling use DiscoConvS2");
}

/// A table given by the caller: the grid of its own roles (rows, column grid) and every entry in range.
void check_table(const char* who, int K, const FilterTable& t, int rows, int col_lat, int col_lon) {
  auto bad = [&](const std::string& m) { throw Error(ErrorCode::weights, std::string(who) + ": table: " + m); };
  if (t.kernel_size != K)
    bad("kernel_size " + std::to_string(t.kernel_size) + " differs from the basis size K = " + std::to_string(K) +
        " of the configuration");
  if (t.nlat_out != rows || t.nlat_in != col_lat || t.nlon_in != col_lon)
    bad("grid (nlat_out, nlat_in, nlon_in) = (" + std::to_string(t.nlat_out) + ", " + std::to_string(t.nlat_in) + ", " +
        std::to_string(t.nlon_in) + ") differs from the configuration (" + std::to_string(rows) + ", " +
        std::to_string(col_lat) + ", " + std::to_string(col_lon) + ")");
  const std::size_t n = t.val.size();
  if (t.ker.size() != n || t.row.size() != n || t.col.size() != n) bad("ker, row, col and val must have the same length");
  const std::int64_t ncol = static_cast<std::int64_t>(col_lat) * col_lon;
  for (std::size_t i = 0; i < n; ++i) {
    if (t.ker[i] < 0 || t.ker[i] >= K) bad("ker[" + std::to_string(i) + "] = " + std::to_string(t.ker[i]) + " out of range");
    if (t.row[i] < 0 || t.row[i] >= rows) bad("row[" + std::to_string(i) + "] = " + std::to_string(t.row[i]) + " out of range");
    if (t.col[i] < 0 || t.col[i] >= ncol) bad("col[" + std::to_string(i) + "] = " + std::to_string(t.col[i]) + " out of range");
    if (!std::isfinite(t.val[i])) bad("val[" + std::to_string(i) + "] is not finite");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// DiscoConvS2

struct DiscoConvS2::Impl {
  DiscoConfig config;
  FilterTable table;
  int K = 0;
  std::unique_ptr<detail::DiscoRows> rows;
};

DiscoConvS2::DiscoConvS2(const DiscoConfig& config, std::vector<float> weight, std::vector<float> bias,
                         const FilterTable* table, DiscoOrder order)
    : impl_(std::make_unique<Impl>()) {
  constexpr const char* who = "DiscoConvS2";
  check_config(who, config, false);
  Impl& m = *impl_;
  m.config = config;
  m.K = filter_basis_size(config.basis, config.kernel_shape);
  m.table = table ? *table : compute_filter_table(config);
  if (table) check_table(who, m.K, m.table, config.nlat_out, config.nlat_in, config.nlon_in);
  m.rows = std::make_unique<detail::DiscoRows>(who, config, m.K, m.table, false, weight, bias, order);
}

DiscoConvS2::~DiscoConvS2() = default;
DiscoConvS2::DiscoConvS2(DiscoConvS2&&) noexcept = default;
DiscoConvS2& DiscoConvS2::operator=(DiscoConvS2&&) noexcept = default;

const DiscoConfig& DiscoConvS2::config() const { return impl_->config; }
int DiscoConvS2::kernel_size() const { return impl_->K; }
const FilterTable& DiscoConvS2::table() const { return impl_->table; }
std::vector<float> DiscoConvS2::weight() const { return impl_->rows->weight(); }
std::vector<float> DiscoConvS2::bias() const { return impl_->rows->bias(); }
void DiscoConvS2::release_workspace() const noexcept { impl_->rows->release_scratch(); }
std::size_t DiscoConvS2::workspace_bytes() const { return impl_->rows->scratch_bytes(); }
DiscoOrder DiscoConvS2::order() const {
  return impl_->rows->weights_first() ? DiscoOrder::weights_first : DiscoOrder::gather_first;
}

void DiscoConvS2::forward(int batch, const float* in, float* out) const {
  forward_rows(batch, in, 0, impl_->config.nlat_in, out, 0, impl_->config.nlat_out);
}

std::pair<int, int> DiscoConvS2::input_rows(int lat_begin, int lat_end) const {
  return impl_->rows->input_rows(lat_begin, lat_end);
}

void DiscoConvS2::forward_rows(int batch, const float* in, int in_begin, int in_end, float* out, int out_begin,
                               int out_end) const {
  impl_->rows->run(batch, in, in_begin, in_end, out, out_begin, out_end);
}

// ---------------------------------------------------------------------------------------------------------
// DiscoConvTransposeS2

struct DiscoConvTransposeS2::Impl {
  DiscoConfig config;
  FilterTable table;
  int K = 0;
  std::unique_ptr<detail::DiscoRows> rows;
};

DiscoConvTransposeS2::DiscoConvTransposeS2(const DiscoConfig& config, std::vector<float> weight,
                                           std::vector<float> bias, const FilterTable* table,
                                           DiscoOrder order)
    : impl_(std::make_unique<Impl>()) {
  constexpr const char* who = "DiscoConvTransposeS2";
  check_config(who, config, true);
  Impl& m = *impl_;
  m.config = config;
  m.K = filter_basis_size(config.basis, config.kernel_shape);
  m.table = table ? *table : compute_transpose_filter_table(config);
  if (table) check_table(who, m.K, m.table, config.nlat_in, config.nlat_out, config.nlon_out);
  m.rows = std::make_unique<detail::DiscoRows>(who, config, m.K, m.table, true, weight, bias, order);
}

DiscoConvTransposeS2::~DiscoConvTransposeS2() = default;
DiscoConvTransposeS2::DiscoConvTransposeS2(DiscoConvTransposeS2&&) noexcept = default;
DiscoConvTransposeS2& DiscoConvTransposeS2::operator=(DiscoConvTransposeS2&&) noexcept = default;

const DiscoConfig& DiscoConvTransposeS2::config() const { return impl_->config; }
int DiscoConvTransposeS2::kernel_size() const { return impl_->K; }
const FilterTable& DiscoConvTransposeS2::table() const { return impl_->table; }
std::vector<float> DiscoConvTransposeS2::weight() const { return impl_->rows->weight(); }
std::vector<float> DiscoConvTransposeS2::bias() const { return impl_->rows->bias(); }
void DiscoConvTransposeS2::release_workspace() const noexcept { impl_->rows->release_scratch(); }
std::size_t DiscoConvTransposeS2::workspace_bytes() const { return impl_->rows->scratch_bytes(); }
DiscoOrder DiscoConvTransposeS2::order() const {
  return impl_->rows->weights_first() ? DiscoOrder::weights_first : DiscoOrder::gather_first;
}

void DiscoConvTransposeS2::forward(int batch, const float* in, float* out) const {
  forward_rows(batch, in, 0, impl_->config.nlat_in, out, 0, impl_->config.nlat_out);
}

std::pair<int, int> DiscoConvTransposeS2::input_rows(int lat_begin, int lat_end) const {
  return impl_->rows->input_rows(lat_begin, lat_end);
}

void DiscoConvTransposeS2::forward_rows(int batch, const float* in, int in_begin, int in_end, float* out,
                                        int out_begin, int out_end) const {
  impl_->rows->run(batch, in, in_begin, in_end, out, out_begin, out_end);
}

}  // namespace surrogate::sphere
