// NCCL communicator (builds with SURROGATE_HAVE_NCCL) and the DeviceTransport it provides to the exchange
// plans and the device forwards of the models: MpiComm::make_device_transport chooses it when every rank
// owns its GPU (share/docs/cuda.md, "NCCL").
#include "surrogate/nccl_comm.hpp"

#include <nccl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "agreed_enqueue.hpp"
#include "surrogate/transport.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate {

struct NcclComm::Impl {
  ncclComm_t comm = nullptr;
  MPI_Comm mpi = MPI_COMM_NULL;  // our duplicate: bootstrap and connects()
  int rank = 0, size = 1, device = -1;
};

namespace {

std::string nccl_error(ncclResult_t r, const char* call) {
  return std::string(call) + " failed: " + ncclGetErrorString(r);
}

ncclDataType_t nccl_type(DType type) {
  switch (type) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

bool nccl_disabled_by_environment() {
  const char* v = std::getenv("SURROGATE_NCCL");
  if (!v) return false;
  const std::string s(v);
  return s == "0" || s == "off" || s == "OFF" || s == "no" || s == "false";
}

struct Identity {
  char host[256];
  char bus[64];
  std::int32_t device_ok;
  std::int32_t enabled;
};

void free_mpi(MPI_Comm& comm) noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  comm = MPI_COMM_NULL;
}

}  // namespace

bool NcclComm::usable(const MpiComm& comm, int device, std::string* why) {
  Identity me;
  std::memset(&me, 0, sizeof me);
  if (gethostname(me.host, sizeof me.host - 1) != 0) std::strcpy(me.host, "?");
  me.device_ok = cudaDeviceGetPCIBusId(me.bus, static_cast<int>(sizeof me.bus) - 1, device) == cudaSuccess;
  (void)cudaGetLastError();
  me.enabled = !nccl_disabled_by_environment();
  std::vector<Identity> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(&me, sizeof me, all.data());
  auto fail = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  for (int r = 0; r < comm.size(); ++r) {
    const Identity& id = all[static_cast<std::size_t>(r)];
    if (!id.enabled) return fail("SURROGATE_NCCL disables NCCL on rank " + std::to_string(r));
    if (!id.device_ok) return fail("rank " + std::to_string(r) + " cannot query the PCI bus id of its CUDA device");
  }
  for (int r = 0; r < comm.size(); ++r)
    for (int s = r + 1; s < comm.size(); ++s) {
      const Identity& a = all[static_cast<std::size_t>(r)];
      const Identity& b = all[static_cast<std::size_t>(s)];
      if (std::strcmp(a.host, b.host) == 0 && std::strcmp(a.bus, b.bus) == 0)
        return fail("ranks " + std::to_string(r) + " and " + std::to_string(s) + " share the GPU " + a.bus + " on " +
                    a.host);
    }
  return true;
}

NcclComm::NcclComm(const MpiComm& comm, int device) : impl_(std::make_unique<Impl>()) {
  impl_->rank = comm.rank();
  impl_->size = comm.size();
  impl_->device = device;
  // 1. Our own duplicate of the communicator, and the unique id from rank 0 (with its status).
  if (MPI_Comm_dup(comm.get(), &impl_->mpi) != MPI_SUCCESS)
    throw Error(ErrorCode::communication, "NcclComm: MPI_Comm_dup failed");
  MPI_Comm_set_errhandler(impl_->mpi, MPI_ERRORS_RETURN);
  struct {
    ncclUniqueId id;
    std::int32_t status;
  } boot;
  std::memset(&boot, 0, sizeof boot);
  if (impl_->rank == 0) boot.status = static_cast<std::int32_t>(ncclGetUniqueId(&boot.id));
  if (MPI_Bcast(&boot, sizeof boot, MPI_BYTE, 0, impl_->mpi) != MPI_SUCCESS) {
    free_mpi(impl_->mpi);
    throw Error(ErrorCode::communication, "NcclComm: MPI_Bcast of the NCCL unique id failed");
  }
  if (boot.status != ncclSuccess) {
    free_mpi(impl_->mpi);
    throw Error(ErrorCode::communication,
                "rank 0: " + nccl_error(static_cast<ncclResult_t>(boot.status), "ncclGetUniqueId"));
  }
  // 2. Every rank checks that it can use its device before anyone enters the (blocking) initialisation.
  Status status;
  try {
    kernels::cuda::DeviceGuard guard(device);
  } catch (...) {
    status = Status::from_current_exception();
  }
  Status agreed = comm.agree(status);
  if (!agreed.ok()) {
    free_mpi(impl_->mpi);
    throw Error(ErrorCode::communication, "NcclComm: " + agreed.message);
  }
  // 3. ncclCommInitRank with the device current, then agree on the outcome (nothing may escape before
  //    the agreement: the other ranks would wait in it).
  try {
    kernels::cuda::DeviceGuard guard(device);
    const ncclResult_t r = ncclCommInitRank(&impl_->comm, impl_->size, boot.id, impl_->rank);
    if (r != ncclSuccess) {
      impl_->comm = nullptr;
      status = {ErrorCode::communication, nccl_error(r, "ncclCommInitRank") + " on CUDA device " + std::to_string(device)};
    }
  } catch (...) {
    status = Status::from_current_exception();
  }
  agreed = comm.agree(status);
  if (!agreed.ok()) {
    abort();
    free_mpi(impl_->mpi);
    agreed.raise();
  }
}

