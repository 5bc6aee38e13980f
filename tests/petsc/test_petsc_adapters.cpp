// PETSc Vec adapters (surrogate/petsc.h), run by ctest at 1, 2 and 3 ranks with the golden model
// tests/data/flare/default/model.h5 (2 input channels, 1 output):
//  - the Vec path gives bitwise the predictions of the array path (surrogate_predict_f64 on the same
//    handle and points), for the interlaced layout and for one Vec per channel (separate Vecs, which
//    are gathered, and Vecs over one allocation, which are passed as a strided view), under several
//    ownership distributions (even, uneven, a rank without points, all points on the last rank);
//  - in reproducible mode every distribution gives bitwise the single-process predictions of the rows
//    it owns (the ownership range decides which points a rank owns);
//  - errors (wrong block size, a wrong local size on one rank, wrong Vec counts, NaN inputs, predict
//    before set points, bad options) are PETSc errors with the same code and message on every rank;
//  - the options database: -surrogate_model (with and without prefix), -surrogate_vtk, -surrogate_threads,
//    -surrogate_device; the SurrogatePredict log event counts the predictions.
#include <gtest/gtest.h>
#include <petscvec.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "petsc_test_support.hpp"
#include "surrogate/petsc.h"

#ifndef SURROGATE_HAVE_PETSC
#error "surrogate::coupling must define SURROGATE_HAVE_PETSC when it is built with the PETSc adapters"
#endif

