// SurrogateAcceptOrSolve (surrogate/petsc.h) at 1 and 3 ranks on a distributed SPD system with a known
// solution: an exact prediction is accepted untouched, a perturbed one (on one rank only) is rejected on
// every rank and solved, warm-started, to the KSP tolerance; non-finite predictions, the options key
// -surrogate_accept_rtol, PETSC_DEFAULT and the agreed errors (tolerances that differ across ranks).
#include <gtest/gtest.h>
#include <petscksp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "petsc_test_support.hpp"
#include "surrogate/petsc.h"

namespace {

using namespace petsc_test;

constexpr PetscInt N = 200;  // unknowns
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

// The exact solution, a smooth profile.
double exact(PetscInt i) { return std::sin(0.05 * static_cast<double>(i)) + 0.01 * static_cast<double>(i); }

// A = tridiag(-1, 2 + shift, -1) (a backward-Euler heat operator in 1D), uneven rows per rank; x_exact and
// b = A x_exact; a KSP (CG + Jacobi, rtol 1e-10) on A.
struct System {
  Mat A = nullptr;
  Vec x_exact = nullptr, b = nullptr;
  KSP ksp = nullptr;
  System() {
    const int p = size(), r = rank();
    // Rows per rank: weights 1, 2, 3, ... (the last rank gets the remainder).
    PetscInt weight_sum = 0, start = 0, local = 0;
    for (int k = 0; k < p; ++k) weight_sum += k + 1;
    for (int k = 0; k <= r; ++k) {
      local = k + 1 == p ? N - start : N * (k + 1) / weight_sum;
      if (k < r) start += local;
    }
    EXPECT_EQ(MatCreateAIJ(world(), local, local, N, N, 3, nullptr, 2, nullptr, &A), 0);
    for (PetscInt i = start; i < start + local; ++i) {
      EXPECT_EQ(MatSetValue(A, i, i, 2.05, INSERT_VALUES), 0);
      if (i > 0) {
        EXPECT_EQ(MatSetValue(A, i, i - 1, -1.0, INSERT_VALUES), 0);
      }
      if (i + 1 < N) {
        EXPECT_EQ(MatSetValue(A, i, i + 1, -1.0, INSERT_VALUES), 0);
      }
    }
    EXPECT_EQ(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY), 0);
    EXPECT_EQ(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY), 0);
    EXPECT_EQ(MatCreateVecs(A, &x_exact, &b), 0);
    for (PetscInt i = start; i < start + local; ++i) EXPECT_EQ(VecSetValue(x_exact, i, exact(i), INSERT_VALUES), 0);
    EXPECT_EQ(VecAssemblyBegin(x_exact), 0);
    EXPECT_EQ(VecAssemblyEnd(x_exact), 0);
    EXPECT_EQ(MatMult(A, x_exact, b), 0);
    PC pc;
    EXPECT_EQ(KSPCreate(world(), &ksp), 0);
    EXPECT_EQ(KSPSetOperators(ksp, A, A), 0);
    EXPECT_EQ(KSPSetType(ksp, KSPCG), 0);
    EXPECT_EQ(KSPGetPC(ksp, &pc), 0);
    EXPECT_EQ(PCSetType(pc, PCJACOBI), 0);
    EXPECT_EQ(KSPSetTolerances(ksp, 1e-10, PETSC_DEFAULT, PETSC_DEFAULT, 10000), 0);
  }
  ~System() {
    KSPDestroy(&ksp);
    VecDestroy(&x_exact);
    VecDestroy(&b);
    MatDestroy(&A);
  }
  // A copy of x_exact; the last rank adds `delta` to its first row (a rank-local defect).
  Vec prediction(double delta) const {
    Vec x;
    EXPECT_EQ(VecDuplicate(x_exact, &x), 0);
    EXPECT_EQ(VecCopy(x_exact, x), 0);
    PetscInt lo, hi;
    EXPECT_EQ(VecGetOwnershipRange(x, &lo, &hi), 0);
    if (rank() == size() - 1 && hi > lo) {
      PetscScalar* a;
      EXPECT_EQ(VecGetArray(x, &a), 0);
      a[0] += delta;
      EXPECT_EQ(VecRestoreArray(x, &a), 0);
    }
    return x;
  }
  double relative_residual(Vec x) const {
    Vec r;
    PetscReal nr = 0, nb = 0;
    EXPECT_EQ(VecDuplicate(b, &r), 0);
    EXPECT_EQ(MatMult(A, x, r), 0);
    EXPECT_EQ(VecAYPX(r, -1.0, b), 0);
    EXPECT_EQ(VecNorm(r, NORM_2, &nr), 0);
    EXPECT_EQ(VecNorm(b, NORM_2, &nb), 0);
    EXPECT_EQ(VecDestroy(&r), 0);
    return nr / nb;
  }
  double error(Vec x) const {  // max |x - x_exact|
    Vec d;
    PetscReal e = 0;
    EXPECT_EQ(VecDuplicate(x, &d), 0);
    EXPECT_EQ(VecWAXPY(d, -1.0, x_exact, x), 0);
    EXPECT_EQ(VecNorm(d, NORM_INFINITY, &e), 0);
    EXPECT_EQ(VecDestroy(&d), 0);
    return e;
  }
};

