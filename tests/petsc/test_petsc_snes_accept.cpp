// SurrogateSNESAcceptOrSolve (surrogate/petsc.h) at 1, 2 and 3 ranks on a distributed nonlinear system with
// a known solution, F(x) = A x + x^3 - (A x* + x*^3): an exact prediction is accepted untouched, a perturbed
// one (on one rank only) is rejected on every rank and Newton starts from it; a right-hand side b, a
// non-finite prediction, the options key -surrogate_accept_atol, PETSC_DEFAULT (the SNES's own atol) and
// the agreed errors.
#include <gtest/gtest.h>
#include <petscsnes.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "petsc_test_support.hpp"
#include "surrogate/petsc.h"

namespace {

using namespace petsc_test;

constexpr PetscInt N = 150;  // unknowns
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

double exact(PetscInt i) { return 1.0 + std::sin(0.07 * static_cast<double>(i)); }

// A = tridiag(-1, 2.1, -1); F(x) = A x + x^3 - g with g = A x* + x*^3, uneven rows per rank (the first
// rank has none when there are three), a SNES (newtonls, GMRES + Jacobi) with atol 1e-10.
struct System {
  Mat A = nullptr, J = nullptr;
  Vec x_exact = nullptr, g = nullptr;
  SNES snes = nullptr;

  // f = A x + x^3
  PetscErrorCode apply(Vec x, Vec f) const {
    PetscFunctionBeginUser;
    PetscCall(MatMult(A, x, f));
    PetscScalar* a;
    const PetscScalar* xa;
    PetscInt n;
    PetscCall(VecGetLocalSize(x, &n));
    PetscCall(VecGetArray(f, &a));
    PetscCall(VecGetArrayRead(x, &xa));
    for (PetscInt i = 0; i < n; ++i) a[i] += xa[i] * xa[i] * xa[i];
    PetscCall(VecRestoreArrayRead(x, &xa));
    PetscCall(VecRestoreArray(f, &a));
    PetscFunctionReturn(0);
  }
  static PetscErrorCode function(SNES, Vec x, Vec f, void* ctx) {
    const System& s = *static_cast<const System*>(ctx);
    PetscFunctionBeginUser;
    PetscCall(s.apply(x, f));
    PetscCall(VecAXPY(f, -1.0, s.g));
    PetscFunctionReturn(0);
  }
  static PetscErrorCode jacobian(SNES, Vec x, Mat jac, Mat, void* ctx) {
    const System& s = *static_cast<const System*>(ctx);
    PetscFunctionBeginUser;
    PetscCall(MatCopy(s.A, jac, SAME_NONZERO_PATTERN));
    Vec d;
    PetscCall(VecDuplicate(x, &d));
    PetscCall(VecPointwiseMult(d, x, x));
    PetscCall(VecScale(d, 3.0));
    PetscCall(MatDiagonalSet(jac, d, ADD_VALUES));
    PetscCall(VecDestroy(&d));
    PetscFunctionReturn(0);
  }