namespace {

using namespace petsc_test;

constexpr PetscInt N = 97;  // global points
// PETSC_COMM_WORLD is set by PetscInitialize (after static initialisation): read it when used.
MPI_Comm world() { return PETSC_COMM_WORLD; }

std::string model_path() { return std::string(SURROGATE_TEST_DATA_DIR) + "/flare/default/model.h5"; }

int rank() {
  int r = 0;
  MPI_Comm_rank(world(), &r);
  return r;
}
int size() {
  int s = 1;
  MPI_Comm_size(world(), &s);
  return s;
}

// The same global data on every rank: coordinates in [0, 1]^2 and two input channels.
struct Data {
  std::vector<double> coords, features;
  Data() : coords(2 * N), features(2 * N) {
    std::mt19937_64 gen(2024);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (PetscInt i = 0; i < N; ++i) {
      coords[static_cast<std::size_t>(2 * i)] = u(gen);
      coords[static_cast<std::size_t>(2 * i + 1)] = u(gen);
      features[static_cast<std::size_t>(2 * i)] = 2.0 * coords[static_cast<std::size_t>(2 * i)] - 1.0;
      features[static_cast<std::size_t>(2 * i + 1)] = std::sin(6.0 * coords[static_cast<std::size_t>(2 * i + 1)]);
    }
  }
};
const Data& data() {
  static const Data d;
  return d;
}

// Points per rank for a named distribution (PETSc ownership ranges are contiguous).
std::vector<PetscInt> counts(const std::string& dist, int p) {
  std::vector<PetscInt> c(static_cast<std::size_t>(p), 0);
  if (dist == "even") {
    for (int r = 0; r < p; ++r) c[static_cast<std::size_t>(r)] = N * (r + 1) / p - N * r / p;
  } else if (dist == "uneven") {  // weights 1, 4, 9, ...
    PetscInt total = 0, given = 0;
    for (int r = 0; r < p; ++r) total += (r + 1) * (r + 1);
    for (int r = 0; r + 1 < p; ++r) given += c[static_cast<std::size_t>(r)] = N * (r + 1) * (r + 1) / total;
    c[static_cast<std::size_t>(p - 1)] = N - given;
  } else if (dist == "empty_rank") {  // rank 1 owns nothing (at one rank: everything on rank 0)
    const int owners = p > 1 ? p - 1 : 1;
    int k = 0;
    for (int r = 0; r < p; ++r) {
      if (p > 1 && r == 1) continue;
      c[static_cast<std::size_t>(r)] = N * (k + 1) / owners - N * k / owners;
      ++k;
    }
  } else {  // last_rank
    c[static_cast<std::size_t>(p - 1)] = N;
  }
  return c;
}

struct Range {
  PetscInt start = 0, n = 0;
};
Range my_range(const std::string& dist) {
  const auto c = counts(dist, size());
  Range r;
  for (int k = 0; k < rank(); ++k) r.start += c[static_cast<std::size_t>(k)];
  r.n = c[static_cast<std::size_t>(rank())];
  return r;
}

// A Vec with local size n * bs holding rows [start, start + n) of a global n x bs array.
Vec make_vec(const Range& r, PetscInt bs, const double* global, const char* name) {
  Vec v;
  EXPECT_EQ(VecCreate(world(), &v), 0);
  EXPECT_EQ(VecSetSizes(v, r.n * bs, N * bs), 0);
  EXPECT_EQ(VecSetBlockSize(v, bs), 0);
  EXPECT_EQ(VecSetType(v, VECSTANDARD), 0);
  EXPECT_EQ(PetscObjectSetName(reinterpret_cast<PetscObject>(v), name), 0);
  if (global) {
    PetscScalar* a;
    EXPECT_EQ(VecGetArray(v, &a), 0);
    for (PetscInt i = 0; i < r.n * bs; ++i) a[i] = global[r.start * bs + i];
    EXPECT_EQ(VecRestoreArray(v, &a), 0);
  } else {
    EXPECT_EQ(VecSet(v, -1.0), 0);
  }
  return v;
}

surrogate_t open_model(bool reproducible, MPI_Comm comm = world()) {
  surrogate_options o;
  surrogate_options_default(&o);
  o.reproducible = reproducible ? 1 : 0;
  o.threads = 1;
  surrogate_t s = nullptr;
  EXPECT_EQ(surrogate_open(comm, model_path().c_str(), &o, &s), SURROGATE_OK) << surrogate_last_error();
  return s;
}

int predict_events() {
  PetscLogEvent event;
  PetscEventPerfInfo info;
  EXPECT_EQ(PetscLogEventGetId("SurrogatePredict", &event), 0);
  EXPECT_EQ(PetscLogEventGetPerfInfo(0, event, &info), 0);  // stage 0: the main stage
  return info.count;
}

// ---------------------------------------------------------------------------------------------------

class VecPath : public ::testing::TestWithParam<std::string> {};

TEST_P(VecPath, MatchesTheArrayPathBitwise) {
  const Range r = my_range(GetParam());
  const Data& d = data();
  surrogate_t s = open_model(false);
  ASSERT_NE(s, nullptr);
  Vec X = make_vec(r, 2, d.coords.data(), "coords");
  ASSERT_EQ(SurrogateSetPointsVec(s, X), 0);

  // Array path: C order, the same handle and points.
  std::vector<double> in(d.features.begin() + 2 * r.start, d.features.begin() + 2 * (r.start + r.n));
  std::vector<double> expected(static_cast<std::size_t>(r.n), -2.0);
  ASSERT_EQ(surrogate_predict_f64(s, in.data(), 2, 1, expected.data(), 1, 1), SURROGATE_OK) << surrogate_last_error();

  // Interlaced: block size 2 in, 1 out.
  const int events = predict_events();
  Vec IN = make_vec(r, 2, d.features.data(), "features"), OUT = make_vec(r, 1, nullptr, "prediction");
  ASSERT_EQ(SurrogatePredictVec(s, IN, OUT), 0);
  EXPECT_TRUE(bitwise_equal(values(OUT), expected)) << "interlaced";
  EXPECT_EQ(predict_events(), events + 1) << "the SurrogatePredict log event counts each prediction";

  // One Vec per channel, separately allocated (gathered into one buffer).
  std::vector<double> ch0(static_cast<std::size_t>(N)), ch1(static_cast<std::size_t>(N));
  for (PetscInt i = 0; i < N; ++i) {
    ch0[static_cast<std::size_t>(i)] = d.features[static_cast<std::size_t>(2 * i)];
    ch1[static_cast<std::size_t>(i)] = d.features[static_cast<std::size_t>(2 * i + 1)];
  }
  Vec F[2] = {make_vec(r, 1, ch0.data(), "in0"), make_vec(r, 1, ch1.data(), "in1")};
  Vec P = make_vec(r, 1, nullptr, "out0");
  ASSERT_EQ(SurrogatePredictVecs(s, 2, F, 1, &P), 0);
  EXPECT_TRUE(bitwise_equal(values(P), expected)) << "separate per-channel Vecs";

  // One Vec per channel over one allocation (a strided view, no copy).
  std::vector<double> block(static_cast<std::size_t>(2 * r.n + 1));
  for (PetscInt i = 0; i < r.n; ++i) {
    block[static_cast<std::size_t>(i)] = ch0[static_cast<std::size_t>(r.start + i)];
    block[static_cast<std::size_t>(r.n + i)] = ch1[static_cast<std::size_t>(r.start + i)];
  }
  Vec G[2];
  ASSERT_EQ(VecCreateMPIWithArray(world(), 1, r.n, N, block.data(), &G[0]), 0);
  ASSERT_EQ(VecCreateMPIWithArray(world(), 1, r.n, N, block.data() + r.n, &G[1]), 0);
  ASSERT_EQ(VecSet(P, -1.0), 0);
  ASSERT_EQ(SurrogatePredictVecs(s, 2, G, 1, &P), 0);
  EXPECT_TRUE(bitwise_equal(values(P), expected)) << "per-channel Vecs over one allocation";

  for (Vec* v : {&X, &IN, &OUT, &F[0], &F[1], &P, &G[0], &G[1]}) VecDestroy(v);
  EXPECT_EQ(SurrogateDestroy(&s), 0);
  EXPECT_EQ(s, nullptr);
}

TEST_P(VecPath, ReproducibleModeGivesTheSingleProcessRowsBitwise) {
  const Range r = my_range(GetParam());
  const Data& d = data();
  // Reference: every point on this process alone.
  surrogate_t self = open_model(true, PETSC_COMM_SELF);
  ASSERT_NE(self, nullptr);
  std::vector<double> all(static_cast<std::size_t>(N));
  ASSERT_EQ(surrogate_set_points_f64(self, N, 2, d.coords.data(), 2, 1, nullptr, nullptr), SURROGATE_OK);
  ASSERT_EQ(surrogate_predict_f64(self, d.features.data(), 2, 1, all.data(), 1, 1), SURROGATE_OK);
  ASSERT_EQ(SurrogateDestroy(&self), 0);

  surrogate_t s = open_model(true);
  Vec X = make_vec(r, 2, d.coords.data(), "coords"), IN = make_vec(r, 2, d.features.data(), "features");
  Vec OUT = make_vec(r, 1, nullptr, "prediction");
  ASSERT_EQ(SurrogateSetPointsVec(s, X), 0);
  ASSERT_EQ(SurrogatePredictVec(s, IN, OUT), 0);
  const std::vector<double> mine(all.begin() + r.start, all.begin() + r.start + r.n);
  EXPECT_TRUE(bitwise_equal(values(OUT), mine));
  for (Vec* v : {&X, &IN, &OUT}) VecDestroy(v);
  EXPECT_EQ(SurrogateDestroy(&s), 0);
}

INSTANTIATE_TEST_SUITE_P(Distributions, VecPath, ::testing::Values("even", "uneven", "empty_rank", "last_rank"),
                         [](const auto& param_info) { return param_info.param; });

// ---------------------------------------------------------------------------------------------------

class Errors : public ::testing::Test {
 protected:
  void SetUp() override {
    r = my_range("uneven");
    s = open_model(false);
    ASSERT_NE(s, nullptr);
    X = make_vec(r, 2, data().coords.data(), "coords");
    IN = make_vec(r, 2, data().features.data(), "features");
    OUT = make_vec(r, 1, nullptr, "prediction");
    ASSERT_EQ(SurrogateSetPointsVec(s, X), 0);
  }
  void TearDown() override {
    // The handle still works after every caught error.
    EXPECT_EQ(SurrogatePredictVec(s, IN, OUT), 0);
    for (Vec* v : {&X, &IN, &OUT}) VecDestroy(v);
    EXPECT_EQ(SurrogateDestroy(&s), 0);
  }
  Range r;
  surrogate_t s = nullptr;
  Vec X = nullptr, IN = nullptr, OUT = nullptr;
};

TEST_F(Errors, WrongBlockSizeIsTheSamePetscErrorOnEveryRank) {
  std::vector<double> three(static_cast<std::size_t>(3 * N), 0.5);
  Vec bad = make_vec(r, 3, three.data(), "three_channels");
  const PetscErrorCode code = caught([&] { return SurrogatePredictVec(s, bad, OUT); });
  EXPECT_EQ(code, PETSC_ERR_ARG_SIZ);
  const std::string message = petsc_message(code);
  EXPECT_NE(message.find("surrogate: SurrogatePredictVec: input Vec 'three_channels' has block size 3, expected 2"),
            std::string::npos)
      << message;
  VecDestroy(&bad);

  Vec two_out = make_vec(r, 2, three.data(), "two_outputs");
  EXPECT_EQ(caught([&] { return SurrogatePredictVec(s, IN, two_out); }), PETSC_ERR_ARG_SIZ);
  EXPECT_NE(petsc_message(PETSC_ERR_ARG_SIZ).find("output Vec 'two_outputs' has block size 2, expected 1"), std::string::npos)
      << petsc_message(PETSC_ERR_ARG_SIZ);
  VecDestroy(&two_out);
}

TEST_F(Errors, WrongLocalSizeOnOneRankIsAnErrorOnEveryRank) {
  // The last rank holds one point too many; the others are right.
  Range wrong = r;
  const int last = size() - 1;
  if (rank() == last) wrong.n += 1;
  std::vector<double> big(static_cast<std::size_t>(2 * (N + 1)), 0.25);
  Vec bad;
  ASSERT_EQ(VecCreate(world(), &bad), 0);
  ASSERT_EQ(VecSetSizes(bad, 2 * wrong.n, PETSC_DETERMINE), 0);
  ASSERT_EQ(VecSetBlockSize(bad, 2), 0);
  ASSERT_EQ(VecSetType(bad, VECSTANDARD), 0);
  ASSERT_EQ(PetscObjectSetName(reinterpret_cast<PetscObject>(bad), "too_long"), 0);
  ASSERT_EQ(VecSet(bad, 0.25), 0);
  const PetscErrorCode code = caught([&] { return SurrogatePredictVec(s, bad, OUT); });
  EXPECT_EQ(code, PETSC_ERR_ARG_SIZ);
  const std::string expected = "input Vec 'too_long' has local size " + std::to_string(2 * (counts("uneven", size())[last] + 1)) +
                               " on rank " + std::to_string(last) + ", expected " +
                               std::to_string(2 * counts("uneven", size())[last]) + " (" +
                               std::to_string(counts("uneven", size())[last]) + " points x 2 input channels)";
  EXPECT_NE(petsc_message(code).find(expected), std::string::npos) << petsc_message(code) << "\nexpected: " << expected;

  // The same for one Vec per channel.
  Vec one;
  ASSERT_EQ(VecCreateMPI(world(), wrong.n, PETSC_DETERMINE, &one), 0);
  ASSERT_EQ(PetscObjectSetName(reinterpret_cast<PetscObject>(one), "channel1"), 0);
  ASSERT_EQ(VecSet(one, 0.5), 0);
  Vec good;
  ASSERT_EQ(VecCreateMPI(world(), r.n, N, &good), 0);
  ASSERT_EQ(VecSet(good, 0.5), 0);
  Vec ins[2] = {good, one};
  EXPECT_EQ(caught([&] { return SurrogatePredictVecs(s, 2, ins, 1, &OUT); }), PETSC_ERR_ARG_SIZ);
  EXPECT_NE(petsc_message(PETSC_ERR_ARG_SIZ).find("in[1] (Vec 'channel1') has local size " +
                                                  std::to_string(counts("uneven", size())[last] + 1) + " on rank " +
                                                  std::to_string(last)),
            std::string::npos)
      << petsc_message(PETSC_ERR_ARG_SIZ);
  for (Vec* v : {&bad, &one, &good}) VecDestroy(v);
}

TEST_F(Errors, WrongVecCountsAndAliasing) {
  Vec good;
  ASSERT_EQ(VecCreateMPI(world(), r.n, N, &good), 0);
  ASSERT_EQ(VecSet(good, 0.5), 0);
  EXPECT_EQ(caught([&] { return SurrogatePredictVecs(s, 1, &good, 1, &OUT); }), PETSC_ERR_ARG_SIZ);
  EXPECT_NE(petsc_message(PETSC_ERR_ARG_SIZ).find("1 input Vecs, expected 2"), std::string::npos);
  Vec ins[2] = {good, OUT};
  EXPECT_EQ(caught([&] { return SurrogatePredictVecs(s, 2, ins, 1, &OUT); }), PETSC_ERR_ARG_IDN);
  EXPECT_EQ(caught([&] { return SurrogatePredictVec(s, IN, IN); }), PETSC_ERR_ARG_IDN);
  VecDestroy(&good);
}

TEST_F(Errors, NanInputsOnOneRankAreTheSameLibraryErrorOnEveryRank) {
  // A NaN on the last rank that owns points (rank 0 if every rank is empty but one).
  const auto c = counts("uneven", size());
  int owner = 0;
  for (int k = 0; k < size(); ++k)
    if (c[static_cast<std::size_t>(k)] > 0) owner = k;
  Vec nan_in;
  ASSERT_EQ(VecDuplicate(IN, &nan_in), 0);
  ASSERT_EQ(VecCopy(IN, nan_in), 0);
  if (rank() == owner) {
    PetscScalar* a;
    ASSERT_EQ(VecGetArray(nan_in, &a), 0);
    a[1] = std::nan("");
    ASSERT_EQ(VecRestoreArray(nan_in, &a), 0);
  }
  const PetscErrorCode code = caught([&] { return SurrogatePredictVec(s, nan_in, OUT); });
  EXPECT_EQ(code, PETSC_ERR_LIB);
  const std::string message = petsc_message(code);
  EXPECT_EQ(message.rfind("surrogate: ", 0), 0u) << message;
  if (size() > 1) {  // one rank: the library does not name it
    EXPECT_NE(message.find("rank " + std::to_string(owner)), std::string::npos) << message;
  }
  EXPECT_NE(message.find("NaN"), std::string::npos) << message;
  // The same message on every rank.
  std::vector<char> mine(512, '\0'), root(512, '\0');
  std::strncpy(mine.data(), message.c_str(), mine.size() - 1);
  root = mine;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_CHAR, 0, world());
  EXPECT_STREQ(mine.data(), root.data());
  VecDestroy(&nan_in);
}

