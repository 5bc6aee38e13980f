// Sequoia's /config (the reference's `args` names) and the tensors it implies (share/docs/model-format.md,
// "Sequoia"; the official state_dict keys, reference-models.md §2.6).
#include <cmath>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {
namespace {

void add_bn(ExpectedShapes& s, const std::string& p, int dim) {
  for (const char* k : {".weight", ".bias", ".running_mean", ".running_var"}) s[p + k] = {dim};
}

void add_pe(ExpectedShapes& s, const std::string& p, int e) {
  s[p + ".pe_mlp.0.weight"] = {3, 3};
  s[p + ".pe_mlp.0.bias"] = {3};
  add_bn(s, p + ".pe_mlp.1", 3);
  s[p + ".pe_mlp.3.weight"] = {e, 3};
  s[p + ".pe_mlp.3.bias"] = {e};
}

}  // namespace

Config Config::from_file(const ModelFile& file) {
  Config c;
  const AttributeMap& a = file.config;
  const std::string cls = file.root.has("model_class") ? file.root.get_string("model_class") : "";
  if (cls == "TreeTransformerSeg") c.kind = Kind::segmentation;
  else if (cls == "TreeTransformerCls") c.kind = Kind::classification;
  else
    throw Error(ErrorCode::format, "sequoia: root attribute 'model_class' must be \"TreeTransformerSeg\" or "
                                   "\"TreeTransformerCls\", found \"" + cls + "\"");
  auto get = [&](const char* name, int lo, int hi) {
    const std::int64_t v = a.get_int(name);
    if (v < lo || v > hi)
      throw Error(ErrorCode::format, "/config attribute '" + std::string(name) + "' must be in [" + std::to_string(lo) +
                                         ", " + std::to_string(hi) + "], found " + std::to_string(v));
    return static_cast<int>(v);
  };
  c.c = get("c", 1, 1 << 16);
  c.dim = get("dim", 1, 1 << 16);
  c.heads = get("heads", 1, 1 << 10);
  c.depth = get("depth", 2, 12);
  c.layers = get("layers", 1, 1 << 10);
  c.divide = get("divide", 2, 1 << 10);
  // Voxel coordinates are int32 (as the official torch code's): the deepest level's divide^(depth-1)
  // voxels per axis must fit.
  if (std::pow(static_cast<double>(c.divide), c.depth - 1) >= 2147483648.0)
    throw Error(ErrorCode::format, "/config: 'divide' " + std::to_string(c.divide) + " and 'depth' " +
                                       std::to_string(c.depth) + " give " + std::to_string(c.divide) + "^" +
                                       std::to_string(c.depth - 1) +
                                       " voxels per axis at the deepest level, beyond the int32 voxel coordinates");
  if (c.dim % c.heads != 0)
    throw Error(ErrorCode::format, "/config: 'dim' (" + std::to_string(c.dim) + ") must be a multiple of 'heads' (" +
                                       std::to_string(c.heads) + ")");
  if (c.kind == Kind::segmentation) {
    c.n_class = get("n_class", 0, 1 << 16);
    c.n_part = get("n_part", 1, 1 << 16);
  } else {
    c.dim_cls = get("dim_cls", 1, 1 << 24);
    c.selection = a.has("selection") ? a.get_string("selection") : "root";
    const int level = c.selection == "root" ? c.depth : c.selection == "inner" ? c.depth - 1 : 0;
    if (c.selection != "root" && c.selection != "inner" && c.selection != "leaf")
      throw Error(ErrorCode::format, "/config attribute 'selection' must be root, inner or leaf, found \"" + c.selection + "\"");
    if (c.dim_cls != c.width(level))
      throw Error(ErrorCode::format, "/config: 'dim_cls' (" + std::to_string(c.dim_cls) + ") must equal the width of the '" +
                                         c.selection + "' level (" + std::to_string(c.width(level)) + ")");
  }
  return c;
}

