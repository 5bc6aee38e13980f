// The SphericalTransformer's device forward (transformer.hpp): construction from the CPU network's operators
// and tables (the DISCO and attention weights from the model file), the stages, and the whole grid on one
// rank; the latitude bands are in transformer_bands.cpp. Agrees with the CPU forward within float32
// rounding, not bitwise: share/docs/sphere.md, "CUDA forward of the SphericalTransformer", "Arithmetic".
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../../cuda_errors.hpp"
#include "../transformer/internals.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"
#include "surrogate/kernels/cuda_sphere_grid_norm.hpp"
#include "surrogate/kernels/cuda_sphere_sht.hpp"
#include "transformer_cuda.hpp"

namespace surrogate::sphere {

namespace cu = kernels::cuda;
using kernels::Activation;

namespace {

template <class T>
void upload(cu::DeviceBuffer<T>& dst, const T* src, std::size_t count, int device, cudaStream_t stream) {
  surrogate::device::upload(dst, std::span<const T>(src, count), device, stream);
}

}  // namespace

SphereTransformerCuda::SphereTransformerCuda(const SphericalTransformer& net, const ModelFile& file, int device)
    : net_(net), cfg_(net.config()), device_(device) {
  const TransformerView v = TransformerInternals::view(net);
  h_ = v.h;
  w_ = v.w;
  C_ = cfg_.embed_dim;
  hidden_ = cfg_.use_mlp ? cfg_.mlp_hidden() : 0;
  try {
    cu::DeviceGuard guard(device_);  // the uploads below run on this device whatever the caller's current one
    stream_ = cu::Stream(device_);
    cudaStream_t s = stream_.get();
    encoder_.emplace(v.encoder->config(), file.weight("encoder.conv.weight").values, std::vector<float>{},
                     &v.encoder->table(), device_);
    decoder_.emplace(v.decoder->config(), file.weight("decoder.conv.weight").values, std::vector<float>{},
                     &v.decoder->table(), device_);
    if (v.sht) {
      ShtDecoder& d = sht_.emplace();
      d.lmax = v.sht->lmax();
      d.mmax = v.sht->mmax();
      d.modes_in = std::min(d.mmax, w_ / 2 + 1);
      d.modes_out = std::min(d.mmax, cfg_.nlon / 2 + 1);
      d.nyquist = cfg_.nlon % 2 == 0 && cfg_.nlon / 2 < d.modes_out ? cfg_.nlon / 2 : -1;
      upload(d.analysis, v.sht->weights().data(), v.sht->weights().size(), device_, s);
      upload(d.synthesis, v.isht->table().data(), v.isht->table().size(), device_, s);
      std::vector<double> tw_in, tw_out;  // cos, sin(2 pi t / n), t < n, of both grids
      for (const auto& [n, tw] : {std::pair<int, std::vector<double>*>{w_, &tw_in}, {cfg_.nlon, &tw_out}}) {
        tw->resize(2 * static_cast<std::size_t>(n));
        for (int t = 0; t < n; ++t) {
          const double angle = 2.0 * std::numbers::pi * t / n;
          (*tw)[2 * static_cast<std::size_t>(t)] = std::cos(angle);
          (*tw)[2 * static_cast<std::size_t>(t) + 1] = std::sin(angle);
        }
      }
      upload(d.twiddle_in, tw_in.data(), tw_in.size(), device_, s);
      upload(d.twiddle_out, tw_out.data(), tw_out.size(), device_, s);
      stream_.synchronize();  // the uploads read the local tables
    } else {
      resample_.emplace(v.resample->config(), device_);
    }
    if (v.pos) {
      std::vector<float> dense(static_cast<std::size_t>(h_) * static_cast<std::size_t>(w_) * static_cast<std::size_t>(C_));
      for (index_t p = 0; p < static_cast<index_t>(h_) * w_; ++p)
        std::copy(v.pos + p * v.ld, v.pos + p * v.ld + C_, dense.begin() + p * C_);
      upload(pos_, dense.data(), dense.size(), device_, s);
      stream_.synchronize();  // `dense` goes away
      has_pos_ = true;
    }
    blocks_.resize(v.blocks.size());
    const auto C = static_cast<std::size_t>(C_);
    for (std::size_t i = 0; i < v.blocks.size(); ++i) {
      const TransformerView::Block& src = v.blocks[i];
      Block& b = blocks_[i];
      for (int n = 0; n < 2; ++n)
        if (src.norm_w[n])
          b.norm[n] = weights_.append_norm({src.norm_w[n], C}, {src.norm_b[n], C}, false, 1e-6f);  // eps as the CPU
      const AttentionS2Weights weights = transformer_attention_weights(file, static_cast<int>(i));
      if (src.global) b.global.emplace(src.global->config(), weights, device_);
      else b.neighborhood.emplace(src.neighborhood->config(), weights, device_);
      if (src.fc1) {
        b.fc1 = weights_.append_dense(*src.fc1);
        b.fc2 = weights_.append_dense(*src.fc2);
      }
    }
    weights_.upload(device_, s);
  } catch (...) {
    surrogate::detail::raise_current_cuda_error("sphere_transformer", device_);
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
  part_band_.resize(B * static_cast<std::size_t>(h_) * C, device_);
  if (sht_) {
    const std::size_t C2 = 2 * C, M = static_cast<std::size_t>(sht_->mmax), L = static_cast<std::size_t>(sht_->lmax);
    sht_->fourier.resize(B * static_cast<std::size_t>(h_) * M * C2, device_);
    sht_->orders.resize(B * static_cast<std::size_t>(h_) * M * C2, device_);
    sht_->coeffs.resize(B * L * M * C2, device_);
    sht_->all_coeffs.resize(B * L * M * C2, device_);
    sht_->g.resize(B * static_cast<std::size_t>(cfg_.nlat) * static_cast<std::size_t>(sht_->modes_out) * C2, device_);
  }
  mean_.resize(B * C, device_);
  scale_.resize(B * C, device_);
  shift_.resize(B * C, device_);
  capacity_ = batch;
}

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

void SphereTransformerCuda::norm(const Block& b, int which, int batch, int lat_rows, const float* x, float* y) {
  const index_t P = static_cast<index_t>(lat_rows) * w_, rows = batch * P;
  cudaStream_t s = stream_.get();
  const surrogate::device::Norm& n = b.norm[which];
  switch (cfg_.normalization_layer) {
    case BlockNorm::none: surrogate::device::copy_rows(x, C_, nullptr, y, C_, nullptr, rows, C_, s); return;
    case BlockNorm::layer_norm: surrogate::device::norm(n, weights_.data(), x, C_, y, C_, rows, s); return;
    case BlockNorm::instance_norm: {
      cu::GridRowSumsArgs rs;
      rs.x = x;
      rs.ld = C_;
      rs.batch = batch;
      rs.lat_rows = lat_rows;
      rs.nlon = w_;
      rs.dim = C_;
      rs.part = part_.data();
      cu::grid_row_sums(rs, s);
      cu::GridNormStatsArgs st;
      st.part = part_.data();
      st.batch = batch;
      st.lat_rows = lat_rows;
      st.dim = C_;
      st.points = static_cast<double>(P);
      st.mean = mean_.data();
      cu::grid_norm_stats(st, s);
      rs.mean = mean_.data();
      cu::grid_row_sums(rs, s);
      st.finish = true;
      st.eps = 1e-6;
      st.weight = weights_.data() + n.weight;
      st.bias = weights_.data() + n.bias;
      st.scale = scale_.data();
      st.shift = shift_.data();
      cu::grid_norm_stats(st, s);
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
      cu::channel_affine(af, s);
      return;
    }
  }
}

void SphereTransformerCuda::mlp(const Block& b, index_t rows, cudaStream_t s) {
  const Activation act = cfg_.activation == MlpActivation::gelu ? Activation::gelu_erf : Activation::none;
  surrogate::device::dense(b.fc1, weights_.data(), y_.data(), C_, hid_.data(), hidden_, rows, s, act);
  if (cfg_.activation == MlpActivation::relu) cu::relu_rows(hid_.data(), hidden_, rows, hidden_, s);
  surrogate::device::dense(b.fc2, weights_.data(), hid_.data(), hidden_, x_.data(), C_, rows, s, Activation::none,
                           x_.data(), C_);  // the residual, in place
}

void SphereTransformerCuda::add_rows(float* x, const float* addend, index_t rows, int width, int ld_addend,
                                     cudaStream_t s) {
  if (rows == 0) return;
  surrogate::device::combine_rows(cu::RowOp::add, x, width, addend, ld_addend, x, width, rows, width, s);
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

    for (Block& b : blocks_) {
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
    surrogate::detail::raise_current_cuda_error("sphere_transformer", device_);
  }
}

std::unique_ptr<SphereTransformerDeviceForward> make_sphere_transformer_device_forward(const SphericalTransformer& net,
                                                                                      const ModelFile& file, int device) {
  return std::make_unique<SphereTransformerCuda>(net, file, device);
}

}  // namespace surrogate::sphere