void NcclComm::abort() noexcept {
  if (!impl_->comm) return;
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  (void)cudaSetDevice(impl_->device);
  ncclCommAbort(impl_->comm);
  if (previous >= 0) (void)cudaSetDevice(previous);
  impl_->comm = nullptr;
}

bool NcclComm::aborted() const { return impl_->comm == nullptr; }

void NcclComm::refuse_if_aborted() const {
  if (!impl_->comm)
    throw Error(ErrorCode::communication,
                "the NCCL communicator of CUDA device " + std::to_string(impl_->device) + " was aborted");
}

NcclComm::~NcclComm() {
  if (impl_->comm) {
    try {
      kernels::cuda::DeviceGuard guard(impl_->device);
      ncclCommDestroy(impl_->comm);
    } catch (...) {
      ncclCommDestroy(impl_->comm);
    }
  }
  free_mpi(impl_->mpi);
}

int NcclComm::rank() const { return impl_->rank; }
int NcclComm::size() const { return impl_->size; }
int NcclComm::device() const { return impl_->device; }

bool NcclComm::connects(const MpiComm& comm) const {
  int result = MPI_UNEQUAL;
  if (MPI_Comm_compare(impl_->mpi, comm.get(), &result) != MPI_SUCCESS) return false;
  return result == MPI_IDENT || result == MPI_CONGRUENT;
}

void NcclComm::allreduce(void* device_data, std::size_t count, DType type, ReduceOp op, cudaStream_t stream) const {
  refuse_if_aborted();
  ncclResult_t r = ncclSuccess;
  try {
    kernels::cuda::DeviceGuard guard(impl_->device);
    r = ncclAllReduce(device_data, device_data, count, nccl_type(type), nccl_op(op), impl_->comm, stream);
  } catch (const kernels::cuda::CudaError& e) {
    throw Error(ErrorCode::internal, "CUDA device " + std::to_string(impl_->device) + ": " + e.what());
  }
  if (r != ncclSuccess)
    throw Error(ErrorCode::communication,
                nccl_error(r, "ncclAllReduce") + " on CUDA device " + std::to_string(impl_->device));
}

// ---------------------------------------------------------------------------------------------------
// The device transport.