TEST(ErrorsBeforePoints, PredictBeforeSetPointsIsAnOrderError) {
  surrogate_t s = open_model(false);
  const Range r = my_range("even");
  Vec IN = make_vec(r, 2, data().features.data(), "features"), OUT = make_vec(r, 1, nullptr, "prediction");
  EXPECT_EQ(caught([&] { return SurrogatePredictVec(s, IN, OUT); }), PETSC_ERR_ORDER);
  EXPECT_NE(petsc_message(PETSC_ERR_ORDER).find("call SurrogateSetPointsVec"), std::string::npos);
  EXPECT_EQ(caught([&] { return SurrogatePredictVec(nullptr, IN, OUT); }), PETSC_ERR_ARG_NULL);
  for (Vec* v : {&IN, &OUT}) VecDestroy(v);
  EXPECT_EQ(SurrogateDestroy(&s), 0);
  EXPECT_EQ(SurrogateDestroy(&s), 0);  // a NULL handle: nothing to do
}

// ---------------------------------------------------------------------------------------------------

TEST(Options, ModelAndVtkDirectoryFromTheOptionsDatabase) {
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_model", model_path().c_str()), 0);
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_vtk", "vtk_out"), 0);
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_threads", "1"), 0);
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_reproducible", "true"), 0);
  surrogate_t s = nullptr;
  ASSERT_EQ(SurrogateCreateFromOptions(world(), nullptr, &s), 0);
  ASSERT_NE(s, nullptr);
  const char* dir = nullptr;
  EXPECT_EQ(SurrogateGetVTKDirectory(s, &dir), 0);
  ASSERT_NE(dir, nullptr);
  EXPECT_STREQ(dir, "vtk_out");
  int cin = 0;
  EXPECT_EQ(surrogate_in_channels(s, &cin), SURROGATE_OK);
  EXPECT_EQ(cin, 2);

  // It predicts like a handle opened directly in reproducible mode.
  const Range r = my_range("uneven");
  Vec X = make_vec(r, 2, data().coords.data(), "coords"), IN = make_vec(r, 2, data().features.data(), "features");
  Vec OUT = make_vec(r, 1, nullptr, "prediction"), REF = make_vec(r, 1, nullptr, "reference");
  ASSERT_EQ(SurrogateSetPointsVec(s, X), 0);
  ASSERT_EQ(SurrogatePredictVec(s, IN, OUT), 0);
  surrogate_t direct = open_model(true);
  ASSERT_EQ(SurrogateSetPointsVec(direct, X), 0);
  ASSERT_EQ(SurrogatePredictVec(direct, IN, REF), 0);
  EXPECT_TRUE(bitwise_equal(values(OUT), values(REF)));
  const char* none = "unset";
  EXPECT_EQ(SurrogateGetVTKDirectory(direct, &none), 0);
  EXPECT_EQ(none, nullptr) << "a handle opened with surrogate_open has no VTK directory";
  EXPECT_EQ(SurrogateDestroy(&direct), 0);
  EXPECT_EQ(SurrogateDestroy(&s), 0);
  for (Vec* v : {&X, &IN, &OUT, &REF}) VecDestroy(v);
  for (const char* key : {"-surrogate_model", "-surrogate_vtk", "-surrogate_threads", "-surrogate_reproducible"})
    ASSERT_EQ(PetscOptionsClearValue(nullptr, key), 0);
}