ExpectedShapes Config::expected_shapes() const {
  ExpectedShapes s;
  const int L = levels();
  if (kind == Kind::segmentation) {
    s["_init.projections.0.0.weight"] = {dim, c};
    s["_init.projections.0.0.bias"] = {dim};
    add_bn(s, "_init.projections.0.1", dim);
  } else {
    s["_init.projections.0.conv.local_nn.lins.0.weight"] = {dim, c + 3};
    s["_init.projections.0.conv.local_nn.lins.0.bias"] = {dim};
  }
  for (int i = 1; i < L; ++i) {
    const std::string p = "_init.projections." + std::to_string(i);
    s[p + ".0.weight"] = {width(i), width(i - 1)};
    s[p + ".0.bias"] = {width(i)};
    add_bn(s, p + ".1", width(i));
  }
  for (int l = 0; l < layers; ++l) {
    const std::string e = "enc." + std::to_string(l) + ".";
    s[e + "attn2a.weight"] = {3};
    for (int i = 0; i < L; ++i) {
      const std::string li = std::to_string(i);
      const int d = width(i);
      s[e + "mlp1s." + li + ".0.weight"] = {d, d};
      add_bn(s, e + "mlp1s." + li + ".1", d);
      s[e + "mlp3as." + li + ".0.weight"] = {d, d};
      add_bn(s, e + "mlp3as." + li + ".1", d);
      add_bn(s, e + "attn2bs." + li + ".0", d);
      for (const char* q : {"linearQ.", "linearK.", "linearV."}) s[e + "attn2a." + q + li + ".weight"] = {d, d};
      if (i > 0) {
        s[e + "attn2a.expands_K." + std::to_string(i - 1) + ".weight"] = {d, width(i - 1)};
        s[e + "attn2a.expands_V." + std::to_string(i - 1) + ".weight"] = {d, width(i - 1)};
      }
      if (i + 1 < L) {
        s[e + "attn2a.shrinks_K." + li + ".weight"] = {d, width(i + 1)};
        s[e + "attn2a.shrinks_V." + li + ".weight"] = {d, width(i + 1)};
      }
      for (const char* kind_name : {"parents_attns.", "children_attns.", "siblings_attns."})
        add_pe(s, e + "attn2a." + kind_name + li, d / heads);
    }
  }
  if (kind == Kind::segmentation) {
    s["cls.0.weight"] = {512, dim + n_class};
    s["cls.0.bias"] = {512};
    s["cls.1.weight"] = {512};
    s["cls.1.bias"] = {512};
    s["cls.3.weight"] = {n_part, 512};
    s["cls.3.bias"] = {n_part};
  } else {
    s["cls.0.weight"] = {512, dim_cls};
    s["cls.0.bias"] = {512};
    add_bn(s, "cls.1", 512);
    s["cls.3.weight"] = {classes, 512};
    s["cls.3.bias"] = {classes};
  }
  return s;
}

std::vector<std::pair<std::string, std::string>> Config::describe() const {
  std::vector<std::pair<std::string, std::string>> d;
  const bool seg = kind == Kind::segmentation;
  d.emplace_back("model", seg ? "TreeTransformerSeg (one prediction per point)"
                              : "TreeTransformerCls (one prediction per sample)");
  d.emplace_back("voxel hierarchy", "divide " + std::to_string(divide) + ", depth " + std::to_string(depth));
  std::string widths;
  for (int i = 0; i < levels(); ++i) widths += (i ? ", " : "") + std::to_string(width(i));
  d.emplace_back("level widths", widths);
  d.emplace_back("heads, blocks", std::to_string(heads) + ", " + std::to_string(layers));
  d.emplace_back("input channels", std::to_string(c));
  d.emplace_back("sibling neighbours", std::to_string(k_siblings()) + " (exact squared distance, ties by index)");
  if (seg) {
    d.emplace_back("per-sample input", std::to_string(n_class) + " values (the class vector)");
    d.emplace_back("output", std::to_string(n_part) + " per point");
  } else {
    d.emplace_back("initial features", "PointConv over the 16 nearest points, max");
    d.emplace_back("selection", selection);
    d.emplace_back("output", std::to_string(classes) + " per sample");
  }
  return d;
}

}  // namespace surrogate::sequoia
