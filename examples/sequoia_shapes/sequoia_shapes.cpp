// A surface field and an integrated quantity of generated bodies with the two Sequoia models under MPI
// (README.md): the pressure-like field cp by TreeTransformerSeg (per point, the stream direction as the
// per-sample input) and the drag area D by TreeTransformerCls (one value per body), both trained by
// share/training/sequoia_shapes_train.py, checked against the closed form (shapes.hpp), parallel VTK.
//
//   mpirun -np P sequoia_shapes [--shapes 6] [--points 512] [--seed 1] [--output DIR | --no-vtk] [--threads T]
#include <mpi.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "shapes.hpp"
#include "surrogate/error.hpp"
#include "surrogate/surrogate.hpp"
#include "surrogate/vtk.hpp"

namespace {

using surrogate::Error;
using surrogate::ErrorCode;

struct Arguments {
  std::string seg_model = SEQUOIA_SHAPES_SEG_MODEL;  // share/models/sequoia (CMakeLists.txt)
  std::string cls_model = SEQUOIA_SHAPES_CLS_MODEL;
  std::int64_t shapes = 6;
  std::int64_t points = 512;  // per shape (the models were trained on 256 and 512)
  std::uint64_t seed = 1;
  std::string output = "sequoia_shapes_output";
  bool vtk = true;
  int threads = 0;
};

Arguments parse(int argc, char** argv) {
  Arguments a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(ErrorCode::invalid_argument, flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--seg-model")
      a.seg_model = value();
    else if (flag == "--cls-model")
      a.cls_model = value();
    else if (flag == "--shapes")
      a.shapes = std::stoll(value());
    else if (flag == "--points")
      a.points = std::stoll(value());
    else if (flag == "--seed")
      a.seed = std::stoull(value());
    else if (flag == "--output")
      a.output = value();
    else if (flag == "--no-vtk")
      a.vtk = false;
    else if (flag == "--threads")
      a.threads = std::stoi(value());
    else
      throw Error(ErrorCode::invalid_argument, "unknown argument '" + flag + "'");
  }
  if (a.shapes < 1 || a.points < 64)
    throw Error(ErrorCode::invalid_argument, "--shapes >= 1 and --points >= 64 please");
  return a;
}

std::uint64_t fnv1a(const std::vector<double>& values) {
  std::uint64_t h = 14695981039346656037ull;
  for (const double v : values) {
    unsigned char bytes[sizeof v];
    std::memcpy(bytes, &v, sizeof v);
    for (const unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  }
  return h;
}

/// Gathers every rank's values on rank 0 in rank order (the global point order).
std::vector<double> gather(const std::vector<double>& local, int ranks, int rank) {
  const int mine = static_cast<int>(local.size());
  std::vector<int> counts(static_cast<std::size_t>(ranks)), offsets(static_cast<std::size_t>(ranks), 0);
  MPI_Gather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (int r = 1; r < ranks; ++r)
    offsets[static_cast<std::size_t>(r)] =
        offsets[static_cast<std::size_t>(r - 1)] + counts[static_cast<std::size_t>(r - 1)];
  std::vector<double> all(rank == 0 ? static_cast<std::size_t>(offsets.back() + counts.back()) : 0);
  MPI_Gatherv(local.data(), mine, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return all;
}

int run(int argc, char** argv) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const Arguments args = parse(argc, argv);
  using sequoia_shapes::Shape;

  // 1. The bodies (every rank knows all shapes: a few numbers each) and this rank's points. The global
  //    points are numbered shape by shape; rank r takes the contiguous range [N c_r, N c_{r+1}) with
  //    c_r = r (r+1) / (P (P+1)): unequal shares (1 : 2 : 3 …), a body may span two ranks.
  std::vector<Shape> shapes;
  for (std::int64_t s = 0; s < args.shapes; ++s)
    shapes.push_back(sequoia_shapes::make_shape(args.seed, static_cast<std::uint64_t>(s)));
  const std::int64_t n_total = args.shapes * args.points;
  const auto cut = [&](std::int64_t r) { return n_total * r * (r + 1) / (ranks * (ranks + 1)); };
  const std::int64_t first = cut(rank), n = cut(rank + 1) - first;
  std::vector<double> positions(static_cast<std::size_t>(3 * n)), normals(static_cast<std::size_t>(3 * n)),
      weights(static_cast<std::size_t>(n)), exact(static_cast<std::size_t>(n)), seg_in(static_cast<std::size_t>(3 * n)),
      cls_in(static_cast<std::size_t>(2 * n)), shape_id(static_cast<std::size_t>(n));
  std::vector<std::int64_t> sample(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const std::int64_t g = first + i, s = g / args.points;
    const Shape& body = shapes[static_cast<std::size_t>(s)];
    const sequoia_shapes::SurfacePoint p = sequoia_shapes::surface_point(body, g % args.points, args.points);
    const std::array<double, 3> d = body.stream();
    std::copy(p.x.begin(), p.x.end(), positions.begin() + static_cast<std::ptrdiff_t>(3 * k));
    std::copy(p.n.begin(), p.n.end(), normals.begin() + static_cast<std::ptrdiff_t>(3 * k));
    weights[k] = p.w;
    exact[k] = sequoia_shapes::pressure(p.n, d);
    sample[k] = s;
    shape_id[k] = static_cast<double>(s);
    // The models' point inputs (as trained): the normal for the field; the windward cosine n·d and the
    // area per steradian w N / 4π for the drag.
    std::copy(p.n.begin(), p.n.end(), seg_in.begin() + static_cast<std::ptrdiff_t>(3 * k));
    cls_in[2 * k] = p.n[0] * d[0] + p.n[1] * d[1] + p.n[2] * d[2];
    cls_in[2 * k + 1] = p.w * static_cast<double>(args.points) / (4.0 * std::numbers::pi);
  }

  // 2. The models: the same points and samples for both (each body is one sample; the library moves each
  //    sample's points to one owner rank, builds its voxel hierarchy there and sends the results back).
  surrogate::Options options;
  options.threads = args.threads;
  surrogate::Surrogate seg(MPI_COMM_WORLD, args.seg_model, options);
  surrogate::Surrogate cls(MPI_COMM_WORLD, args.cls_model, options);
  if (seg.in_channels() != 3 || seg.out_channels() != 1 || seg.sample_in_channels() != 2)
    throw Error(ErrorCode::invalid_argument,
                "'" + args.seg_model + "' is not the field model (3 inputs, 1 output, 2 per sample)");
  if (cls.in_channels() != 2 || cls.out_channels() != 0 || cls.sample_out_channels() < 1)
    throw Error(ErrorCode::invalid_argument,
                "'" + args.cls_model + "' is not the drag model (2 inputs, per-sample outputs)");
  double t0 = MPI_Wtime();
  seg.set_points<double>(n, 3, {positions.data(), 3, 1}, nullptr, sample.data());
  cls.set_points<double>(n, 3, {positions.data(), 3, 1}, nullptr, sample.data());
  const double set_points_seconds = MPI_Wtime() - t0;

  // 3. The field: per-sample input (cos α, sin α) of every body, the same on every rank; one cp per point.
  std::vector<double> stream_in;
  for (const Shape& body : shapes) {
    const std::array<double, 3> d = body.stream();
    stream_in.insert(stream_in.end(), {d[0], d[2]});
  }
  seg.set_sample_inputs<double>(args.shapes, 2, stream_in.data());
  std::vector<double> predicted(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
  t0 = MPI_Wtime();
  seg.predict<double>({seg_in.data(), 3, 1}, {predicted.data(), 1, 1});
  double seg_seconds = MPI_Wtime() - t0;

  // 4. The drag area: one row of 40 values per body on every rank; channel 0 was trained on D.
  t0 = MPI_Wtime();
  cls.predict<double>({cls_in.data(), 2, 1}, {nullptr, 0, 1});
  double cls_seconds = MPI_Wtime() - t0;
  const std::vector<double>& per_body = cls.sample_outputs();
  const auto width = static_cast<std::size_t>(cls.sample_out_channels());
  double seconds[2] = {seg_seconds, cls_seconds};
  MPI_Allreduce(MPI_IN_PLACE, seconds, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  // 5. Errors: cp against the closed form; per body the exact D (8,192-point quadrature), the drag
  //    model's D, and D integrated from the predicted field and from the exact field with the points'
  //    weights (the second shows the quadrature error of N points, the first adds the field's error).
  std::vector<double> error(static_cast<std::size_t>(n));
  std::vector<double> sums(static_cast<std::size_t>(3 + 2 * args.shapes), 0.0);  // err², exact², count, per body
  double worst = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const std::array<double, 3> d = shapes[static_cast<std::size_t>(sample[k])].stream();
    const double nd = normals[3 * k] * d[0] + normals[3 * k + 1] * d[1] + normals[3 * k + 2] * d[2];
    error[k] = predicted[k] - exact[k];
    sums[0] += error[k] * error[k];
    sums[1] += exact[k] * exact[k];
    sums[static_cast<std::size_t>(3 + 2 * sample[k])] -= weights[k] * predicted[k] * nd;
    sums[static_cast<std::size_t>(4 + 2 * sample[k])] -= weights[k] * exact[k] * nd;
    worst = std::max(worst, std::abs(error[k]));
  }
  sums[2] = static_cast<double>(n);
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const std::vector<double> all_predicted =
      gather(std::vector<double>(predicted.begin(), predicted.begin() + n), ranks, rank);

  // 6. VTK: every rank's points with the exact and predicted field, the body id, normals and weights; the
  //    bodies side by side for viewing, on a grid of ceil(√B) columns 2 m apart in x and rows 1.3 m apart in y
  //    (the models saw them centred).
  std::string vtk_note = "not written (--no-vtk)";
  if (args.vtk && !surrogate::VtkSeries::available()) vtk_note = "not written (this build has no VTK)";
  if (args.vtk && surrogate::VtkSeries::available()) {
    surrogate::VtkSeries vtk(MPI_COMM_WORLD, args.output, "shapes");
    vtk.add_array("cp_exact", "1", 1, surrogate::Strided<const double>{exact.data(), 1, 1});
    vtk.add_array("cp_predicted", "1", 1, surrogate::Strided<const double>{predicted.data(), 1, 1});
    vtk.add_array("cp_error", "1", 1, surrogate::Strided<const double>{error.data(), 1, 1});
    vtk.add_array("shape", "", 1, surrogate::Strided<const double>{shape_id.data(), 1, 1});
    vtk.add_array("normal", "", 3, surrogate::Strided<const double>{normals.data(), 3, 1});
    vtk.add_array("area_weight", "m^2", 1, surrogate::Strided<const double>{weights.data(), 1, 1});
    std::vector<double> shown(positions);
    const auto columns = static_cast<std::int64_t>(std::ceil(std::sqrt(static_cast<double>(args.shapes))));
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t s = sample[static_cast<std::size_t>(i)];
      shown[static_cast<std::size_t>(3 * i)] += 2.0 * static_cast<double>(s % columns);
      shown[static_cast<std::size_t>(3 * i + 1)] -= 1.3 * static_cast<double>(s / columns);
    }
    vtk.write(0.0, n, 3, {shown.data(), 3, 1});
    vtk_note = args.output + "/shapes.pvd (" + std::to_string(ranks) + " pieces)";
  }

  if (rank == 0) {
    std::printf("sequoia_shapes: %" PRId64 " bodies x %" PRId64 " points on %d rank(s), seed %" PRIu64 "\n",
                args.shapes, args.points, ranks, args.seed);
    std::printf("models: field '%s', drag '%s'\n", args.seg_model.c_str(), args.cls_model.c_str());
    std::printf("body  a     b     c     bump  attack | D exact  D model  D from field  D from exact field (m^2)\n");
    double drag_err2 = 0.0, drag_rel = 0.0;
    for (std::int64_t s = 0; s < args.shapes; ++s) {
      const Shape& b = shapes[static_cast<std::size_t>(s)];
      const double d_exact = sequoia_shapes::drag_area(b), d_model = per_body[static_cast<std::size_t>(s) * width];
      std::printf("%4" PRId64 "  %.3f %.3f %.3f %.3f %6.2f | %.5f  %.5f  %.5f       %.5f\n", s, b.axes[0], b.axes[1],
                  b.axes[2], b.bump, b.attack_deg, d_exact, d_model, sums[static_cast<std::size_t>(3 + 2 * s)],
                  sums[static_cast<std::size_t>(4 + 2 * s)]);
      drag_err2 += (d_model - d_exact) * (d_model - d_exact);
      drag_rel = std::max(drag_rel, std::abs(d_model - d_exact) / std::abs(d_exact));
    }
    std::printf("drag model error: rms %.5f m^2, largest relative %.4f\n",
                std::sqrt(drag_err2 / static_cast<double>(args.shapes)), drag_rel);
    std::printf("cp error vs closed form: rms %.5f max %.5f relative L2 %.5f\n", std::sqrt(sums[0] / sums[2]), worst,
                std::sqrt(sums[0] / sums[1]));
    std::printf("field digest: %016" PRIx64 ", drag digest: %016" PRIx64 "\n", fnv1a(all_predicted), fnv1a(per_body));
    std::printf("set_points %.3f s (both models), field %.3f s, drag %.3f s (slowest rank)\n", set_points_seconds,
                seconds[0], seconds[1]);
    std::printf("VTK: %s\n", vtk_note.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  try {
    status = run(argc, argv);
  } catch (const std::exception& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "sequoia_shapes (rank %d): %s\n", rank, e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
