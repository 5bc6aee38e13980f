// The SphericalTransformer forward on a CUDA device (transformer_device.hpp): the CPU forward's stages
// (transformer.cpp) on device arrays of embed_dim floats per point, on one rank (forward) or in latitude
// bands on several (forward_bands: SphericalTransformer::forward_bands stage by stage, every exchange
// between ranks through host memory with the CPU path's fetch_rows / all-gather). The CPU operators built by
// the SphericalTransformer give the configurations, DISCO tables, position embedding, norm weights and
// packed MLP layers; the device operators are built from them (each builds its own CPU operator again for
// its checks and tables) with the weights read from the model file.
//
// Arithmetic: DISCO's psi contraction, the resampling, the SHT decoder's Legendre sums, the embedding add,
// the instance norm and the residual adds are the CPU's operations in the CPU's order (the SHT's longitude
// transforms are direct DFTs in double where the CPU runs an FFT in double: about one ulp apart); the DISCO channel contraction, the dense
// layers (fmaf chain from the bias), the layer norm, GELU (device erff) and the attention (shared online
// softmax) sum in other orders, so the output agrees with the CPU forward within float32 rounding, not
// bitwise (tests/gpu/test_sphere_transformer_device_emulated.cpp).
//
// NOT YET RUN ON A GPU: compiled on a machine without a device; tests/gpu/test_gpu_sphere_transformer.cpp
// skips there.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../cuda_errors.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"
#include "surrogate/kernels/cuda_sphere_grid_norm.hpp"
#include "surrogate/kernels/cuda_sphere_sht.hpp"
#include "surrogate/sphere/attention_device.hpp"
#include "surrogate/sphere/grid_ops_device.hpp"
#include "surrogate/sphere/sht.hpp"
#include "transformer_device.hpp"
#include "transformer_internals.hpp"

namespace surrogate::sphere {
namespace {

namespace cu = kernels::cuda;
using kernels::Activation;

/// Call inside a catch block: CUDA runtime errors and rejected launches become Error naming the device.
[[noreturn]] void raise_current(int device) { surrogate::detail::raise_current_cuda_error("sphere_transformer", device); }

/// A packed dense layer on the device (the CPU's W^T with its padded row stride, and its padded bias).
struct DeviceDense {
  cu::DeviceBuffer<float> wt, bias;
  int in = 0, out = 0;
  index_t ldw = 0;
};

struct DeviceBlock {
  cu::DeviceBuffer<float> norm_w[2], norm_b[2];
  std::optional<AttentionS2Device> global;
  std::optional<NeighborhoodAttentionS2Device> neighborhood;
  DeviceDense fc1, fc2;
};

class SphereTransformerCuda final : public SphereTransformerDeviceForward {
 public:
  SphereTransformerCuda(const SphericalTransformer& net, const ModelFile& file, int device);
  void forward(int batch, const float* in, float* out) override;
  int device() const override { return device_; }

 private:
  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, const T* src, std::size_t count) {
    dst.resize(std::max<std::size_t>(count, 1), device_);
    if (count) cu::copy_to_device(dst.data(), src, count * sizeof(T), stream_.get());
  }
  DeviceDense upload_dense(const kernels::PackedLinear& layer);
  void norm(const DeviceBlock& b, int which, int batch, int lat_rows, const float* x, float* y);
  void ensure_buffers(int batch);
  void mlp(const DeviceBlock& b, index_t rows, cudaStream_t s);
  void add_rows(float* x, const float* addend, index_t rows, int width, int ld_addend, cudaStream_t s);
  void band_norm(const Comm& comm, const BandPartition& inner, const DeviceBlock& b, int which, int batch,
                 const float* x, float* y);
  template <class F>
  void on_every_rank(const Comm& comm, F&& work);
  template <class T>
  void download(std::vector<T>& dst, const T* src, std::size_t count) {
    dst.resize(count);
    if (count) cu::copy_to_host(dst.data(), src, count * sizeof(T), stream_.get());
  }
  void upload_to(float* dst, const std::vector<float>& src) {
    if (!src.empty()) cu::copy_to_device(dst, src.data(), src.size() * sizeof(float), stream_.get());
  }

 public:
  void forward_bands(const Comm& comm, int batch, const BandPartition& image_bands, std::span<const HeldRows> input,
                     float* out_band) override;

 private:
  const SphericalTransformer& net_;

