// PETSc Vec adapters over the C API (surrogate/petsc.h). Every function returns a PetscErrorCode and
// raises errors with SETERRQ; no exception leaves this file. Checks that can fail on some ranks only
// (local sizes, allocations) are agreed across the communicator first, so every rank raises the same
// error instead of some ranks entering the library's collectives and hanging.
#include "surrogate/petsc.h"

#include "petsc_handle_info.hpp"
#include "c_api_handles.hpp"  // the handle's surrogate::Surrogate (local point count, communicator)
#include "surrogate/profile.hpp"

#include <petsclog.h>
#include <petscsys.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

PetscClassId SURROGATE_CLASSID = 0;
PetscLogEvent SURROGATE_SetPoints = 0;
PetscLogEvent SURROGATE_Predict = 0;
PetscLogEvent SURROGATE_Check = 0;

namespace {

PetscBool package_initialized = PETSC_FALSE;

// What the C handle does not carry: the -surrogate_vtk directory, the communicator the handle was
// created on (for the error raised if closing it fails) and the tolerance of SurrogateAcceptOrSolve.
struct HandleInfo {
  MPI_Comm comm = MPI_COMM_NULL;  // the communicator given to SurrogateCreateFromOptions (not owned)
  bool has_vtk = false;
  std::string vtk_directory;
  int vtk_format = SURROGATE_VTK_FORMAT_VTU;  // -surrogate_vtk_format
  PetscReal accept_rtol = 0;
  PetscReal accept_atol = PETSC_DEFAULT;  // PETSC_DEFAULT: the SNES's own absolute tolerance
};

std::mutex table_mutex;
std::unordered_map<surrogate_t, HandleInfo>& table() {
  static std::unordered_map<surrogate_t, HandleInfo> t;
  return t;
}

// The communicator a handle was created on by SurrogateCreateFromOptions (MPI_COMM_NULL: unknown).
MPI_Comm creation_comm(surrogate_t s) noexcept {
  std::lock_guard<std::mutex> lock(table_mutex);
  const auto it = table().find(s);
  return it == table().end() ? MPI_COMM_NULL : it->second.comm;
}

// Inserts or updates an entry; false if memory ran out.
template <class F>
bool update(surrogate_t s, F&& change) noexcept {
  try {
    std::lock_guard<std::mutex> lock(table_mutex);
    change(table()[s]);
    return true;
  } catch (...) {
    return false;
  }
}

PetscReal accept_rtol(surrogate_t s) noexcept {
  std::lock_guard<std::mutex> lock(table_mutex);
  const auto it = table().find(s);
  return it == table().end() ? PetscReal(0) : it->second.accept_rtol;
}

}  // namespace

PetscReal surrogate::petsc_detail::accept_atol(surrogate_t s) noexcept {
  std::lock_guard<std::mutex> lock(table_mutex);
  const auto it = table().find(s);
  return it == table().end() ? static_cast<PetscReal>(PETSC_DEFAULT) : it->second.accept_atol;
}

namespace {

void forget(surrogate_t s) noexcept {
  std::lock_guard<std::mutex> lock(table_mutex);
  table().erase(s);
}

// The library's phases (plan, each layer kind, exchanges) as PETSc log events "surrogate <phase>", nested
// in SurrogateSetPoints / SurrogatePredict. -log_view needs every rank to register the same events in the
// same order: the names come from surrogate::phase_names(), sorted and the same on every rank.
class PhaseEvents final : public surrogate::PhaseObserver {
 public:
  PetscErrorCode register_all() {
    PetscFunctionBegin;
    std::vector<std::string> names;
    try {
      names = surrogate::phase_names();
      for (const std::string& name : names) events_.emplace(name, PetscLogEvent{});
    } catch (const std::bad_alloc&) {
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_MEM, "surrogate: out of memory registering the phase log events");
    }
    for (const std::string& name : names)
      PetscCall(PetscLogEventRegister(("surrogate " + name).c_str(), SURROGATE_CLASSID, &events_.find(name)->second));
    PetscFunctionReturn(0);
  }
  // A failure of PETSc's logging (a corrupt event table) is not the forward's error: it is dropped.
  void begin(const char* name) noexcept override {
    const auto it = events_.find(std::string_view(name));
    if (it != events_.end()) (void)PetscLogEventBegin(it->second, 0, 0, 0, 0);
  }
  void end(const char* name) noexcept override {
    const auto it = events_.find(std::string_view(name));
    if (it != events_.end()) (void)PetscLogEventEnd(it->second, 0, 0, 0, 0);
  }

 private:
  std::map<std::string, PetscLogEvent, std::less<>> events_;
};
std::unique_ptr<PhaseEvents> phase_events;

PetscErrorCode finalize_package() {
  PetscFunctionBegin;
  surrogate::set_phase_observer(nullptr);
  phase_events.reset();
  package_initialized = PETSC_FALSE;
  PetscFunctionReturn(0);
}

