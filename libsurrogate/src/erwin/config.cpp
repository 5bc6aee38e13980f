// Erwin configuration (/config attributes) and the official state_dict shapes.
#include <string>
#include <vector>
#include <variant>

#include "surrogate/erwin.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::erwin {
namespace {

/// A list of integers, each within +-kMaxConfigSize (so an int holds it); validate() checks their meaning.
std::vector<int> int_list(const AttributeMap& a, const std::string& name) {
  const auto list = a.get_size_list(name, -kMaxConfigSize, kMaxConfigSize);
  return {list.begin(), list.end()};
}

std::string at(const char* name, std::size_t i) { return std::string(name) + "[" + std::to_string(i) + "]"; }

}  // namespace

Config Config::from_attributes(const AttributeMap& a) {
  Config c;
  c.c_in = static_cast<int>(a.get_size("c_in", 1));
  c.c_hidden = int_list(a, "c_hidden");
  c.ball_sizes = int_list(a, "ball_sizes");
  c.enc_num_heads = int_list(a, "enc_num_heads");
  c.enc_depths = int_list(a, "enc_depths");
  c.dec_num_heads = a.has("dec_num_heads") ? int_list(a, "dec_num_heads") : std::vector<int>{};
  c.dec_depths = a.has("dec_depths") ? int_list(a, "dec_depths") : std::vector<int>{};
  c.strides = a.has("strides") ? int_list(a, "strides") : std::vector<int>{};
  c.rotate = a.get_double("rotate");
  c.mlp_ratio = static_cast<int>(a.get_size_or("mlp_ratio", 4, 1, 64));
  c.dimensionality = static_cast<int>(a.get_size_or("dimensionality", 3, 1, 64));
  c.mp_steps = static_cast<int>(a.get_size_or("mp_steps", 3, 0));
  const std::string variant = a.has("variant") ? a.get_string("variant") : "erwin";
  if (variant == "erwin") c.variant = Variant::erwin;
  else if (variant == "erwin_flash") c.variant = Variant::erwin_flash;
  else
    throw Error(ErrorCode::format, "attribute 'variant' in " + a.group() + " must be 'erwin' or 'erwin_flash', found '" +
                                       variant + "'");
  c.validate();
  return c;
}

void Config::validate() const {
  auto fail = [](const std::string& what) { throw Error(ErrorCode::format, "erwin config: " + what); };
  const std::size_t L = ball_sizes.size();
  if (L == 0) fail("ball_sizes is empty");
  if (c_in < 1) fail("c_in must be at least 1");
  if (dimensionality < 1) fail("dimensionality must be at least 1");
  if (mlp_ratio < 1) fail("mlp_ratio must be at least 1");
  if (mp_steps < 0) fail("mp_steps must be non-negative");
  auto same = [&](const std::vector<int>& v, const char* name, std::size_t n) {
    if (v.size() != n)
      fail(std::string(name) + " has " + std::to_string(v.size()) + " entries, expected " + std::to_string(n));
  };
  // The ball attention kernel keeps a head's sums in registers (kernels::BallAttentionArgs).
  auto head_width = [&](int width, const char* heads, std::size_t i) {
    if (width > kernels::kMaxAttentionHeadDim)
      fail("head width c_hidden[" + std::to_string(i) + "] / " + at(heads, i) + " = " + std::to_string(width) +
           " exceeds the supported maximum of " + std::to_string(kernels::kMaxAttentionHeadDim));
  };
  same(c_hidden, "c_hidden", L);
  same(enc_num_heads, "enc_num_heads", L);
  same(enc_depths, "enc_depths", L);
  same(strides, "strides", L - 1);
  same(dec_num_heads, "dec_num_heads", L - 1);
  same(dec_depths, "dec_depths", L - 1);
  for (std::size_t i = 0; i < L; ++i) {
    if (c_hidden[i] < 1) fail(at("c_hidden", i) + " must be at least 1");
    if (ball_sizes[i] < 1) fail(at("ball_sizes", i) + " must be at least 1");
    if (enc_depths[i] < 0) fail(at("enc_depths", i) + " must be non-negative");
    if (enc_num_heads[i] < 1 || c_hidden[i] % enc_num_heads[i] != 0)
      fail(at("c_hidden", i) + " = " + std::to_string(c_hidden[i]) + " is not divisible by " + at("enc_num_heads", i) +
           " = " + std::to_string(enc_num_heads[i]));
    head_width(c_hidden[i] / enc_num_heads[i], "enc_num_heads", i);
  }
  for (std::size_t i = 0; i + 1 < L; ++i) {
    if (strides[i] < 1) fail(at("strides", i) + " must be at least 1");
    if (dec_depths[i] < 0) fail(at("dec_depths", i) + " must be non-negative");
    if (dec_num_heads[i] < 1 || c_hidden[i] % dec_num_heads[i] != 0)
      fail(at("c_hidden", i) + " = " + std::to_string(c_hidden[i]) + " is not divisible by " + at("dec_num_heads", i) +
           " = " + std::to_string(dec_num_heads[i]));
    head_width(c_hidden[i] / dec_num_heads[i], "dec_num_heads", i);
    if (strides[i] == 1 && c_hidden[i] != c_hidden[i + 1])
      fail(at("strides", i) + " = 1 (no pooling) needs " + at("c_hidden", i) + " == " + at("c_hidden", i + 1));
  }
}