  TransformerConfig cfg_;
  int device_ = -1, h_ = 0, w_ = 0, C_ = 0, hidden_ = 0;
  cu::Stream stream_;
  std::optional<DiscoConvS2Device> encoder_, decoder_;
  std::optional<ResampleS2Device> resample_;  // upsample_sht = false
  // upsample_sht = true: RealSHT on the internal grid, InverseRealSHT on the image grid (the CPU classes'
  // tables and truncation), on the kernels of cuda_sphere_sht.hpp.
  struct ShtDecoder {
    int lmax = 0, mmax = 0, modes_in = 0, modes_out = 0, nyquist = -1;
    cu::DeviceBuffer<float> analysis, synthesis;     // RealSHT::weights(), InverseRealSHT::table()
    cu::DeviceBuffer<double> twiddle_in, twiddle_out;  // cos, sin(2 pi t / nlon) of both grids
    cu::DeviceBuffer<float> fourier, coeffs, g;       // work arrays (grown by ensure_buffers)
  };
  std::optional<ShtDecoder> sht_;
  void upsample_sht(int batch, const float* x, float* up, cudaStream_t s);
  // The order split of upsample_sht across ranks (forward_bands): x_ holds the internal rows [i0, i1);
  // band_up_ receives the image rows [d0, d1).
  void upsample_sht_bands(const Comm& comm, int batch, int i0, int i1, int d0, int d1);
  cu::DeviceBuffer<float> pos_;  // h*w x C, or empty
  bool has_pos_ = false;
  std::vector<DeviceBlock> blocks_;
  // Work arrays (grown by ensure_buffers).
  int capacity_ = 0;
  cu::DeviceBuffer<float> in_, x_, y_, att_, hid_, up_, out_, scale_, shift_;
  cu::DeviceBuffer<float> kv_, band_up_;  // forward_bands: fetched key/value rows, the decoder's input rows
  cu::DeviceBuffer<double> part_, mean_;
};

DeviceDense SphereTransformerCuda::upload_dense(const kernels::PackedLinear& layer) {
  DeviceDense d;
  d.in = layer.in();
  d.out = layer.out();
  d.ldw = layer.out_pad();
  upload(d.wt, layer.wt(), static_cast<std::size_t>(std::max(d.in, 1)) * static_cast<std::size_t>(d.ldw));
  upload(d.bias, layer.bias(), static_cast<std::size_t>(d.ldw));
  return d;
}

SphereTransformerCuda::SphereTransformerCuda(const SphericalTransformer& net, const ModelFile& file, int device)
    : net_(net), cfg_(net.config()), device_(device) {
  const TransformerView v = TransformerInternals::view(net);
  h_ = v.h;
  w_ = v.w;
  C_ = cfg_.embed_dim;
  hidden_ = cfg_.use_mlp ? cfg_.mlp_hidden() : 0;
  try {
    stream_ = cu::Stream(device_);
    encoder_.emplace(v.encoder->config(), file.weight("encoder.conv.weight").values, std::vector<float>{},
                     &v.encoder->table(), device_);
    decoder_.emplace(v.decoder->config(), file.weight("decoder.conv.weight").values, std::vector<float>{},
                     &v.decoder->table(), device_);
    if (cfg_.upsample_sht) {
      const RealSHT sht(h_, w_, cfg_.grid_internal);
      const InverseRealSHT isht(cfg_.nlat, cfg_.nlon, cfg_.grid, sht.lmax(), sht.mmax());
      ShtDecoder& d = sht_.emplace();
      d.lmax = sht.lmax();
      d.mmax = sht.mmax();
      d.modes_in = std::min(d.mmax, w_ / 2 + 1);
      d.modes_out = std::min(d.mmax, cfg_.nlon / 2 + 1);
      d.nyquist = cfg_.nlon % 2 == 0 && cfg_.nlon / 2 < d.modes_out ? cfg_.nlon / 2 : -1;
      upload(d.analysis, sht.weights().data(), sht.weights().size());
      upload(d.synthesis, isht.table().data(), isht.table().size());
      std::vector<double> tw_in, tw_out;  // cos, sin(2 pi t / n), t < n, of both grids
      for (const auto& [n, tw] : {std::pair<int, std::vector<double>*>{w_, &tw_in}, {cfg_.nlon, &tw_out}}) {
        tw->resize(2 * static_cast<std::size_t>(n));
        for (int t = 0; t < n; ++t) {
          const double angle = 2.0 * std::numbers::pi * t / n;
          (*tw)[2 * static_cast<std::size_t>(t)] = std::cos(angle);
          (*tw)[2 * static_cast<std::size_t>(t) + 1] = std::sin(angle);
        }
      }
      upload(d.twiddle_in, tw_in.data(), tw_in.size());
      upload(d.twiddle_out, tw_out.data(), tw_out.size());
      stream_.synchronize();  // the uploads read the local tables
    } else {
      resample_.emplace(v.resample->config(), device_);
    }
    if (v.pos) {
      std::vector<float> dense(static_cast<std::size_t>(h_) * static_cast<std::size_t>(w_) * static_cast<std::size_t>(C_));
      for (index_t p = 0; p < static_cast<index_t>(h_) * w_; ++p)
        std::copy(v.pos + p * v.ld, v.pos + p * v.ld + C_, dense.begin() + p * C_);
      upload(pos_, dense.data(), dense.size());
      has_pos_ = true;
    }
    blocks_.resize(v.blocks.size());
    for (std::size_t i = 0; i < v.blocks.size(); ++i) {
      const TransformerView::Block& src = v.blocks[i];
      DeviceBlock& b = blocks_[i];
      for (int n = 0; n < 2; ++n)
        if (src.norm_w[n]) {
          upload(b.norm_w[n], src.norm_w[n], static_cast<std::size_t>(C_));
          upload(b.norm_b[n], src.norm_b[n], static_cast<std::size_t>(C_));
        }
      const AttentionS2Weights weights = transformer_attention_weights(file, static_cast<int>(i));
      if (src.global) b.global.emplace(src.global->config(), weights, device_);
      else b.neighborhood.emplace(src.neighborhood->config(), weights, device_);
      if (src.fc1) {
        b.fc1 = upload_dense(*src.fc1);
        b.fc2 = upload_dense(*src.fc2);
      }
    }
    stream_.synchronize();  // the uploads read host memory that goes away with `v` and `dense`
  } catch (...) {
    raise_current(device_);
  }
}

void SphereTransformerCuda::ensure_buffers(int batch) {
  if (batch <= capacity_) return;
  const std::size_t P_img = static_cast<std::size_t>(cfg_.nlat) * static_cast<std::size_t>(cfg_.nlon);
  const std::size_t P = static_cast<std::size_t>(h_) * static_cast<std::size_t>(w_), B = static_cast<std::size_t>(batch);
  const std::size_t C = static_cast<std::size_t>(C_);
  in_.resize(B * P_img * static_cast<std::size_t>(cfg_.in_chans), device_);
  out_.resize(B * P_img * static_cast<std::size_t>(cfg_.out_chans), device_);
  up_.resize(B * P_img * C, device_);
  x_.resize(B * P * C, device_);
  y_.resize(B * P * C, device_);
  kv_.resize(B * P * C, device_);
  band_up_.resize(B * P_img * C, device_);
  att_.resize(B * P * C, device_);
  hid_.resize(B * P * static_cast<std::size_t>(std::max(hidden_, 1)), device_);
  part_.resize(B * static_cast<std::size_t>(h_) * C, device_);
  if (sht_) {
    const std::size_t C2 = 2 * C;
    sht_->fourier.resize(B * static_cast<std::size_t>(h_) * static_cast<std::size_t>(sht_->mmax) * C2, device_);
    sht_->coeffs.resize(B * static_cast<std::size_t>(sht_->lmax) * static_cast<std::size_t>(sht_->mmax) * C2, device_);
    sht_->g.resize(B * static_cast<std::size_t>(cfg_.nlat) * static_cast<std::size_t>(sht_->modes_out) * C2, device_);
  }
  mean_.resize(B * C, device_);
  scale_.resize(B * C, device_);
  shift_.resize(B * C, device_);
  capacity_ = batch;
}

/// up (image grid) = InverseRealSHT(RealSHT(x (internal grid))): the CPU decoder's four steps on the device.
void SphereTransformerCuda::upsample_sht(int batch, const float* x, float* up, cudaStream_t s) {
  ShtDecoder& d = *sht_;
  cu::ShtFourierArgs fa;
  fa.x = x;
  fa.ldx = C_;
  fa.y = d.fourier.data();
  fa.twiddle = d.twiddle_in.data();
  fa.rows = static_cast<index_t>(batch) * h_;
  fa.nlon = w_;
  fa.channels = C_;
  fa.mmax = d.mmax;
  fa.modes = d.modes_in;
  cu::sht_fourier_analysis(fa, s);
  cu::ShtLegendreArgs la;
  la.table = d.analysis.data();
  la.x = d.fourier.data();
  la.y = d.coeffs.data();
  la.batch = batch;
  la.nlat = h_;
  la.lmax = d.lmax;
  la.mmax = d.mmax;
  la.channels = C_;
  cu::sht_legendre_analysis(la, s);
  cu::ShtLegendreArgs ls = la;
  ls.table = d.synthesis.data();
  ls.x = d.coeffs.data();
  ls.y = d.g.data();
  ls.nlat = cfg_.nlat;
  ls.modes = d.modes_out;
  ls.nyquist = d.nyquist;
  cu::sht_legendre_synthesis(ls, s);
  cu::ShtFourierArgs fs;
  fs.x = d.g.data();
  fs.y = up;
  fs.ldy = C_;
  fs.twiddle = d.twiddle_out.data();
  fs.rows = static_cast<index_t>(batch) * cfg_.nlat;
  fs.nlon = cfg_.nlon;
  fs.channels = C_;
  fs.mmax = fs.modes = d.modes_out;
  cu::sht_fourier_synthesis(fs, s);
}

/// upsample_sht in latitude bands, the CPU path's split (transformer.cpp, SphericalTransformer::forward_bands)
/// on the device kernels: the Fourier rows of the rank's internal rows; the rank's orders [m0, m1)
/// (order_split) of every latitude fetched through host memory, their Legendre analysis (the kernel's order
/// range: each coefficient summed over the latitudes in the whole-grid order); the coefficients of every
/// order fetched by each rank with decoder rows, which synthesises only those rows. Every element is
/// computed by the same kernel code from the same values as in upsample_sht: the same bits for any number
/// of ranks.
void SphereTransformerCuda::upsample_sht_bands(const Comm& comm, int batch, int i0, int i1, int d0, int d1) {
  ShtDecoder& d = *sht_;
  const int L = d.lmax, M = d.mmax;
  const index_t C2 = 2 * static_cast<index_t>(C_), width = M * C2;
  const index_t own_rows = static_cast<index_t>(batch) * (i1 - i0);
  std::vector<float> own;
  on_every_rank(comm, [&](cudaStream_t s) {
    if (own_rows == 0) return;
    cu::ShtFourierArgs fa;
    fa.x = x_.data();
    fa.ldx = C_;
    fa.y = d.fourier.data();
    fa.twiddle = d.twiddle_in.data();
    fa.rows = own_rows;
    fa.nlon = w_;
    fa.channels = C_;
    fa.mmax = M;
    fa.modes = d.modes_in;
    cu::sht_fourier_analysis(fa, s);
    download(own, d.fourier.data(), static_cast<std::size_t>(own_rows * width));
  });
  const std::vector<int> orders = order_split(L, M, comm.size());
  const int m0 = orders[static_cast<std::size_t>(comm.rank())], m1 = orders[static_cast<std::size_t>(comm.rank()) + 1];
  std::vector<HeldRows> held;  // Fourier row of (b, lat, m): global row (b*h + lat)*M + m, 2C floats
  for (int b = 0; b < batch && i0 < i1; ++b)
    held.push_back({{(static_cast<index_t>(b) * h_ + i0) * M, (static_cast<index_t>(b) * h_ + i1) * M},
                    own.data() + static_cast<index_t>(b) * (i1 - i0) * width, C2});
  std::vector<RowRange> wanted;
  for (int b = 0; b < batch && m0 < m1; ++b)
    for (int k = 0; k < h_; ++k) {
      const index_t row = (static_cast<index_t>(b) * h_ + k) * M;
      wanted.push_back({row + m0, row + m1});
    }
  const std::vector<float> my_orders = fetch_rows(comm, held, wanted, static_cast<int>(C2));
  const index_t orders_here = m1 - m0;
  std::vector<float> part_lm;  // [b][l][m - m0][2C], the kernel's layout
  on_every_rank(comm, [&](cudaStream_t s) {
    if (orders_here == 0) return;
    upload_to(d.fourier.data(), my_orders);
    cu::ShtLegendreArgs la;
    la.table = d.analysis.data();
    la.x = d.fourier.data();
    la.y = d.coeffs.data();
    la.batch = batch;
    la.nlat = h_;
    la.lmax = L;
    la.mmax = static_cast<int>(orders_here);
    la.m_first = m0;
    la.channels = C_;
    cu::sht_legendre_analysis(la, s);
    download(part_lm, d.coeffs.data(), static_cast<std::size_t>(batch * L * orders_here * C2));
  });
  // Order-major rows for the exchange: global row b*M + m, L*2C floats (a copy, no arithmetic).
  std::vector<float> part(part_lm.size());
  for (index_t b = 0; b < batch; ++b)
    for (index_t l = 0; l < L; ++l)
      for (index_t m = 0; m < orders_here; ++m)
        std::copy_n(part_lm.data() + ((b * L + l) * orders_here + m) * C2, C2,
                    part.data() + ((b * orders_here + m) * L + l) * C2);
  std::vector<HeldRows> part_held;
  for (int b = 0; b < batch && m0 < m1; ++b)
    part_held.push_back({{static_cast<index_t>(b) * M + m0, static_cast<index_t>(b) * M + m1},
                         part.data() + static_cast<index_t>(b) * orders_here * L * C2, L * C2});
  const bool needed = d0 < d1;  // a rank without decoder rows needs no coefficients
  const std::vector<float> by_order = fetch_rows(comm, part_held, needed ? band_ranges(batch, M, 1, 0, M) : std::vector<RowRange>{},
                                                 static_cast<int>(L * C2));
  std::vector<float> coeffs(by_order.size());  // back to the kernels' layout [b][l][m][2C]
  for (index_t b = 0; b < batch && needed; ++b)
    for (index_t m = 0; m < M; ++m)
      for (index_t l = 0; l < L; ++l)
        std::copy_n(by_order.data() + ((b * M + m) * L + l) * C2, C2, coeffs.data() + ((b * L + l) * M + m) * C2);
  on_every_rank(comm, [&](cudaStream_t s) {
    if (!needed) return;
    upload_to(d.coeffs.data(), coeffs);
    cu::ShtLegendreArgs ls;
    ls.table = d.synthesis.data();
    ls.x = d.coeffs.data();
    ls.y = d.g.data();
    ls.batch = batch;
    ls.nlat = cfg_.nlat;
    ls.lmax = L;
    ls.mmax = M;
    ls.channels = C_;
    ls.modes = d.modes_out;
    ls.nyquist = d.nyquist;
    ls.lat_first = d0;
    ls.lat_rows = d1 - d0;
    cu::sht_legendre_synthesis(ls, s);
    cu::ShtFourierArgs fs;
    fs.x = d.g.data();
    fs.y = band_up_.data();
    fs.ldy = C_;
    fs.twiddle = d.twiddle_out.data();
    fs.rows = static_cast<index_t>(batch) * (d1 - d0);
    fs.nlon = cfg_.nlon;
    fs.channels = C_;
    fs.mmax = fs.modes = d.modes_out;
    cu::sht_fourier_synthesis(fs, s);
  });
}

/// y = norm_which(x) over `lat_rows` latitude rows of the internal grid of `batch` samples (none: y = x);
/// the instance norm's statistics over those rows (the whole grid: lat_rows = h).
void SphereTransformerCuda::norm(const DeviceBlock& b, int which, int batch, int lat_rows, const float* x, float* y) {
  const index_t P = static_cast<index_t>(lat_rows) * w_, rows = batch * P;
  switch (cfg_.normalization_layer) {
    case BlockNorm::none: {
      cu::RowCopyArgs a;
      a.src = x;
      a.ld_src = C_;
      a.dst = y;
      a.ld_dst = C_;
      a.rows = rows;
      a.width = C_;
      cu::copy_rows(a, stream_.get());
      return;
    }
    case BlockNorm::layer_norm: {
      cu::NormArgs a;
      a.x = x;
      a.ldx = C_;
      a.y = y;
      a.ldy = C_;
      a.rows = rows;
      a.dim = C_;
      a.weight = b.norm_w[which].data();
      a.bias = b.norm_b[which].data();
      a.eps = 1e-6f;  // as the CPU forward (reference-models §5.5)
      cu::norm(a, stream_.get());
      return;
    }
    case BlockNorm::instance_norm: {
      cu::GridRowSumsArgs rs;
      rs.x = x;
      rs.ld = C_;
      rs.batch = batch;
      rs.lat_rows = lat_rows;
      rs.nlon = w_;
      rs.dim = C_;
      rs.part = part_.data();
      cu::grid_row_sums(rs, stream_.get());
      cu::GridNormStatsArgs st;
      st.part = part_.data();
      st.batch = batch;
      st.lat_rows = lat_rows;
      st.dim = C_;
      st.points = static_cast<double>(P);
      st.mean = mean_.data();
      cu::grid_norm_stats(st, stream_.get());
      rs.mean = mean_.data();
      cu::grid_row_sums(rs, stream_.get());
      st.finish = true;
      st.eps = 1e-6;
      st.weight = b.norm_w[which].data();
      st.bias = b.norm_b[which].data();
      st.scale = scale_.data();
      st.shift = shift_.data();
      cu::grid_norm_stats(st, stream_.get());
      cu::ChannelAffineArgs af;
      af.x = x;
      af.ldx = C_;
      af.y = y;
      af.ldy = C_;
      af.rows = rows;
      af.rows_per_sample = P;
      af.dim = C_;
      af.scale = scale_.data();
      af.shift = shift_.data();
      cu::channel_affine(af, stream_.get());
      return;
    }
  }
}

/// x = fc2(act(fc1(y))) + x over `rows` rows (the residual added in place by the second layer).
void SphereTransformerCuda::mlp(const DeviceBlock& b, index_t rows, cudaStream_t s) {
  cu::DenseArgs d1;
  d1.wt = b.fc1.wt.data();
  d1.bias = b.fc1.bias.data();
  d1.in = b.fc1.in;
  d1.out = b.fc1.out;
  d1.ldw = b.fc1.ldw;
  d1.x = y_.data();
  d1.ldx = C_;
  d1.y = hid_.data();
  d1.ldy = hidden_;
  d1.rows = rows;
  d1.act = cfg_.activation == MlpActivation::gelu ? Activation::gelu_erf : Activation::none;
  cu::dense(d1, s);
  if (cfg_.activation == MlpActivation::relu) cu::relu_rows(hid_.data(), hidden_, rows, hidden_, s);
  cu::DenseArgs d2;
  d2.wt = b.fc2.wt.data();
  d2.bias = b.fc2.bias.data();
  d2.in = b.fc2.in;
  d2.out = b.fc2.out;
  d2.ldw = b.fc2.ldw;
  d2.x = hid_.data();
  d2.ldx = hidden_;
  d2.y = x_.data();
  d2.ldy = C_;
  d2.rows = rows;
  d2.add = x_.data();  // the residual, in place
  d2.ld_add = C_;
  cu::dense(d2, s);
}

void SphereTransformerCuda::forward(int batch, const float* in, float* out) {
  if (batch < 1 || !in || !out)
    throw Error(ErrorCode::invalid_argument, "sphere_transformer: CUDA forward needs batch >= 1 and host arrays");
  try {
    cu::DeviceGuard guard(device_);
    ensure_buffers(batch);
    cudaStream_t s = stream_.get();
    const index_t P_img = static_cast<index_t>(cfg_.nlat) * cfg_.nlon, P = static_cast<index_t>(h_) * w_;
    const index_t rows = batch * P;
    cu::copy_to_device(in_.data(), in, static_cast<std::size_t>(batch * P_img * cfg_.in_chans) * sizeof(float), s);

    // Encoder, then the position embedding added per sample (x = encoded + pos, the CPU's float add).
    encoder_->forward(batch, in_.data(), x_.data(), s);
    if (has_pos_)
      for (int b = 0; b < batch; ++b) add_rows(x_.data() + b * P * C_, pos_.data(), P, C_, C_, s);

    for (DeviceBlock& b : blocks_) {
      norm(b, 0, batch, h_, x_.data(), y_.data());
      if (b.global) b.global->forward(batch, y_.data(), nullptr, nullptr, att_.data(), s);
      else b.neighborhood->forward(batch, y_.data(), nullptr, nullptr, att_.data(), s);
      add_rows(x_.data(), att_.data(), rows, C_, C_, s);
      norm(b, 1, batch, h_, x_.data(), y_.data());
      if (!cfg_.use_mlp) {
        add_rows(x_.data(), y_.data(), rows, C_, C_, s);
        continue;
      }
      mlp(b, rows, s);
    }

    if (sht_) upsample_sht(batch, x_.data(), up_.data(), s);
    else resample_->forward(batch, C_, x_.data(), up_.data(), s);
    decoder_->forward(batch, up_.data(), out_.data(), s);
    if (cfg_.residual_prediction) add_rows(out_.data(), in_.data(), batch * P_img, cfg_.out_chans, cfg_.in_chans, s);
    cu::copy_to_host(out, out_.data(), static_cast<std::size_t>(batch * P_img * cfg_.out_chans) * sizeof(float), s);
    stream_.synchronize();
  } catch (...) {
    raise_current(device_);
  }
}

/// x[r] += addend[r] (the first `width` values of `rows` rows; x has rows of `width` floats).
void SphereTransformerCuda::add_rows(float* x, const float* addend, index_t rows, int width, int ld_addend,
                                     cudaStream_t s) {
  if (rows == 0) return;
  cu::RowBinaryArgs a;
  a.op = cu::RowOp::add;
  a.a = x;
  a.lda = width;
  a.b = addend;
  a.ldb = ld_addend;
  a.y = x;
  a.ldy = width;
  a.rows = rows;
  a.width = width;
  cu::row_binary(a, s);
}

/// Device work between two collectives of forward_bands: run on this rank's device, synchronized; a failure
/// on any rank becomes the same Error on every rank before the next collective.
template <class F>
void SphereTransformerCuda::on_every_rank(const Comm& comm, F&& work) {
  collectively(comm, [&] {
    try {
      cu::DeviceGuard guard(device_);
      work(stream_.get());
      stream_.synchronize();
    } catch (...) {
      raise_current(device_);
    }
  });
}

/// y = norm_which(x) over this rank's band of the internal grid (`inner`), batch samples. Layer norm and
/// none are row-local (norm() on the band's rows). Instance norm: the per-row sums of the band (double,
/// grid_row_sums) downloaded, gathered from every rank in grid layout and uploaded, and the statistics
/// computed from all rows by the one-rank forward's grid_norm_stats: the one-rank device bits.
void SphereTransformerCuda::band_norm(const Comm& comm, const BandPartition& inner, const DeviceBlock& b, int which,
                                      int batch, const float* x, float* y) {
  const int lat_rows = inner.rows(comm.rank());
  if (cfg_.normalization_layer != BlockNorm::instance_norm) {
    on_every_rank(comm, [&](cudaStream_t) {
      if (lat_rows > 0) norm(b, which, batch, lat_rows, x, y);
    });
    return;
  }
  const std::size_t band_sums = static_cast<std::size_t>(batch) * static_cast<std::size_t>(lat_rows) * static_cast<std::size_t>(C_);
  cu::GridRowSumsArgs rs;
  rs.x = x;
  rs.ld = C_;
  rs.batch = batch;
  rs.lat_rows = lat_rows;
  rs.nlon = w_;
  rs.dim = C_;
  rs.part = part_.data();
  cu::GridNormStatsArgs st;
  st.part = part_.data();
  st.batch = batch;
  st.lat_rows = h_;
  st.dim = C_;
  st.points = static_cast<double>(h_) * w_;
  st.mean = mean_.data();
  std::vector<double> sums;
  on_every_rank(comm, [&](cudaStream_t s) {
    if (lat_rows > 0) cu::grid_row_sums(rs, s);
    download(sums, part_.data(), band_sums);
  });
  std::vector<double> all = gather_row_sums(comm, inner, batch, C_, sums);
  on_every_rank(comm, [&](cudaStream_t s) {
    cu::copy_to_device(part_.data(), all.data(), all.size() * sizeof(double), s);
    cu::grid_norm_stats(st, s);  // the means from every row
    rs.mean = mean_.data();
    if (lat_rows > 0) cu::grid_row_sums(rs, s);
    download(sums, part_.data(), band_sums);
  });
  all = gather_row_sums(comm, inner, batch, C_, sums);
  on_every_rank(comm, [&](cudaStream_t s) {
    cu::copy_to_device(part_.data(), all.data(), all.size() * sizeof(double), s);
    st.finish = true;
    st.eps = 1e-6;
    st.weight = b.norm_w[which].data();
    st.bias = b.norm_b[which].data();
    st.scale = scale_.data();
    st.shift = shift_.data();
    cu::grid_norm_stats(st, s);
    if (lat_rows == 0) return;
    cu::ChannelAffineArgs af;
    af.x = x;
    af.ldx = C_;
    af.y = y;
    af.ldy = C_;
    af.rows = static_cast<index_t>(batch) * lat_rows * w_;
    af.rows_per_sample = static_cast<index_t>(lat_rows) * w_;
    af.dim = C_;
    af.scale = scale_.data();
    af.shift = shift_.data();
    cu::channel_affine(af, s);
  });
}

void SphereTransformerCuda::forward_bands(const Comm& comm, int batch, const BandPartition& image_bands,
                                          std::span<const HeldRows> input, float* out_band) {
  if (batch < 1) throw Error(ErrorCode::invalid_argument, "sphere_transformer: CUDA forward needs batch >= 1");
  if (image_bands.nlat() != cfg_.nlat || static_cast<int>(image_bands.first.size()) != comm.size() + 1)
    throw Error(ErrorCode::invalid_argument, "sphere_transformer: CUDA forward_bands: the image bands must cover the " +
                                                 std::to_string(cfg_.nlat) + " latitudes with one band per rank of " +
                                                 comm.name());
  const TransformerView v = TransformerInternals::view(net_);
  const BandPartition inner = net_.internal_bands(image_bands);
  const int me = comm.rank();
  const int i0 = inner.begin(me), i1 = inner.end(me), g0 = image_bands.begin(me), g1 = image_bands.end(me);
  const index_t P_img = static_cast<index_t>(cfg_.nlat) * cfg_.nlon, P = static_cast<index_t>(h_) * w_;
  const index_t P_band = static_cast<index_t>(i1 - i0) * w_, rows = batch * P_band;
  const std::size_t band_values = static_cast<std::size_t>(rows) * static_cast<std::size_t>(C_);
  on_every_rank(comm, [&](cudaStream_t) { ensure_buffers(batch); });

  // Encoder: the image rows within its cutoff of this band, fetched as the CPU path does; DISCO rows;
  // the position embedding of the band's rows.
  const auto enc_rows = v.encoder->input_rows(i0, i1);
  const std::vector<float> enc_in =
      fetch_rows(comm, input, band_ranges(batch, P_img, cfg_.nlon, enc_rows.first, enc_rows.second), cfg_.in_chans);
  on_every_rank(comm, [&](cudaStream_t s) {
    if (rows == 0) return;
    upload_to(in_.data(), enc_in);
    encoder_->forward_rows(batch, in_.data(), enc_rows.first, enc_rows.second, x_.data(), i0, i1, s);
    if (has_pos_)
      for (int b = 0; b < batch; ++b)
        add_rows(x_.data() + b * P_band * C_, pos_.data() + static_cast<index_t>(i0) * w_ * C_, P_band, C_, C_, s);
  });

  std::vector<float> band_host;
  for (DeviceBlock& b : blocks_) {
    band_norm(comm, inner, b, 0, batch, x_.data(), y_.data());
    // Keys and values: every row (global attention) or the neighbourhood halo, from their owners.
    on_every_rank(comm, [&](cudaStream_t) { download(band_host, y_.data(), band_values); });
    const std::vector<HeldRows> held = band_held(batch, P, w_, i0, i1, band_host.data(), C_);
    const auto kv_rows = b.global ? std::pair<int, int>{0, i0 < i1 ? h_ : 0}  // an empty band fetches nothing
                                  : b.neighborhood->host().input_rows(i0, i1);
    const std::vector<float> kv = fetch_rows(comm, held, band_ranges(batch, P, w_, kv_rows.first, kv_rows.second), C_);
    on_every_rank(comm, [&](cudaStream_t s) {
      if (rows == 0) return;
      upload_to(kv_.data(), kv);
      if (b.global) b.global->forward_rows(batch, i0, i1, y_.data(), kv_.data(), kv_.data(), att_.data(), s);
      else b.neighborhood->forward_rows(batch, i0, i1, y_.data(), kv_rows.first, kv_rows.second, kv_.data(),
                                        kv_.data(), att_.data(), s);
      add_rows(x_.data(), att_.data(), rows, C_, C_, s);
    });
    band_norm(comm, inner, b, 1, batch, x_.data(), y_.data());
    on_every_rank(comm, [&](cudaStream_t s) {
      if (rows == 0) return;
      if (cfg_.use_mlp) mlp(b, rows, s);
      else add_rows(x_.data(), y_.data(), rows, C_, C_, s);
    });
  }

  // Decoder: the image rows [g0, g1) read the upsampled rows [dec_rows) within the decoder's cutoff.
  const auto dec_rows = v.decoder->input_rows(g0, g1);
  const index_t dec_points = static_cast<index_t>(dec_rows.second - dec_rows.first) * cfg_.nlon;
  const index_t out_rows = static_cast<index_t>(batch) * (g1 - g0) * cfg_.nlon;
  if (sht_) {
    upsample_sht_bands(comm, batch, i0, i1, dec_rows.first, dec_rows.second);
  } else {
    // Bilinear: the internal rows of the interpolation stencils (pole rows: the first / last internal row)
    // are fetched and resampled into the decoder's rows only (ResampleS2Device::forward_rows, bitwise the
    // whole-grid rows).
    const auto res_rows = v.resample->input_rows(dec_rows.first, dec_rows.second);
    on_every_rank(comm, [&](cudaStream_t) { download(band_host, x_.data(), band_values); });
    const std::vector<float> stencil_rows = fetch_rows(comm, band_held(batch, P, w_, i0, i1, band_host.data(), C_),
                                                       band_ranges(batch, P, w_, res_rows.first, res_rows.second), C_);
    on_every_rank(comm, [&](cudaStream_t s) {
      if (dec_points == 0) return;
      upload_to(y_.data(), stencil_rows);
      resample_->forward_rows(batch, C_, y_.data(), res_rows.first, res_rows.second, band_up_.data(), dec_rows.first,
                              dec_rows.second, s);
    });
  }
  on_every_rank(comm, [&](cudaStream_t s) {
    if (dec_points == 0) return;
    decoder_->forward_rows(batch, band_up_.data(), dec_rows.first, dec_rows.second, out_.data(), g0, g1, s);
  });
  const std::vector<float> own_in =
      cfg_.residual_prediction ? fetch_rows(comm, input, band_ranges(batch, P_img, cfg_.nlon, g0, g1), cfg_.in_chans)
                               : std::vector<float>{};
  on_every_rank(comm, [&](cudaStream_t s) {
    if (out_rows == 0) return;
    if (cfg_.residual_prediction) {
      upload_to(in_.data(), own_in);
      add_rows(out_.data(), in_.data(), out_rows, cfg_.out_chans, cfg_.in_chans, s);
    }
    cu::copy_to_host(out_band, out_.data(), static_cast<std::size_t>(out_rows * cfg_.out_chans) * sizeof(float), s);
  });
}

}  // namespace

std::unique_ptr<SphereTransformerDeviceForward> make_sphere_transformer_device_forward(const SphericalTransformer& net,
                                                                                      const ModelFile& file, int device) {
  return std::make_unique<SphereTransformerCuda>(net, file, device);
}

}  // namespace surrogate::sphere