surrogate_t open_model() {
  surrogate_options o;
  surrogate_options_default(&o);
  o.threads = 1;
  surrogate_t s = nullptr;
  EXPECT_EQ(surrogate_open(world(), model_path().c_str(), &o, &s), SURROGATE_OK) << surrogate_last_error();
  return s;
}

int solve_events() {
  PetscLogEvent event;
  PetscEventPerfInfo info;
  EXPECT_EQ(PetscLogEventGetId("KSPSolve", &event), 0);
  EXPECT_EQ(PetscLogEventGetPerfInfo(0, event, &info), 0);  // stage 0: the main stage
  return info.count;
}

TEST(AcceptOrSolve, AnExactPredictionIsAcceptedUntouched) {
  System sys;
  surrogate_t s = open_model();
  Vec x = sys.prediction(0.0);
  const std::vector<double> before = values(x);
  const int solves = solve_events();
  PetscBool accepted = PETSC_FALSE;
  PetscReal residual = -1;
  ASSERT_EQ(SurrogateAcceptOrSolve(s, sys.ksp, sys.b, x, 1e-8, &accepted, &residual), 0);
  EXPECT_TRUE(accepted);
  EXPECT_LT(residual, 1e-14);
  EXPECT_TRUE(agreed(residual));
  EXPECT_TRUE(bitwise_equal(values(x), before)) << "an accepted prediction is left as it is";
  EXPECT_EQ(solve_events(), solves) << "no KSPSolve for an accepted prediction";
  VecDestroy(&x);
  surrogate_close(&s);
}

TEST(AcceptOrSolve, APerturbedPredictionIsRejectedEverywhereAndSolvedWarmStarted) {
  System sys;
  surrogate_t s = open_model();
  // Iterations from a zero guess, for comparison.
  Vec zero;
  PetscInt its_zero = 0, its = 0;
  ASSERT_EQ(VecDuplicate(sys.b, &zero), 0);
  ASSERT_EQ(KSPSolve(sys.ksp, sys.b, zero), 0);
  ASSERT_EQ(KSPGetIterationNumber(sys.ksp, &its_zero), 0);

  Vec x = sys.prediction(1e-3);  // defect on the last rank only
  const double predicted_residual = sys.relative_residual(x);
  ASSERT_GT(predicted_residual, 1e-6);
  const int solves = solve_events();
  PetscBool accepted = PETSC_TRUE, nonzero = PETSC_TRUE;
  PetscReal residual = -1;
  ASSERT_EQ(SurrogateAcceptOrSolve(s, sys.ksp, sys.b, x, 1e-6, &accepted, &residual), 0);
  EXPECT_FALSE(accepted);
  EXPECT_TRUE(agreed(static_cast<int>(accepted)));
  EXPECT_DOUBLE_EQ(residual, predicted_residual) << "the residual of the prediction, not of the solution";
  EXPECT_EQ(solve_events(), solves + 1);
  ASSERT_EQ(KSPGetIterationNumber(sys.ksp, &its), 0);
  EXPECT_LT(its, its_zero) << "the solve starts from the prediction";
  EXPECT_LT(sys.relative_residual(x), 1e-9) << "solved to the KSP's tolerance (rtol 1e-10, preconditioned norm)";
  EXPECT_LT(sys.error(x), 1e-7);
  ASSERT_EQ(KSPGetInitialGuessNonzero(sys.ksp, &nonzero), 0);
  EXPECT_FALSE(nonzero) << "the KSP's initial-guess setting is restored";

  // The same defect under a looser tolerance is accepted on every rank, untouched.
  Vec y = sys.prediction(1e-3);
  const std::vector<double> before = values(y);
  ASSERT_EQ(SurrogateAcceptOrSolve(s, sys.ksp, sys.b, y, 1e-2, &accepted, nullptr), 0);
  EXPECT_TRUE(accepted);
  EXPECT_TRUE(bitwise_equal(values(y), before));
  VecDestroy(&zero);
  VecDestroy(&x);
  VecDestroy(&y);
  surrogate_close(&s);
}

TEST(AcceptOrSolve, ANonFinitePredictionIsSolvedFromZero) {
  System sys;
  surrogate_t s = open_model();
  Vec x = sys.prediction(std::numeric_limits<double>::quiet_NaN());
  PetscBool accepted = PETSC_TRUE;
  PetscReal residual = 0;
  ASSERT_EQ(SurrogateAcceptOrSolve(s, sys.ksp, sys.b, x, 1e30, &accepted, &residual), 0);
  EXPECT_FALSE(accepted);
  EXPECT_TRUE(std::isnan(static_cast<double>(residual)));
  EXPECT_LT(sys.relative_residual(x), 1e-9);
  VecDestroy(&x);
  surrogate_close(&s);
}