// -surrogate_vtk_format: stored with the handle, used to open the series; a bad value on one rank is the
// same error on every rank.
TEST(Options, VtkFormatFromTheOptionsDatabase) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world(), &rank);
  MPI_Comm_size(world(), &size);
  const std::string dir = "vtkhdf_options_np" + std::to_string(size);
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_model", model_path().c_str()), 0);
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_vtk", dir.c_str()), 0);
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_vtk_format", "vtkhdf"), 0);
  surrogate_t s = nullptr;
  ASSERT_EQ(SurrogateCreateFromOptions(world(), nullptr, &s), 0);
  int format = -1;
  EXPECT_EQ(SurrogateGetVTKFormat(s, &format), 0);
  EXPECT_EQ(format, SURROGATE_VTK_FORMAT_VTKHDF);
  const char* directory = nullptr;
  ASSERT_EQ(SurrogateGetVTKDirectory(s, &directory), 0);

  const Range r = my_range("uneven");
  Vec X = make_vec(r, 2, data().coords.data(), "coords");
  ASSERT_EQ(SurrogateSetPointsVec(s, X), 0);
  surrogate_vtk_t vtk = nullptr;
  ASSERT_EQ(surrogate_vtk_open_format(world(), directory, "petsc", format, &vtk), SURROGATE_OK) << surrogate_last_error();
  int step = -1;
  EXPECT_EQ(surrogate_vtk_write_points_of(vtk, 0.0, s, &step), SURROGATE_OK) << surrogate_last_error();
  EXPECT_EQ(step, 0);
  const char* series = nullptr;
  EXPECT_EQ(surrogate_vtk_series_path(vtk, &series), SURROGATE_OK);
  EXPECT_EQ(std::string(series), dir + "/petsc.hdf.series");
  EXPECT_EQ(surrogate_vtk_close(&vtk), SURROGATE_OK);
  if (rank == 0) {
    EXPECT_EQ(access((dir + "/petsc_000000.hdf").c_str(), F_OK), 0) << "the step file";
  }
  EXPECT_EQ(SurrogateDestroy(&s), 0);
  VecDestroy(&X);

  // Unset: vtu. A value other than vtu or vtkhdf on the last rank: an error on every rank.
  ASSERT_EQ(PetscOptionsClearValue(nullptr, "-surrogate_vtk_format"), 0);
  ASSERT_EQ(SurrogateCreateFromOptions(world(), nullptr, &s), 0);
  EXPECT_EQ(SurrogateGetVTKFormat(s, &format), 0);
  EXPECT_EQ(format, SURROGATE_VTK_FORMAT_VTU);
  EXPECT_EQ(SurrogateDestroy(&s), 0);
  if (rank == size - 1) {
    ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_vtk_format", "xml"), 0);
  }
  EXPECT_EQ(caught([&] { return SurrogateCreateFromOptions(world(), nullptr, &s); }), PETSC_ERR_ARG_WRONG);
  EXPECT_NE(petsc_message(PETSC_ERR_ARG_WRONG).find("-surrogate_vtk_format must be vtu or vtkhdf"), std::string::npos)
      << petsc_message(PETSC_ERR_ARG_WRONG);
  EXPECT_EQ(s, nullptr);
  for (const char* key : {"-surrogate_model", "-surrogate_vtk", "-surrogate_vtk_format"})
    ASSERT_EQ(PetscOptionsClearValue(nullptr, key), 0);
}