ExpectedShapes expected_shapes(const Config& c) {
  c.validate();
  ExpectedShapes s;
  const std::int64_t d = c.dimensionality, r = c.mlp_ratio;
  const bool flash = c.variant == Variant::erwin_flash;
  auto linear = [&](const std::string& name, std::int64_t out, std::int64_t in) {
    s[name + ".weight"] = {out, in};
    s[name + ".bias"] = {out};
  };
  auto batchnorm = [&](const std::string& name, std::int64_t dim) {
    for (const char* p : {"weight", "bias", "running_mean", "running_var"}) s[name + "." + p] = {dim};
  };
  auto block = [&](const std::string& p, std::int64_t dim, std::int64_t heads) {
    s[p + "norm1.weight"] = {dim};
    s[p + "norm2.weight"] = {dim};
    linear(p + "BMSA.qkv", 3 * dim, dim);
    linear(p + "BMSA.proj", dim, dim);
    linear(p + "BMSA.pe_proj", dim, d);
    s[p + "BMSA.sigma_att"] = {1, heads, 1, 1};
    linear(p + "swiglu.w1", dim * r, dim);
    linear(p + "swiglu.w2", dim * r, dim);
    linear(p + "swiglu.w3", dim, dim * r);
  };
  const std::int64_t D0 = c.c_hidden[0];
  linear("embed.embed_fn", D0, c.c_in);
  for (int t = 0; t < c.mp_steps; ++t) {
    const std::string ts = std::to_string(t);
    const std::string msg = std::string("embed.mpnn.") + (flash ? "fused_message_update." : "message_fns.") + ts;
    linear(msg + ".0", D0, 2 * D0 + d);
    linear("embed.mpnn.update_fns." + ts + ".0", D0, 2 * D0);
    if (!flash) {
      s[msg + ".2.weight"] = {D0};
      s[msg + ".2.bias"] = {D0};
      s["embed.mpnn.update_fns." + ts + ".1.weight"] = {D0};
      s["embed.mpnn.update_fns." + ts + ".1.bias"] = {D0};
    }
  }
  const int L = c.levels();
  for (int i = 0; i + 1 < L; ++i) {
    const std::string p = "encoder." + std::to_string(i) + ".";
    for (int j = 0; j < c.enc_depths[static_cast<std::size_t>(i)]; ++j)
      block(p + "blocks." + std::to_string(j) + ".", c.c_hidden[static_cast<std::size_t>(i)],
            c.enc_num_heads[static_cast<std::size_t>(i)]);
    const std::int64_t st = c.strides[static_cast<std::size_t>(i)];
    linear(p + "pool.proj", c.c_hidden[static_cast<std::size_t>(i) + 1],
           st * c.c_hidden[static_cast<std::size_t>(i)] + st * d);
    batchnorm(p + "pool.norm", c.c_hidden[static_cast<std::size_t>(i) + 1]);
  }
  for (int j = 0; j < c.enc_depths.back(); ++j)
    block("bottleneck.blocks." + std::to_string(j) + ".", c.c_hidden.back(), c.enc_num_heads.back());
  for (int k = 0; k + 1 < L; ++k) {
    const auto i = static_cast<std::size_t>(L - 2 - k);
    const std::string p = "decoder." + std::to_string(k) + ".";
    const std::int64_t st = c.strides[i];
    linear(p + "unpool.proj", st * c.c_hidden[i], c.c_hidden[i + 1] + st * d);
    batchnorm(p + "unpool.norm", c.c_hidden[i]);
    for (int j = 0; j < c.dec_depths[i]; ++j)
      block(p + "blocks." + std::to_string(j) + ".", c.c_hidden[i], c.dec_num_heads[i]);
  }
  return s;
}

}  // namespace surrogate::erwin
