// Point files and checks for `surrogate predict` on spherical models (ctest entries sphere.cli.*).
//   sphere_cli_tool make IO.h5 MODEL.h5 OUTDIR
//       from a golden case's /input (B, C, nlat, nlon): OUTDIR/features.h5 (/features rows
//       b*nlat*nlon + lat*nlon + lon, /batch_idx), coords.h5 (the same + /coords, the grid's unit
//       vectors), bad_coords.h5 (/coords of the point one longitude further: a misordered grid)
//   sphere_cli_tool golden IO.h5 PREDICTION.h5
//       /prediction against the official output, with the tolerance of tests/sphere/test_sphere_models.cpp
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "h5_io.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/sphere/model_grid.hpp"

using namespace surrogate::testing;

namespace {

/// (B, C, H, W) -> rows (b*H*W + p) x C.
std::vector<double> to_rows(const Array& a) {
  const std::int64_t B = a.shape[0], C = a.shape[1], P = a.shape[2] * a.shape[3];
  std::vector<double> rows(static_cast<std::size_t>(B * P * C));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t p = 0; p < P; ++p)
        rows[static_cast<std::size_t>((b * P + p) * C + c)] = a.values[static_cast<std::size_t>((b * C + c) * P + p)];
  return rows;
}

int make(const std::string& io, const std::string& model, const std::filesystem::path& out) {
  const Array input = read_array(io, "input");
  const std::int64_t B = input.shape[0], C = input.shape[1], P = input.shape[2] * input.shape[3];
  const auto grid = surrogate::sphere::model_grid(surrogate::ModelFile::read(model));
  if (!grid || grid->points() != P) {
    std::cerr << "sphere_cli_tool: " << model << " is not a spherical model of " << P << " points\n";
    return 1;
  }
  std::vector<double> batch(static_cast<std::size_t>(B * P)), coords(static_cast<std::size_t>(B * P * 3)),
      shifted(coords.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t p = 0; p < P; ++p) {
      batch[static_cast<std::size_t>(b * P + p)] = static_cast<double>(b);
      const auto u = grid->unit_vector(p);
      const auto v = grid->unit_vector(p - p % grid->nlon + (p + 1) % grid->nlon);
      for (int d = 0; d < 3; ++d) {
        coords[static_cast<std::size_t>((b * P + p) * 3 + d)] = u[static_cast<std::size_t>(d)];
        shifted[static_cast<std::size_t>((b * P + p) * 3 + d)] = v[static_cast<std::size_t>(d)];
      }
    }
  std::filesystem::create_directories(out);
  const Dataset features{"features", {B * P, C}, to_rows(input)}, samples{"batch_idx", {B * P}, batch, true};
  write_file((out / "features.h5").string(), {features, samples});
  write_file((out / "coords.h5").string(), {features, samples, {"coords", {B * P, 3}, coords}});
  write_file((out / "bad_coords.h5").string(), {features, samples, {"coords", {B * P, 3}, shifted}});
  return 0;
}

int golden(const std::string& io, const std::string& prediction) {
  const std::vector<double> ref = to_rows(read_array(io, "output"));
  const bool has64 = has_dataset(io, "output_f64");
  const std::vector<double> best = has64 ? to_rows(read_array(io, "output_f64")) : ref;
  const Array got = read_array(prediction, "prediction");
  if (got.values.size() != ref.size()) {
    std::cerr << "sphere_cli_tool: " << prediction << " has " << got.values.size() << " values, expected " << ref.size()
              << "\n";
    return 1;
  }
  double err = 0, gap = 0, mag = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(got.values[i] - best[i]));
    gap = std::max(gap, std::abs(best[i] - ref[i]));
    mag = std::max(mag, std::abs(best[i]));
  }
  // As tests/sphere/test_sphere_models.cpp: 4x the official float32-vs-float64 gap + 16 float32 ulps of
  // the magnitude, or 32 ulps against the float32 output when the case has no float64 run.
  const double tol = has64 ? 4 * gap + 16 * 6e-8 * mag : 32 * 6e-8 * mag;
  std::printf("max |prediction - official%s| %.3g (tolerance %.3g, max |y| %.3g)\n", has64 ? " float64" : "", err, tol,
              mag);
  return err <= tol ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "make" && argc == 5) return make(argv[2], argv[3], argv[4]);
    if (mode == "golden" && argc == 4) return golden(argv[2], argv[3]);
    std::cerr << "usage: sphere_cli_tool make IO.h5 MODEL.h5 OUTDIR | golden IO.h5 PREDICTION.h5\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "sphere_cli_tool: " << e.what() << "\n";
    return 1;
  }
}