// The scalar type decides the C API entry point; complex scalars are refused at run time with a clear
// message (the library computes in real arithmetic).
int set_points_raw(surrogate_t s, std::int64_t n, int dim, const double* x, const std::int64_t* ids) {
  return surrogate_set_points_f64(s, n, dim, x, dim, 1, ids, nullptr);
}
[[maybe_unused]] int set_points_raw(surrogate_t s, std::int64_t n, int dim, const float* x, const std::int64_t* ids) {
  return surrogate_set_points_f32(s, n, dim, x, dim, 1, ids, nullptr);
}
int predict_raw(surrogate_t s, const double* in, std::int64_t ips, std::int64_t ics, double* out, std::int64_t ops,
                std::int64_t ocs) {
  return surrogate_predict_f64(s, in, ips, ics, out, ops, ocs);
}
[[maybe_unused]] int predict_raw(surrogate_t s, const float* in, std::int64_t ips, std::int64_t ics, float* out, std::int64_t ops,
                std::int64_t ocs) {
  return surrogate_predict_f32(s, in, ips, ics, out, ops, ocs);
}
constexpr int unsupported_scalar = -1;
template <class Scalar>
int set_points_raw(surrogate_t, std::int64_t, int, const Scalar*, const std::int64_t*) {
  return unsupported_scalar;
}
template <class Scalar>
int predict_raw(surrogate_t, const Scalar*, std::int64_t, std::int64_t, Scalar*, std::int64_t, std::int64_t) {
  return unsupported_scalar;
}

// Turns a C API status into a PETSc error (the library agrees on errors: same message on every rank).
PetscErrorCode check_status(MPI_Comm comm, int status) {
  PetscFunctionBegin;
  PetscCheck(status != unsupported_scalar, comm, PETSC_ERR_SUP,
             "surrogate: PetscScalar is complex; the surrogate PETSc adapters need a real PETSc build (double or single)");
  PetscCheck(status == SURROGATE_OK, comm, PETSC_ERR_LIB, "surrogate: %s", surrogate_last_error());
  PetscFunctionReturn(0);
}

// A local condition agreed across `comm`: *first is the lowest rank where `bad` holds (-1: none), and
// values[0..n) are that rank's values (broadcast), for a message that is the same on every rank.
PetscErrorCode agree(MPI_Comm comm, bool bad, PetscInt* values, int n, PetscMPIInt* first) {
  PetscMPIInt rank, size;
  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCallMPI(MPI_Comm_size(comm, &size));
  PetscMPIInt r = bad ? rank : size;
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &r, 1, MPI_INT, MPI_MIN, comm));
  *first = r == size ? -1 : r;
  if (*first >= 0 && n > 0) PetscCallMPI(MPI_Bcast(values, n, MPIU_INT, r, comm));
  PetscFunctionReturn(0);
}

PetscErrorCode vec_name(Vec v, const char** name) {
  PetscFunctionBegin;
  PetscCall(PetscObjectGetName(reinterpret_cast<PetscObject>(v), name));
  PetscFunctionReturn(0);
}

// The handle's communicator (every rank of the handle takes part in its collective calls).
MPI_Comm handle_comm(surrogate_t s) { return s->object.comm().get(); }

// The rank's point count (the same check on every rank: set_points is collective).
PetscErrorCode local_points(MPI_Comm comm, surrogate_t s, const char* caller, PetscInt* n_local) {
  PetscFunctionBegin;
  PetscCheck(s->object.has_points(), comm, PETSC_ERR_ORDER,
             "surrogate: %s: no points: call SurrogateSetPointsVec (or surrogate_set_points_*) first", caller);
  *n_local = static_cast<PetscInt>(s->object.local_points());
  PetscFunctionReturn(0);
}

// Separately allocated per-channel arrays form one strided view when they are equally spaced (e.g. the
// Vecs share one allocation): returns the channel stride in elements, or 0 when they are not.
template <class Scalar>
std::int64_t uniform_stride(const std::vector<Scalar*>& arrays, PetscInt n_local) {
  if (arrays.size() <= 1) return n_local > 0 ? n_local : 1;  // none: a model without per-point outputs
  const auto base = reinterpret_cast<std::uintptr_t>(arrays[0]);
  const auto next = reinterpret_cast<std::uintptr_t>(arrays[1]);
  if (next <= base || (next - base) % sizeof(Scalar) != 0) return 0;
  const auto stride = static_cast<std::int64_t>((next - base) / sizeof(Scalar));
  if (stride < n_local) return 0;  // overlapping channels
  for (std::size_t c = 2; c < arrays.size(); ++c)
    if (reinterpret_cast<std::uintptr_t>(arrays[c]) != base + c * static_cast<std::uintptr_t>(stride) * sizeof(Scalar))
      return 0;
  return stride;
}

}  // namespace