TEST(AcceptOrSolve, ToleranceFromTheOptionsKeyAndPetscDefault) {
  System sys;
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-heat_surrogate_model", model_path().c_str()), 0);
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-heat_surrogate_accept_rtol", "2.5e-2"), 0);
  surrogate_t s = nullptr;
  ASSERT_EQ(SurrogateCreateFromOptions(world(), "heat_", &s), 0);
  PetscReal rtol = 0;
  ASSERT_EQ(SurrogateGetAcceptTolerance(s, &rtol), 0);
  EXPECT_EQ(rtol, 2.5e-2);
  // The defect's residual lies between 1e-6 and 2.5e-2: accepted with the key's tolerance ...
  PetscBool accepted = PETSC_FALSE;
  Vec x = sys.prediction(1e-3);
  ASSERT_EQ(SurrogateAcceptOrSolve(s, sys.ksp, sys.b, x, PETSC_DEFAULT, &accepted, nullptr), 0);
  EXPECT_TRUE(accepted);
  // ... and rejected after SurrogateSetAcceptTolerance.
  ASSERT_EQ(SurrogateSetAcceptTolerance(s, 1e-6), 0);
  ASSERT_EQ(SurrogateGetAcceptTolerance(s, &rtol), 0);
  EXPECT_EQ(rtol, 1e-6);
  ASSERT_EQ(SurrogateAcceptOrSolve(s, sys.ksp, sys.b, x, PETSC_DEFAULT, &accepted, nullptr), 0);
  EXPECT_FALSE(accepted);
  ASSERT_EQ(SurrogateDestroy(&s), 0);
  // Without the key: 0, only an exact prediction is accepted.
  ASSERT_EQ(PetscOptionsClearValue(nullptr, "-heat_surrogate_accept_rtol"), 0);
  ASSERT_EQ(SurrogateCreateFromOptions(world(), "heat_", &s), 0);
  ASSERT_EQ(SurrogateGetAcceptTolerance(s, &rtol), 0);
  EXPECT_EQ(rtol, 0.0);
  ASSERT_EQ(SurrogateDestroy(&s), 0);
  // A negative key is an agreed error at creation.
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-heat_surrogate_accept_rtol", "-1"), 0);
  const PetscErrorCode code = caught([&] { return SurrogateCreateFromOptions(world(), "heat_", &s); });
  EXPECT_EQ(code, PETSC_ERR_ARG_OUTOFRANGE);
  EXPECT_NE(petsc_message(code).find("-heat_surrogate_accept_rtol"), std::string::npos) << petsc_message(code);
  EXPECT_EQ(s, nullptr);
  ASSERT_EQ(PetscOptionsClearValue(nullptr, "-heat_surrogate_accept_rtol"), 0);
  ASSERT_EQ(PetscOptionsClearValue(nullptr, "-heat_surrogate_model"), 0);
  VecDestroy(&x);
}

TEST(AcceptOrSolve, ErrorsAreAgreed) {
  System sys;
  surrogate_t s = open_model();
  Vec x = sys.prediction(1e-3);
  const std::vector<double> before = values(x);
  // A tolerance that differs on the last rank: every rank raises the same error, nobody solves alone.
  const double rtol = rank() == size() - 1 && size() > 1 ? 1e-1 : 1e-6;
  PetscErrorCode code = caught([&] { return SurrogateAcceptOrSolve(s, sys.ksp, sys.b, x, rtol, nullptr, nullptr); });
  if (size() > 1) {
    EXPECT_EQ(code, PETSC_ERR_ARG_WRONG);
    EXPECT_NE(petsc_message(code).find("rtol differs across ranks"), std::string::npos) << petsc_message(code);
    EXPECT_TRUE(bitwise_equal(values(x), before));
  } else {
    EXPECT_EQ(code, 0);
  }
  code = caught([&] { return SurrogateAcceptOrSolve(s, sys.ksp, sys.b, x, -1.0, nullptr, nullptr); });
  EXPECT_EQ(code, PETSC_ERR_ARG_OUTOFRANGE);
  code = caught([&] { return SurrogateAcceptOrSolve(s, sys.ksp, sys.b, sys.b, 1e-3, nullptr, nullptr); });
  EXPECT_EQ(code, PETSC_ERR_ARG_IDN);
  KSP bare;
  ASSERT_EQ(KSPCreate(world(), &bare), 0);
  code = caught([&] { return SurrogateAcceptOrSolve(s, bare, sys.b, x, 1e-3, nullptr, nullptr); });
  EXPECT_EQ(code, PETSC_ERR_ORDER);
  KSPDestroy(&bare);
  VecDestroy(&x);
  surrogate_close(&s);
}

}  // namespace