TEST(Options, AllowNonFiniteOutputReachesThePredict) {
  // Inputs finite but far outside the training range overflow the network: by default the predict is the
  // library's error on every rank; with the key the predictions come back as they are.
  const Range r = my_range("uneven");
  std::vector<double> huge(data().features.size(), 3.0e38);
  Vec X = make_vec(r, 2, data().coords.data(), "coords"), IN = make_vec(r, 2, huge.data(), "features");
  Vec OUT = make_vec(r, 1, nullptr, "prediction");
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_model", model_path().c_str()), 0);
  surrogate_t s = nullptr;
  ASSERT_EQ(SurrogateCreateFromOptions(world(), nullptr, &s), 0);
  ASSERT_EQ(SurrogateSetPointsVec(s, X), 0);
  EXPECT_EQ(caught([&] { return SurrogatePredictVec(s, IN, OUT); }), PETSC_ERR_LIB);
  EXPECT_NE(petsc_message(PETSC_ERR_LIB).find("non-finite predictions"), std::string::npos)
      << petsc_message(PETSC_ERR_LIB);
  EXPECT_EQ(SurrogateDestroy(&s), 0);

  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_allow_non_finite_output", "true"), 0);
  ASSERT_EQ(SurrogateCreateFromOptions(world(), nullptr, &s), 0);
  ASSERT_EQ(SurrogateSetPointsVec(s, X), 0);
  ASSERT_EQ(SurrogatePredictVec(s, IN, OUT), 0);
  int local_non_finite = 0, non_finite = 0;
  for (const PetscScalar v : values(OUT)) local_non_finite += std::isfinite(PetscRealPart(v)) ? 0 : 1;
  MPI_Allreduce(&local_non_finite, &non_finite, 1, MPI_INT, MPI_SUM, world());
  EXPECT_GT(non_finite, 0);
  EXPECT_EQ(SurrogateDestroy(&s), 0);
  for (Vec* v : {&X, &IN, &OUT}) VecDestroy(v);
  for (const char* key : {"-surrogate_model", "-surrogate_allow_non_finite_output"})
    ASSERT_EQ(PetscOptionsClearValue(nullptr, key), 0);
}