extern "C" {

PetscErrorCode SurrogateInitializePackage(void) {
  PetscFunctionBegin;
  if (package_initialized) PetscFunctionReturn(0);
  package_initialized = PETSC_TRUE;
  PetscCall(PetscClassIdRegister("Surrogate", &SURROGATE_CLASSID));
  PetscCall(PetscLogEventRegister("SurrogateSetPoints", SURROGATE_CLASSID, &SURROGATE_SetPoints));
  PetscCall(PetscLogEventRegister("SurrogatePredict", SURROGATE_CLASSID, &SURROGATE_Predict));
  PetscCall(PetscLogEventRegister("SurrogateCheck", SURROGATE_CLASSID, &SURROGATE_Check));
  phase_events.reset(new (std::nothrow) PhaseEvents);
  PetscCheck(phase_events, PETSC_COMM_SELF, PETSC_ERR_MEM, "surrogate: out of memory registering the phase log events");
  PetscCall(phase_events->register_all());
  surrogate::set_phase_observer(phase_events.get());
  PetscCall(PetscRegisterFinalize(finalize_package));
  PetscFunctionReturn(0);
}

PetscErrorCode SurrogateCreateFromOptions(MPI_Comm comm, const char prefix[], surrogate_t* surrogate) {
  char model[PETSC_MAX_PATH_LEN] = "";
  char device[64] = "cpu";
  char precision[16] = "fp32";
  char vtk[PETSC_MAX_PATH_LEN] = "";
  char vtk_format[16] = "vtu";
  PetscBool has_model = PETSC_FALSE, has_vtk = PETSC_FALSE, reproducible = PETSC_FALSE, allow_non_finite = PETSC_FALSE;
  PetscInt threads = 0;
  PetscReal accept = 0, accept_atol = PETSC_DEFAULT;
  PetscBool has_atol = PETSC_FALSE;

  PetscFunctionBegin;
  PetscCall(SurrogateInitializePackage());
  PetscCheck(surrogate, comm, PETSC_ERR_ARG_NULL, "surrogate: SurrogateCreateFromOptions: null surrogate_t pointer");
  *surrogate = nullptr;
  PetscOptionsBegin(comm, prefix, "Surrogate model options", "Surrogate");
  PetscCall(PetscOptionsString("-surrogate_model", "Surrogate model file (written by surrogate-export)",
                               "SurrogateCreateFromOptions", model, model, sizeof(model), &has_model));
  PetscCall(PetscOptionsString("-surrogate_device", "Device that runs the surrogate (cpu)", "SurrogateCreateFromOptions",
                               device, device, sizeof(device), nullptr));
  PetscCall(PetscOptionsString("-surrogate_precision",
                               "Arithmetic: fp32, tf32 (CUDA), bf16 (CUDA; CPU with BF16: flare) or fp64 (CPU, hept)",
                               "SurrogateCreateFromOptions", precision, precision, sizeof(precision), nullptr));
  PetscCall(PetscOptionsBoundedInt("-surrogate_threads", "OpenMP threads per rank (0: OMP_NUM_THREADS)",
                                   "SurrogateCreateFromOptions", threads, &threads, nullptr, 0));
  PetscCall(PetscOptionsBool("-surrogate_reproducible",
                             "Bitwise-identical predictions for any rank count, partition and thread count",
                             "SurrogateCreateFromOptions", reproducible, &reproducible, nullptr));
  PetscCall(PetscOptionsBool("-surrogate_allow_non_finite_output",
                             "Hand NaN/Inf predictions to the caller instead of failing the predict",
                             "SurrogateCreateFromOptions", allow_non_finite, &allow_non_finite, nullptr));
  PetscCall(PetscOptionsString("-surrogate_vtk", "Directory for VTK output (see SurrogateGetVTKDirectory)",
                               "SurrogateGetVTKDirectory", vtk, vtk, sizeof(vtk), &has_vtk));
  PetscCall(PetscOptionsString("-surrogate_vtk_format",
                               "VTK output format: vtu (a .vtu per rank and step) or vtkhdf (one file per step)",
                               "SurrogateGetVTKFormat", vtk_format, vtk_format, sizeof(vtk_format), nullptr));
  PetscCall(PetscOptionsReal("-surrogate_accept_rtol",
                             "SurrogateAcceptOrSolve accepts a prediction x when ||b - A x|| / ||b|| <= this (0: only exact)",
                             "SurrogateAcceptOrSolve", accept, &accept, nullptr));
  PetscCall(PetscOptionsReal("-surrogate_accept_atol",
                             "SurrogateSNESAcceptOrSolve accepts a prediction x when ||F(x)|| < this (default: the SNES's -snes_atol)",
                             "SurrogateSNESAcceptOrSolve", accept_atol, &accept_atol, &has_atol));
  PetscOptionsEnd();
  // The options database is per process: agree on the checks, so that every rank raises the same error.
  PetscMPIInt bad_rtol_on = -1;
  PetscCall(agree(comm, !(accept >= 0 && std::isfinite(static_cast<double>(accept))), nullptr, 0, &bad_rtol_on));
  PetscCheck(bad_rtol_on < 0, comm, PETSC_ERR_ARG_OUTOFRANGE,
             "surrogate: -%ssurrogate_accept_rtol must be a finite number >= 0 (it is not on rank %d)", prefix ? prefix : "",
             bad_rtol_on);
  PetscMPIInt bad_atol_on = -1;
  PetscCall(agree(comm, has_atol && !(accept_atol >= 0 && std::isfinite(static_cast<double>(accept_atol))), nullptr, 0, &bad_atol_on));
  PetscCheck(bad_atol_on < 0, comm, PETSC_ERR_ARG_OUTOFRANGE,
             "surrogate: -%ssurrogate_accept_atol must be a finite number >= 0 (it is not on rank %d)", prefix ? prefix : "",
             bad_atol_on);
  if (!has_atol) accept_atol = PETSC_DEFAULT;

  const bool vtkhdf = std::strcmp(vtk_format, "vtkhdf") == 0;
  PetscMPIInt bad_format_on = -1;
  PetscCall(agree(comm, !vtkhdf && std::strcmp(vtk_format, "vtu") != 0, nullptr, 0, &bad_format_on));
  PetscCheck(bad_format_on < 0, comm, PETSC_ERR_ARG_WRONG,
             "surrogate: -%ssurrogate_vtk_format must be vtu or vtkhdf (it is not on rank %d)", prefix ? prefix : "",
             bad_format_on);

  // The options database is per process: agree that every rank has a model file name.
  PetscMPIInt missing_on = -1;
  PetscCall(agree(comm, !has_model || model[0] == '\0', nullptr, 0, &missing_on));
  PetscCheck(missing_on < 0, comm, PETSC_ERR_USER_INPUT,
             "surrogate: no model file: give -%ssurrogate_model <file> (missing on rank %d)", prefix ? prefix : "",
             missing_on);

  surrogate_options options;
  surrogate_options_default(&options);
  options.device = device;
  options.threads = static_cast<int>(threads);
  options.reproducible = reproducible ? 1 : 0;
  options.allow_non_finite_output = allow_non_finite ? 1 : 0;
  options.precision = precision;
  surrogate_t s = nullptr;
  PetscCall(check_status(comm, surrogate_open(comm, model, &options, &s)));

  const bool stored = update(s, [&](HandleInfo& info) {
    info = HandleInfo{};
    info.comm = comm;
    info.has_vtk = has_vtk && vtk[0] != '\0';
    if (info.has_vtk) info.vtk_directory = vtk;
    info.vtk_format = vtkhdf ? SURROGATE_VTK_FORMAT_VTKHDF : SURROGATE_VTK_FORMAT_VTU;
    info.accept_rtol = accept;
    info.accept_atol = accept_atol;
  });
  PetscMPIInt failed_on = -1;
  PetscCall(agree(comm, !stored, nullptr, 0, &failed_on));
  if (failed_on >= 0) {
    forget(s);
    (void)surrogate_close(&s);
    SETERRQ(comm, PETSC_ERR_MEM, "surrogate: out of memory on rank %d in SurrogateCreateFromOptions", failed_on);
  }
  *surrogate = s;
  PetscFunctionReturn(0);
}

PetscErrorCode SurrogateDestroy(surrogate_t* surrogate) {
  PetscFunctionBegin;
  if (!surrogate || !*surrogate) PetscFunctionReturn(0);
  const MPI_Comm created_on = creation_comm(*surrogate);
  const MPI_Comm comm = created_on != MPI_COMM_NULL ? created_on : PETSC_COMM_SELF;
  forget(*surrogate);
  PetscCall(check_status(comm, surrogate_close(surrogate)));
  PetscFunctionReturn(0);
}

PetscErrorCode SurrogateGetVTKDirectory(surrogate_t surrogate, const char* directory[]) {
  PetscFunctionBegin;
  PetscCheck(directory, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogateGetVTKDirectory: null pointer");
  *directory = nullptr;
  if (!surrogate) PetscFunctionReturn(0);
  // The string lives in the table entry until SurrogateDestroy; the map never moves its values.
  std::lock_guard<std::mutex> lock(table_mutex);
  const auto it = table().find(surrogate);
  if (it != table().end() && it->second.has_vtk) *directory = it->second.vtk_directory.c_str();
  PetscFunctionReturn(0);
}

PetscErrorCode SurrogateGetVTKFormat(surrogate_t surrogate, int* format) {
  PetscFunctionBegin;
  PetscCheck(format, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogateGetVTKFormat: null pointer");
  *format = SURROGATE_VTK_FORMAT_VTU;
  if (!surrogate) PetscFunctionReturn(0);
  std::lock_guard<std::mutex> lock(table_mutex);
  const auto it = table().find(surrogate);
  if (it != table().end()) *format = it->second.vtk_format;
  PetscFunctionReturn(0);
}

PetscErrorCode SurrogateSetPointsVec(surrogate_t surrogate, Vec coords) {
  PetscFunctionBegin;
  PetscCall(SurrogateInitializePackage());
  PetscCheck(coords, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogateSetPointsVec: null Vec");
  PetscCheck(surrogate, PetscObjectComm(reinterpret_cast<PetscObject>(coords)), PETSC_ERR_ARG_NULL,
             "surrogate: SurrogateSetPointsVec: null surrogate handle");
  const MPI_Comm comm = handle_comm(surrogate);

  PetscInt bs, n, rstart;
  PetscCall(VecGetBlockSize(coords, &bs));
  PetscCall(VecGetLocalSize(coords, &n));
  PetscCall(VecGetOwnershipRange(coords, &rstart, nullptr));
  const PetscInt n_local = n / bs;
  // Global ids: the Vec's global block indices (kept by the library for output).
  std::unique_ptr<std::int64_t[]> ids(new (std::nothrow) std::int64_t[static_cast<std::size_t>(n_local > 0 ? n_local : 1)]);
  PetscMPIInt failed_on = -1;
  PetscCall(agree(comm, !ids, nullptr, 0, &failed_on));
  PetscCheck(failed_on < 0, comm, PETSC_ERR_MEM, "surrogate: SurrogateSetPointsVec: out of memory on rank %d", failed_on);
  for (PetscInt i = 0; i < n_local; ++i) ids[static_cast<std::size_t>(i)] = rstart / bs + i;

  const PetscScalar* x = nullptr;
  PetscCall(PetscLogEventBegin(SURROGATE_SetPoints, reinterpret_cast<PetscObject>(coords), 0, 0, 0));
  PetscCall(VecGetArrayRead(coords, &x));
  const int status = set_points_raw(surrogate, n_local, static_cast<int>(bs), x, ids.get());
  PetscCall(VecRestoreArrayRead(coords, &x));
  PetscCall(PetscLogEventEnd(SURROGATE_SetPoints, reinterpret_cast<PetscObject>(coords), 0, 0, 0));
  PetscCall(check_status(comm, status));

  PetscFunctionReturn(0);
}

PetscErrorCode SurrogateSetSampleInputsVec(surrogate_t surrogate, Vec v) {
  PetscFunctionBegin;
  PetscCheck(surrogate && v, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogateSetSampleInputsVec: null argument");
  int sin = 0, sout = 0;
  PetscCall(check_status(PETSC_COMM_SELF, surrogate_sample_channels(surrogate, &sin, &sout)));
  std::int64_t samples = 0;
  PetscCall(check_status(PETSC_COMM_SELF, surrogate_samples(surrogate, &samples)));
  PetscInt n;
  PetscCall(VecGetLocalSize(v, &n));
  PetscCheck(sin > 0 && n == static_cast<PetscInt>(samples * sin), PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ,
             "surrogate: SurrogateSetSampleInputsVec: local size %" PetscInt_FMT ", the model takes %" PetscInt64_FMT
             " samples x %d values",
             n, static_cast<PetscInt64>(samples), sin);
  const PetscScalar* a;
  PetscCall(VecGetArrayRead(v, &a));
  std::vector<double> values(static_cast<std::size_t>(n));
  for (PetscInt i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = static_cast<double>(PetscRealPart(a[i]));
  PetscCall(VecRestoreArrayRead(v, &a));
  PetscCall(check_status(PETSC_COMM_SELF, surrogate_set_sample_inputs_f64(surrogate, samples, sin, values.data())));
  PetscFunctionReturn(0);
}

PetscErrorCode SurrogateGetSampleOutputsVec(surrogate_t surrogate, Vec* v) {
  PetscFunctionBegin;
  PetscCheck(surrogate && v, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogateGetSampleOutputsVec: null argument");
  int sin = 0, sout = 0;
  PetscCall(check_status(PETSC_COMM_SELF, surrogate_sample_channels(surrogate, &sin, &sout)));
  std::int64_t samples = 0;
  PetscCall(check_status(PETSC_COMM_SELF, surrogate_samples(surrogate, &samples)));
  std::vector<double> values(static_cast<std::size_t>(samples * sout));
  PetscCall(check_status(PETSC_COMM_SELF, surrogate_get_sample_outputs_f64(surrogate, static_cast<std::int64_t>(values.size()),
                                                                           values.data())));
  PetscCall(VecCreateSeq(PETSC_COMM_SELF, static_cast<PetscInt>(values.size()), v));
  if (sout > 0) PetscCall(VecSetBlockSize(*v, sout));
  PetscScalar* a;
  PetscCall(VecGetArray(*v, &a));
  for (std::size_t i = 0; i < values.size(); ++i) a[i] = static_cast<PetscScalar>(values[i]);
  PetscCall(VecRestoreArray(*v, &a));
  PetscFunctionReturn(0);
}

PetscErrorCode SurrogatePredictVec(surrogate_t surrogate, Vec in, Vec out) {
  PetscFunctionBegin;
  PetscCall(SurrogateInitializePackage());
  PetscCheck(out, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogatePredictVec: null output Vec");
  PetscCheck(surrogate, PetscObjectComm(reinterpret_cast<PetscObject>(out)), PETSC_ERR_ARG_NULL,
             "surrogate: SurrogatePredictVec: null surrogate handle");
  const MPI_Comm comm = handle_comm(surrogate);
  PetscCheck(in != out, comm, PETSC_ERR_ARG_IDN, "surrogate: SurrogatePredictVec: in and out must be different Vecs");

  int cin = 0, cout = 0;
  PetscCall(check_status(comm, surrogate_in_channels(surrogate, &cin)));
  PetscCall(check_status(comm, surrogate_out_channels(surrogate, &cout)));
  // A model of the positions alone (no input channels) takes in = NULL.
  PetscCheck(in || cin == 0, comm, PETSC_ERR_ARG_NULL,
             "surrogate: SurrogatePredictVec: null input Vec (the model has %d input channels)", cin);
  PetscInt n_local = 0;
  PetscCall(local_points(comm, surrogate, "SurrogatePredictVec", &n_local));

  // Block sizes are the same on every rank: no agreement needed.
  const Vec vecs[2] = {in, out};
  const char* roles[2] = {"input", "output"};
  const int channels[2] = {cin, cout};
  for (int k = in ? 0 : 1; k < 2; ++k) {
    PetscInt bs;
    const char* name;
    PetscCall(VecGetBlockSize(vecs[k], &bs));
    if (bs != channels[k]) {
      PetscCall(vec_name(vecs[k], &name));
      SETERRQ(comm, PETSC_ERR_ARG_SIZ,
              "surrogate: SurrogatePredictVec: %s Vec '%s' has block size %" PetscInt_FMT
              ", expected %d (the model's %s channels)",
              roles[k], name, bs, channels[k], roles[k]);
    }
  }
  // Local sizes may be wrong on some ranks only: agree, then report the first such rank everywhere.
  for (int k = in ? 0 : 1; k < 2; ++k) {
    PetscInt n;
    PetscCall(VecGetLocalSize(vecs[k], &n));
    PetscInt v[2] = {n, n_local};
    PetscMPIInt bad_rank;
    PetscCall(agree(comm, n != n_local * channels[k], v, 2, &bad_rank));
    if (bad_rank >= 0) {
      const char* name;
      PetscCall(vec_name(vecs[k], &name));
      SETERRQ(comm, PETSC_ERR_ARG_SIZ,
              "surrogate: SurrogatePredictVec: %s Vec '%s' has local size %" PetscInt_FMT " on rank %d, expected %" PetscInt_FMT
              " (%" PetscInt_FMT " points x %d %s channels)",
              roles[k], name, v[0], bad_rank, v[1] * channels[k], v[1], channels[k], roles[k]);
    }
  }

  const PetscScalar* x = nullptr;
  PetscScalar* y = nullptr;
  PetscCall(PetscLogEventBegin(SURROGATE_Predict, reinterpret_cast<PetscObject>(in), reinterpret_cast<PetscObject>(out), 0, 0));
  if (in) PetscCall(VecGetArrayRead(in, &x));
  PetscCall(VecGetArrayWrite(out, &y));
  const int status = predict_raw(surrogate, x, cin, 1, y, cout, 1);
  PetscCall(VecRestoreArrayWrite(out, &y));
  if (in) PetscCall(VecRestoreArrayRead(in, &x));
  PetscCall(PetscLogEventEnd(SURROGATE_Predict, reinterpret_cast<PetscObject>(in), reinterpret_cast<PetscObject>(out), 0, 0));
  PetscCall(check_status(comm, status));
  PetscFunctionReturn(0);
}

PetscErrorCode SurrogatePredictVecs(surrogate_t surrogate, PetscInt nin, const Vec in[], PetscInt nout, const Vec out[]) {
  PetscFunctionBegin;
  PetscCall(SurrogateInitializePackage());
  PetscCheck(nin > 0 && in, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogatePredictVecs: no input Vecs");
  PetscCheck(nout == 0 || (nout > 0 && out), PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogatePredictVecs: no output Vecs");
  for (PetscInt c = 0; c < nin; ++c)
    PetscCheck(in[c], PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogatePredictVecs: in[%" PetscInt_FMT "] is NULL", c);
  for (PetscInt c = 0; c < nout; ++c)
    PetscCheck(out[c], PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogatePredictVecs: out[%" PetscInt_FMT "] is NULL", c);
  PetscCheck(surrogate, PetscObjectComm(reinterpret_cast<PetscObject>(in[0])), PETSC_ERR_ARG_NULL,
             "surrogate: SurrogatePredictVecs: null surrogate handle");
  const MPI_Comm comm = handle_comm(surrogate);

  int cin = 0, cout = 0;
  PetscCall(check_status(comm, surrogate_in_channels(surrogate, &cin)));
  PetscCall(check_status(comm, surrogate_out_channels(surrogate, &cout)));
  PetscCheck(nin == cin, comm, PETSC_ERR_ARG_SIZ,
             "surrogate: SurrogatePredictVecs: %" PetscInt_FMT " input Vecs, expected %d (the model's input channels)", nin, cin);
  PetscCheck(nout == cout, comm, PETSC_ERR_ARG_SIZ,
             "surrogate: SurrogatePredictVecs: %" PetscInt_FMT " output Vecs, expected %d (the model's output channels)", nout,
             cout);
  for (PetscInt j = 0; j < nout; ++j) {
    for (PetscInt c = 0; c < nin; ++c)
      PetscCheck(out[j] != in[c], comm, PETSC_ERR_ARG_IDN,
                 "surrogate: SurrogatePredictVecs: out[%" PetscInt_FMT "] is also in[%" PetscInt_FMT "]", j, c);
    for (PetscInt k = 0; k < j; ++k)
      PetscCheck(out[j] != out[k], comm, PETSC_ERR_ARG_IDN,
                 "surrogate: SurrogatePredictVecs: out[%" PetscInt_FMT "] and out[%" PetscInt_FMT "] are the same Vec", k, j);
  }
  PetscInt n_local = 0;
  PetscCall(local_points(comm, surrogate, "SurrogatePredictVecs", &n_local));

  // Local sizes (agreed): v = {side (0 in, 1 out), index, local size, expected}.
  {
    PetscInt v[4] = {0, 0, 0, n_local};
    bool bad = false;
    for (PetscInt k = 0; k < nin + nout && !bad; ++k) {
      const Vec vec = k < nin ? in[k] : out[k - nin];
      PetscInt n;
      PetscCall(VecGetLocalSize(vec, &n));
      if (n != n_local) {
        bad = true;
        v[0] = k < nin ? 0 : 1;
        v[1] = k < nin ? k : k - nin;
        v[2] = n;
      }
    }
    PetscMPIInt bad_rank;
    PetscCall(agree(comm, bad, v, 4, &bad_rank));
    if (bad_rank >= 0) {
      const char* name;
      PetscCall(vec_name(v[0] == 0 ? in[v[1]] : out[v[1]], &name));
      SETERRQ(comm, PETSC_ERR_ARG_SIZ,
              "surrogate: SurrogatePredictVecs: %s[%" PetscInt_FMT "] (Vec '%s') has local size %" PetscInt_FMT
              " on rank %d, expected %" PetscInt_FMT " (the rank's points)",
              v[0] == 0 ? "in" : "out", v[1], name, v[2], bad_rank, v[3]);
    }
  }

  PetscCall(PetscLogEventBegin(SURROGATE_Predict, reinterpret_cast<PetscObject>(in[0]), nout > 0 ? reinterpret_cast<PetscObject>(out[0]) : nullptr, 0, 0));
  std::vector<const PetscScalar*> xs;
  std::vector<PetscScalar*> ys;
  PetscCallCXX(xs.assign(static_cast<std::size_t>(nin), nullptr));
  PetscCallCXX(ys.assign(static_cast<std::size_t>(nout), nullptr));
  for (PetscInt c = 0; c < nin; ++c) PetscCall(VecGetArrayRead(in[c], &xs[static_cast<std::size_t>(c)]));
  for (PetscInt c = 0; c < nout; ++c) PetscCall(VecGetArrayWrite(out[c], &ys[static_cast<std::size_t>(c)]));

  // Zero copy when each side's arrays are equally spaced (one Vec, or Vecs over one allocation); else
  // gather the inputs / scatter the outputs through one channel-major buffer.
  const std::int64_t in_stride = uniform_stride(xs, n_local), out_stride = uniform_stride(ys, n_local);
  const std::size_t n = static_cast<std::size_t>(n_local);
  std::unique_ptr<PetscScalar[]> in_buffer, out_buffer;
  bool alloc_failed = false;
  if (!in_stride && n > 0) {
    in_buffer.reset(new (std::nothrow) PetscScalar[n * static_cast<std::size_t>(nin)]);
    alloc_failed |= !in_buffer;
  }
  if (!out_stride && n > 0) {
    out_buffer.reset(new (std::nothrow) PetscScalar[n * static_cast<std::size_t>(nout)]);
    alloc_failed |= !out_buffer;
  }
  PetscMPIInt failed_on = -1;
  PetscErrorCode agreed = agree(comm, alloc_failed, nullptr, 0, &failed_on);
  int status = SURROGATE_OK;
  if (!agreed && failed_on < 0) {
    const PetscScalar* x = xs[0];
    std::int64_t ics = in_stride;
    if (in_buffer) {
      for (std::size_t c = 0; c < xs.size(); ++c)
        for (std::size_t i = 0; i < n; ++i) in_buffer[c * n + i] = xs[c][i];
      x = in_buffer.get();
      ics = n_local;
    }
    PetscScalar* y = out_buffer ? out_buffer.get() : ys.empty() ? nullptr : ys[0];
    const std::int64_t ocs = out_buffer ? n_local : out_stride;
    status = predict_raw(surrogate, x, 1, ics ? ics : 1, y, 1, ocs ? ocs : 1);
    if (out_buffer && status == SURROGATE_OK)
      for (std::size_t c = 0; c < ys.size(); ++c)
        for (std::size_t i = 0; i < n; ++i) ys[c][i] = out_buffer[c * n + i];
  }
  for (PetscInt c = 0; c < nout; ++c) PetscCall(VecRestoreArrayWrite(out[c], &ys[static_cast<std::size_t>(c)]));
  for (PetscInt c = 0; c < nin; ++c) PetscCall(VecRestoreArrayRead(in[c], &xs[static_cast<std::size_t>(c)]));
  PetscCall(PetscLogEventEnd(SURROGATE_Predict, reinterpret_cast<PetscObject>(in[0]), nout > 0 ? reinterpret_cast<PetscObject>(out[0]) : nullptr, 0, 0));
  PetscCall(agreed);
  PetscCheck(failed_on < 0, comm, PETSC_ERR_MEM, "surrogate: SurrogatePredictVecs: out of memory on rank %d", failed_on);
  PetscCall(check_status(comm, status));
  PetscFunctionReturn(0);
}

PetscErrorCode SurrogateSetAcceptTolerance(surrogate_t surrogate, PetscReal rtol) {
  PetscFunctionBegin;
  PetscCheck(surrogate, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogateSetAcceptTolerance: null surrogate handle");
  PetscCheck(rtol >= 0 && std::isfinite(static_cast<double>(rtol)), PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "surrogate: SurrogateSetAcceptTolerance: rtol %g must be a finite number >= 0", static_cast<double>(rtol));
  PetscCheck(update(surrogate, [&](HandleInfo& info) { info.accept_rtol = rtol; }), PETSC_COMM_SELF, PETSC_ERR_MEM,
             "surrogate: SurrogateSetAcceptTolerance: out of memory");
  PetscFunctionReturn(0);
}

PetscErrorCode SurrogateGetAcceptTolerance(surrogate_t surrogate, PetscReal* rtol) {
  PetscFunctionBegin;
  PetscCheck(surrogate && rtol, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogateGetAcceptTolerance: null argument");
  *rtol = accept_rtol(surrogate);
  PetscFunctionReturn(0);
}

PetscErrorCode SurrogateAcceptOrSolve(surrogate_t surrogate, KSP ksp, Vec b, Vec x, PetscReal rtol, PetscBool* accepted,
                                      PetscReal* residual) {
  PetscFunctionBegin;
  PetscCall(SurrogateInitializePackage());
  PetscCheck(ksp && b && x, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogateAcceptOrSolve: null KSP or Vec");
  const MPI_Comm comm = PetscObjectComm(reinterpret_cast<PetscObject>(ksp));
  PetscCheck(surrogate, comm, PETSC_ERR_ARG_NULL, "surrogate: SurrogateAcceptOrSolve: null surrogate handle");
  PetscCheck(b != x, comm, PETSC_ERR_ARG_IDN, "surrogate: SurrogateAcceptOrSolve: b and x must be different Vecs");
  PetscBool has_operator = PETSC_FALSE;
  PetscCall(KSPGetOperatorsSet(ksp, &has_operator, nullptr));
  PetscCheck(has_operator, comm, PETSC_ERR_ORDER, "surrogate: SurrogateAcceptOrSolve: the KSP has no operator (KSPSetOperators)");
  if (rtol == static_cast<PetscReal>(PETSC_DEFAULT)) rtol = accept_rtol(surrogate);
  // The decision must be the same on every rank: the tolerance too (it may come from per-process options).
  double range[2] = {static_cast<double>(rtol), -static_cast<double>(rtol)};
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_DOUBLE, MPI_MAX, comm));
  PetscCheck(range[0] == -range[1], comm, PETSC_ERR_ARG_WRONG,
             "surrogate: SurrogateAcceptOrSolve: rtol differs across ranks (from %g to %g)", -range[1], range[0]);
  PetscCheck(range[0] >= 0 && std::isfinite(range[0]), comm, PETSC_ERR_ARG_OUTOFRANGE,
             "surrogate: SurrogateAcceptOrSolve: rtol %g must be a finite number >= 0 (or PETSC_DEFAULT)", range[0]);

  // r = b - A x and the two norms in one reduction.
  Mat A;
  Vec r;
  PetscReal norm_r = 0, norm_b = 0;
  PetscCall(KSPGetOperators(ksp, &A, nullptr));
  PetscCall(VecDuplicate(b, &r));
  PetscCall(PetscLogEventBegin(SURROGATE_Check, reinterpret_cast<PetscObject>(ksp), reinterpret_cast<PetscObject>(x), 0, 0));
  PetscCall(MatMult(A, x, r));
  PetscCall(VecAYPX(r, -1.0, b));
  PetscCall(VecNormBegin(r, NORM_2, &norm_r));
  PetscCall(VecNormBegin(b, NORM_2, &norm_b));
  PetscCall(VecNormEnd(r, NORM_2, &norm_r));
  PetscCall(VecNormEnd(b, NORM_2, &norm_b));
  PetscCall(PetscLogEventEnd(SURROGATE_Check, reinterpret_cast<PetscObject>(ksp), reinterpret_cast<PetscObject>(x), 0, 0));
  PetscCall(VecDestroy(&r));
  const PetscReal relative = norm_b > 0 ? norm_r / norm_b : norm_r;
  const bool finite = std::isfinite(static_cast<double>(relative));
  const bool accept = finite && relative <= static_cast<PetscReal>(range[0]);
  if (!accept) {
    PetscBool nonzero;
    PetscCall(KSPGetInitialGuessNonzero(ksp, &nonzero));
    PetscCall(KSPSetInitialGuessNonzero(ksp, finite ? PETSC_TRUE : PETSC_FALSE));
    PetscCall(KSPSolve(ksp, b, x));
    PetscCall(KSPSetInitialGuessNonzero(ksp, nonzero));
  }
  if (accepted) *accepted = accept ? PETSC_TRUE : PETSC_FALSE;
  if (residual) *residual = relative;
  PetscFunctionReturn(0);
}

}  // extern "C"