namespace {

/// Runs `call` (an NCCL group) with the device current and turns its failure into Error(communication).
template <class F>
void nccl_group(int device, const char* what, F&& call) {
  ncclResult_t r = ncclSuccess;
  try {
    kernels::cuda::DeviceGuard guard(device);
    if ((r = ncclGroupStart()) == ncclSuccess) {
      const ncclResult_t inner = call();
      r = ncclGroupEnd();
      if (inner != ncclSuccess) r = inner;
    }
  } catch (const kernels::cuda::CudaError& e) {
    throw Error(ErrorCode::internal, "CUDA device " + std::to_string(device) + ": " + e.what());
  }
  if (r != ncclSuccess)
    throw Error(ErrorCode::communication, nccl_error(r, what) + " on CUDA device " + std::to_string(device));
}

/// Every call enqueues on the caller's stream and agrees on the enqueue (AgreedEnqueue): a failure on one
/// rank aborts the NCCL communicator on every rank instead of leaving its peers waiting for their streams.
class NcclTransport final : public DeviceTransport {
 public:
  NcclTransport(const MpiComm& comm, int device) : DeviceTransport(device), nccl_(comm, device), agreed_(comm) {}
  std::string name() const override { return "NCCL (" + std::to_string(nccl_.size()) + " ranks)"; }
  bool direct() const override { return true; }
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, std::span<const std::size_t> send_offsets,
                 void* recv, std::span<const std::size_t> recv_bytes, std::span<const std::size_t> recv_offsets,
                 void* stream) override {
    enqueue([&] { nccl_.alltoallv(send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets, cuda_stream(stream)); });
  }
  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  std::span<const std::size_t> recv_offsets, void* stream) override {
    enqueue([&] { nccl_.allgatherv(send, send_bytes, recv, recv_bytes, recv_offsets, cuda_stream(stream)); });
  }
  void allreduce(void* data, std::size_t count, DType type, ReduceOp op, void* stream) override {
    enqueue([&] { nccl_.allreduce(data, count, type, op, cuda_stream(stream)); });
  }

 private:
  static cudaStream_t cuda_stream(void* stream) { return static_cast<cudaStream_t>(stream); }
  template <class F>
  void enqueue(F&& call) {
    agreed_(std::forward<F>(call), [this]() noexcept { nccl_.abort(); });
  }
  NcclComm nccl_;
  detail::AgreedEnqueue agreed_;
};

}  // namespace

void NcclComm::alltoallv(const void* send, std::span<const std::size_t> send_bytes,
                         std::span<const std::size_t> send_offsets, void* recv, std::span<const std::size_t> recv_bytes,
                         std::span<const std::size_t> recv_offsets, cudaStream_t stream) const {
  refuse_if_aborted();
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  nccl_group(impl_->device, "ncclSend/ncclRecv", [&]() -> ncclResult_t {
    for (int q = 0; q < impl_->size; ++q) {
      const auto uq = static_cast<std::size_t>(q);
      if (send_bytes[uq] > 0)
        if (const ncclResult_t r = ncclSend(in + send_offsets[uq], send_bytes[uq], ncclUint8, q, impl_->comm, stream);
            r != ncclSuccess)
          return r;
      if (recv_bytes[uq] > 0)
        if (const ncclResult_t r = ncclRecv(out + recv_offsets[uq], recv_bytes[uq], ncclUint8, q, impl_->comm, stream);
            r != ncclSuccess)
          return r;
    }
    return ncclSuccess;
  });
}

void NcclComm::allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                          std::span<const std::size_t> recv_offsets, cudaStream_t stream) const {
  refuse_if_aborted();
  auto* out = static_cast<char*>(recv);
  // Equal parts: one ncclAllGather; otherwise every rank broadcasts its part (variable counts).
  bool equal = true;
  for (const std::size_t b : recv_bytes) equal = equal && b == recv_bytes[0];
  bool packed = equal;
  for (std::size_t q = 0; q < recv_offsets.size(); ++q) packed = packed && recv_offsets[q] == q * recv_bytes[0];
  nccl_group(impl_->device, packed ? "ncclAllGather" : "ncclBroadcast", [&]() -> ncclResult_t {
    if (packed) return recv_bytes[0] > 0 ? ncclAllGather(send, out, send_bytes, ncclUint8, impl_->comm, stream) : ncclSuccess;
    for (int q = 0; q < impl_->size; ++q) {
      const auto uq = static_cast<std::size_t>(q);
      if (recv_bytes[uq] == 0) continue;
      if (const ncclResult_t r = ncclBroadcast(send, out + recv_offsets[uq], recv_bytes[uq], ncclUint8, q, impl_->comm, stream);
          r != ncclSuccess)
        return r;
    }
    return ncclSuccess;
  });
}

namespace detail {

std::shared_ptr<DeviceTransport> make_nccl_transport(const MpiComm& comm, int device) {
  if (comm.size() < 2 || !NcclComm::usable(comm, device)) return nullptr;  // collective, same answer everywhere
  return std::make_shared<NcclTransport>(comm, device);                   // collective; agrees on its outcome
}

}  // namespace detail
}  // namespace surrogate