TEST(Options, PrefixMissingModelBadFileBadDevice) {
  surrogate_t s = nullptr;
  // Prefixed keys.
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-heat_surrogate_model", model_path().c_str()), 0);
  ASSERT_EQ(SurrogateCreateFromOptions(world(), "heat_", &s), 0);
  const char* dir = "unset";
  EXPECT_EQ(SurrogateGetVTKDirectory(s, &dir), 0);
  EXPECT_EQ(dir, nullptr);
  EXPECT_EQ(SurrogateDestroy(&s), 0);
  ASSERT_EQ(PetscOptionsClearValue(nullptr, "-heat_surrogate_model"), 0);

  // No model: a user-input error naming the (prefixed) key.
  EXPECT_EQ(caught([&] { return SurrogateCreateFromOptions(world(), "heat_", &s); }), PETSC_ERR_USER_INPUT);
  EXPECT_NE(petsc_message(PETSC_ERR_USER_INPUT).find("-heat_surrogate_model <file>"), std::string::npos)
      << petsc_message(PETSC_ERR_USER_INPUT);
  EXPECT_EQ(s, nullptr);

  // A missing file: the library's message, on every rank.
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_model", "no/such/model.h5"), 0);
  EXPECT_EQ(caught([&] { return SurrogateCreateFromOptions(world(), nullptr, &s); }), PETSC_ERR_LIB);
  EXPECT_NE(petsc_message(PETSC_ERR_LIB).find("surrogate: "), std::string::npos);
  EXPECT_NE(petsc_message(PETSC_ERR_LIB).find("does not exist"), std::string::npos) << petsc_message(PETSC_ERR_LIB);
  EXPECT_EQ(s, nullptr);

  // An unknown device.
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_model", model_path().c_str()), 0);
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-surrogate_device", "tpu"), 0);
  EXPECT_EQ(caught([&] { return SurrogateCreateFromOptions(world(), nullptr, &s); }), PETSC_ERR_LIB);
  EXPECT_NE(petsc_message(PETSC_ERR_LIB).find("unknown device 'tpu'"), std::string::npos) << petsc_message(PETSC_ERR_LIB);
  EXPECT_EQ(s, nullptr);
  ASSERT_EQ(PetscOptionsClearValue(nullptr, "-surrogate_model"), 0);
  ASSERT_EQ(PetscOptionsClearValue(nullptr, "-surrogate_device"), 0);
}

}  // namespace