  System() {
    const int p = size(), r = rank();
    PetscInt local = 0, start = 0;
    if (p == 1) local = N;
    else if (p == 3) local = r == 0 ? 0 : (r == 1 ? 40 : N - 40);  // an empty rank, unequal shares
    else local = r + 1 == p ? N - (p - 1) * (N / (2 * p)) : N / (2 * p);
    MPI_Exscan(&local, &start, 1, MPIU_INT, MPI_SUM, world());
    if (r == 0) start = 0;
    EXPECT_EQ(MatCreateAIJ(world(), local, local, N, N, 3, nullptr, 2, nullptr, &A), 0);
    for (PetscInt i = start; i < start + local; ++i) {
      EXPECT_EQ(MatSetValue(A, i, i, 2.1, INSERT_VALUES), 0);
      if (i > 0) {
        EXPECT_EQ(MatSetValue(A, i, i - 1, -1.0, INSERT_VALUES), 0);
      }
      if (i + 1 < N) {
        EXPECT_EQ(MatSetValue(A, i, i + 1, -1.0, INSERT_VALUES), 0);
      }
    }
    EXPECT_EQ(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY), 0);
    EXPECT_EQ(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY), 0);
    EXPECT_EQ(MatDuplicate(A, MAT_COPY_VALUES, &J), 0);
    EXPECT_EQ(MatCreateVecs(A, &x_exact, &g), 0);
    for (PetscInt i = start; i < start + local; ++i) EXPECT_EQ(VecSetValue(x_exact, i, exact(i), INSERT_VALUES), 0);
    EXPECT_EQ(VecAssemblyBegin(x_exact), 0);
    EXPECT_EQ(VecAssemblyEnd(x_exact), 0);
    EXPECT_EQ(apply(x_exact, g), 0);
    KSP ksp;
    PC pc;
    Vec f;
    EXPECT_EQ(SNESCreate(world(), &snes), 0);
    EXPECT_EQ(VecDuplicate(g, &f), 0);
    EXPECT_EQ(SNESSetFunction(snes, f, function, this), 0);
    EXPECT_EQ(VecDestroy(&f), 0);
    EXPECT_EQ(SNESSetJacobian(snes, J, J, jacobian, this), 0);
    EXPECT_EQ(SNESSetTolerances(snes, 1e-10, 1e-12, 0.0, 50, 10000), 0);
    EXPECT_EQ(SNESGetKSP(snes, &ksp), 0);
    EXPECT_EQ(KSPSetType(ksp, KSPGMRES), 0);
    EXPECT_EQ(KSPSetTolerances(ksp, 1e-12, PETSC_DEFAULT, PETSC_DEFAULT, 1000), 0);
    EXPECT_EQ(KSPGetPC(ksp, &pc), 0);
    EXPECT_EQ(PCSetType(pc, PCJACOBI), 0);
  }
  ~System() {
    SNESDestroy(&snes);
    VecDestroy(&x_exact);
    VecDestroy(&g);
    MatDestroy(&A);
    MatDestroy(&J);
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
  double residual(Vec x, Vec b = nullptr) {
    Vec f;
    PetscReal norm = 0;
    EXPECT_EQ(VecDuplicate(g, &f), 0);
    EXPECT_EQ(function(nullptr, x, f, this), 0);
    if (b) {
      EXPECT_EQ(VecAXPY(f, -1.0, b), 0);
    }
    EXPECT_EQ(VecNorm(f, NORM_2, &norm), 0);
    EXPECT_EQ(VecDestroy(&f), 0);
    return norm;
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

int event_count(const char* name) {
  PetscLogEvent event;
  PetscEventPerfInfo info{};
  EXPECT_EQ(SurrogateInitializePackage(), 0);  // registers SurrogateCheck
  EXPECT_EQ(PetscLogEventGetId(name, &event), 0);
  EXPECT_EQ(PetscLogEventGetPerfInfo(0, event, &info), 0);  // stage 0: the main stage
  return info.count;
}

TEST(SNESAcceptOrSolve, AnExactPredictionIsAcceptedUntouched) {
  System sys;
  surrogate_t s = open_model();
  Vec x = sys.prediction(0.0);
  const std::vector<double> before = values(x);
  const int solves = event_count("SNESSolve"), checks = event_count("SurrogateCheck");
  PetscBool accepted = PETSC_FALSE;
  PetscReal fnorm = -1;
  ASSERT_EQ(SurrogateSNESAcceptOrSolve(s, sys.snes, nullptr, x, PETSC_DEFAULT, &accepted, &fnorm), 0);
  EXPECT_TRUE(accepted) << "||F|| " << fnorm;
  EXPECT_LT(fnorm, 1e-12);
  EXPECT_TRUE(agreed(fnorm));
  EXPECT_TRUE(bitwise_equal(values(x), before)) << "an accepted prediction is left as it is";
  EXPECT_EQ(event_count("SNESSolve"), solves) << "no SNESSolve for an accepted prediction";
  EXPECT_EQ(event_count("SurrogateCheck"), checks + 1);
  VecDestroy(&x);
  surrogate_close(&s);
}

TEST(SNESAcceptOrSolve, APerturbedPredictionIsRejectedEverywhereAndNewtonStartsFromIt) {
  System sys;
  surrogate_t s = open_model();
  // Newton from a zero guess, for comparison.
  Vec zero;
  PetscInt its_zero = 0, its = 0;
  ASSERT_EQ(VecDuplicate(sys.g, &zero), 0);
  ASSERT_EQ(VecSet(zero, 0.0), 0);
  ASSERT_EQ(SNESSolve(sys.snes, nullptr, zero), 0);
  ASSERT_EQ(SNESGetIterationNumber(sys.snes, &its_zero), 0);

  Vec x = sys.prediction(1e-3);  // a defect on the last rank only
  const double predicted = sys.residual(x);
  ASSERT_GT(predicted, 1e-6);
  const int solves = event_count("SNESSolve");
  PetscBool accepted = PETSC_TRUE;
  PetscReal fnorm = -1;
  ASSERT_EQ(SurrogateSNESAcceptOrSolve(s, sys.snes, nullptr, x, PETSC_DEFAULT, &accepted, &fnorm), 0);
  EXPECT_FALSE(accepted);
  EXPECT_TRUE(agreed(static_cast<int>(accepted)));
  EXPECT_NEAR(fnorm, predicted, 1e-12 * predicted) << "the residual of the prediction, not of the solution";
  EXPECT_EQ(event_count("SNESSolve"), solves + 1);
  SNESConvergedReason reason;
  ASSERT_EQ(SNESGetConvergedReason(sys.snes, &reason), 0);
  EXPECT_GT(reason, 0);
  ASSERT_EQ(SNESGetIterationNumber(sys.snes, &its), 0);
  EXPECT_LT(its, its_zero) << "Newton starts from the prediction";
  EXPECT_LT(sys.residual(x), 1e-10);
  EXPECT_LT(sys.error(x), 1e-9);

  // The same defect with a looser tolerance is accepted on every rank, untouched.
  Vec y = sys.prediction(1e-3);
  const std::vector<double> before = values(y);
  ASSERT_EQ(SurrogateSNESAcceptOrSolve(s, sys.snes, nullptr, y, 10 * predicted, &accepted, nullptr), 0);
  EXPECT_TRUE(accepted);
  EXPECT_TRUE(bitwise_equal(values(y), before));
  VecDestroy(&zero);
  VecDestroy(&x);
  VecDestroy(&y);
  surrogate_close(&s);
}

TEST(SNESAcceptOrSolve, ARightHandSideIsPartOfTheResidual) {
  System sys;
  surrogate_t s = open_model();
  // F(x) = b with b = F(x* + 0.1): x* + 0.1 is the exact solution, x* is not.
  Vec shifted, b, x;
  ASSERT_EQ(VecDuplicate(sys.x_exact, &shifted), 0);
  ASSERT_EQ(VecDuplicate(sys.g, &b), 0);
  ASSERT_EQ(VecCopy(sys.x_exact, shifted), 0);
  ASSERT_EQ(VecShift(shifted, 0.1), 0);
  ASSERT_EQ(System::function(nullptr, shifted, b, &sys), 0);
  x = sys.prediction(0.0);
  PetscBool accepted = PETSC_TRUE;
  PetscReal fnorm = -1;
  ASSERT_EQ(SurrogateSNESAcceptOrSolve(s, sys.snes, b, x, PETSC_DEFAULT, &accepted, &fnorm), 0);
  EXPECT_FALSE(accepted);
  EXPECT_NEAR(fnorm, sys.residual(sys.x_exact, b), 1e-12 * fnorm);
  EXPECT_LT(sys.residual(x, b), 1e-10);
  ASSERT_EQ(VecAXPY(x, -1.0, shifted), 0);
  PetscReal error;
  ASSERT_EQ(VecNorm(x, NORM_INFINITY, &error), 0);
  EXPECT_LT(error, 1e-9);
  for (Vec* v : {&shifted, &b, &x}) VecDestroy(v);
  surrogate_close(&s);
}

TEST(SNESAcceptOrSolve, ANonFinitePredictionStartsNewtonFromZero) {
  System sys;
  surrogate_t s = open_model();
  Vec x = sys.prediction(std::numeric_limits<double>::quiet_NaN());
  PetscBool accepted = PETSC_TRUE;
  PetscReal fnorm = 0;
  ASSERT_EQ(SurrogateSNESAcceptOrSolve(s, sys.snes, nullptr, x, 1e30, &accepted, &fnorm), 0);
  EXPECT_FALSE(accepted);
  EXPECT_TRUE(std::isnan(static_cast<double>(fnorm)));
  EXPECT_LT(sys.residual(x), 1e-10);
  VecDestroy(&x);
  surrogate_close(&s);
}

TEST(SNESAcceptOrSolve, ToleranceFromTheOptionsKeyElseTheSNES) {
  System sys;
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-nl_surrogate_model", model_path().c_str()), 0);
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-nl_surrogate_accept_atol", "1e-1"), 0);
  surrogate_t s = nullptr;
  ASSERT_EQ(SurrogateCreateFromOptions(world(), "nl_", &s), 0);
  // The defect's residual (about 1e-3 at one row) lies between the SNES's atol 1e-10 and the key's 1e-1.
  Vec x = sys.prediction(1e-3);
  PetscBool accepted = PETSC_FALSE;
  ASSERT_EQ(SurrogateSNESAcceptOrSolve(s, sys.snes, nullptr, x, PETSC_DEFAULT, &accepted, nullptr), 0);
  EXPECT_TRUE(accepted);
  ASSERT_EQ(SurrogateDestroy(&s), 0);
  // Without the key PETSC_DEFAULT is the SNES's atol: rejected, then accepted once -snes_atol is loose.
  ASSERT_EQ(PetscOptionsClearValue(nullptr, "-nl_surrogate_accept_atol"), 0);
  ASSERT_EQ(SurrogateCreateFromOptions(world(), "nl_", &s), 0);
  Vec y = sys.prediction(1e-3);
  ASSERT_EQ(SurrogateSNESAcceptOrSolve(s, sys.snes, nullptr, y, PETSC_DEFAULT, &accepted, nullptr), 0);
  EXPECT_FALSE(accepted);
  Vec z = sys.prediction(1e-3);
  ASSERT_EQ(SNESSetTolerances(sys.snes, 1e-1, PETSC_DEFAULT, PETSC_DEFAULT, PETSC_DEFAULT, PETSC_DEFAULT), 0);
  ASSERT_EQ(SurrogateSNESAcceptOrSolve(s, sys.snes, nullptr, z, PETSC_DEFAULT, &accepted, nullptr), 0);
  EXPECT_TRUE(accepted);
  ASSERT_EQ(SurrogateDestroy(&s), 0);
  // A negative key is an agreed error at creation, naming the key.
  ASSERT_EQ(PetscOptionsSetValue(nullptr, "-nl_surrogate_accept_atol", "-1"), 0);
  const PetscErrorCode code = caught([&] { return SurrogateCreateFromOptions(world(), "nl_", &s); });
  EXPECT_EQ(code, PETSC_ERR_ARG_OUTOFRANGE);
  EXPECT_NE(petsc_message(code).find("-nl_surrogate_accept_atol"), std::string::npos) << petsc_message(code);
  EXPECT_EQ(s, nullptr);
  ASSERT_EQ(PetscOptionsClearValue(nullptr, "-nl_surrogate_accept_atol"), 0);
  ASSERT_EQ(PetscOptionsClearValue(nullptr, "-nl_surrogate_model"), 0);
  for (Vec* v : {&x, &y, &z}) VecDestroy(v);
}

TEST(SNESAcceptOrSolve, ErrorsAreAgreed) {
  System sys;
  surrogate_t s = open_model();
  Vec x = sys.prediction(1e-3);
  const std::vector<double> before = values(x);
  // A tolerance that differs on the last rank: every rank raises the same error, nobody solves alone.
  const double atol = rank() == size() - 1 && size() > 1 ? 1e-1 : 1e-6;
  PetscErrorCode code = caught([&] { return SurrogateSNESAcceptOrSolve(s, sys.snes, nullptr, x, atol, nullptr, nullptr); });
  if (size() > 1) {
    EXPECT_EQ(code, PETSC_ERR_ARG_WRONG);
    EXPECT_NE(petsc_message(code).find("atol differs across ranks"), std::string::npos) << petsc_message(code);
    EXPECT_TRUE(bitwise_equal(values(x), before));
  } else {
    EXPECT_EQ(code, 0);
  }
  code = caught([&] { return SurrogateSNESAcceptOrSolve(s, sys.snes, nullptr, x, -1.0, nullptr, nullptr); });
  EXPECT_EQ(code, PETSC_ERR_ARG_OUTOFRANGE);
  code = caught([&] { return SurrogateSNESAcceptOrSolve(s, sys.snes, x, x, 1e-3, nullptr, nullptr); });
  EXPECT_EQ(code, PETSC_ERR_ARG_IDN);
  SNES bare;
  ASSERT_EQ(SNESCreate(world(), &bare), 0);
  code = caught([&] { return SurrogateSNESAcceptOrSolve(s, bare, nullptr, x, 1e-3, nullptr, nullptr); });
  EXPECT_EQ(code, PETSC_ERR_ORDER);
  SNESDestroy(&bare);
  VecDestroy(&x);
  surrogate_close(&s);
}

}  // namespace
