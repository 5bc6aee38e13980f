#include "surrogate/mpi_comm.hpp"

#include <algorithm>
#include <climits>
#include <memory>
#include <string>
#include <vector>

#include "surrogate/transport.hpp"

namespace surrogate {

#if defined(SURROGATE_HAVE_NCCL)
namespace detail {
std::shared_ptr<DeviceTransport> make_nccl_transport(const MpiComm& comm, int device);  // nccl_comm.cpp
}  // namespace detail
#endif

std::shared_ptr<DeviceTransport> MpiComm::make_device_transport(int device) const {
#if defined(SURROGATE_HAVE_NCCL)
  if (std::shared_ptr<DeviceTransport> nccl = detail::make_nccl_transport(*this, device)) return nccl;
#endif
  return Comm::make_device_transport(device);
}

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(ErrorCode::communication, std::string(what) + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

MPI_Datatype mpi_type(DType type) {
  switch (type) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

// MPI counts are int: large transfers go in pieces of at most 1 GiB.
constexpr std::size_t kChunk = std::size_t{1} << 30;

int to_int(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX)) throw Error(ErrorCode::communication, std::string(what) + ": message too large for MPI");
  return static_cast<int>(n);
}

std::vector<int> to_ints(std::span<const std::size_t> values, const char* what) {
  std::vector<int> out;
  out.reserve(values.size());
  for (std::size_t v : values) out.push_back(to_int(v, what));
  return out;
}

}  // namespace

void MpiComm::check_communicator(MPI_Comm comm, const std::string& what) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    throw Error(ErrorCode::communication, what + ": MPI is " + (finalized ? "finalised" : "not initialised (call MPI_Init first)"));
  if (comm == MPI_COMM_NULL) throw Error(ErrorCode::invalid_argument, what + ": MPI_COMM_NULL given as communicator");
  // An invalid handle reports on MPI_COMM_WORLD's (MPI 3) or MPI_COMM_SELF's (MPI 4) error handler, fatal
  // by default: both return errors while the handle is asked its size, then are restored.
  MPI_Errhandler world_handler = MPI_ERRHANDLER_NULL, self_handler = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world_handler);
  MPI_Comm_get_errhandler(MPI_COMM_SELF, &self_handler);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  int size = 0, inter = 0;
  const int size_rc = MPI_Comm_size(comm, &size);
  const int inter_rc = size_rc == MPI_SUCCESS ? MPI_Comm_test_inter(comm, &inter) : size_rc;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, world_handler);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, self_handler);
  MPI_Errhandler_free(&world_handler);
  MPI_Errhandler_free(&self_handler);
  if (size_rc != MPI_SUCCESS || inter_rc != MPI_SUCCESS)
    throw Error(ErrorCode::invalid_argument, what + ": the communicator is not a valid MPI communicator handle");
  if (inter) throw Error(ErrorCode::invalid_argument, what + ": an intercommunicator was given; an intracommunicator is needed");
}

MpiComm::MpiComm(MPI_Comm comm) {
  check_communicator(comm, "communicator");
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::string MpiComm::name() const { return "MPI (" + std::to_string(size_) + " ranks)"; }

void MpiComm::allreduce(void* inout, std::size_t count, DType type, ReduceOp op) const {
  const std::size_t element = size_of(type);
  auto* bytes = static_cast<char*>(inout);
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(count - done, kChunk / element);
    check(MPI_Allreduce(MPI_IN_PLACE, bytes + done * element, static_cast<int>(n), mpi_type(type), mpi_op(op), comm_),
          "MPI_Allreduce");
    done += n;
  }
}

void MpiComm::broadcast(void* buffer, std::size_t bytes, int root) const {
  auto* data = static_cast<char*>(buffer);
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t n = std::min(bytes - done, kChunk);
    check(MPI_Bcast(data + done, static_cast<int>(n), MPI_BYTE, root, comm_), "MPI_Bcast");
    done += n;
  }
}

void MpiComm::allgather(const void* send, std::size_t bytes, void* recv) const {
  check(MPI_Allgather(send, to_int(bytes, "allgather"), MPI_BYTE, recv, to_int(bytes, "allgather"), MPI_BYTE, comm_),
        "MPI_Allgather");
}

void MpiComm::allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                         std::span<const std::size_t> recv_offsets) const {
  const auto counts = to_ints(recv_bytes, "allgatherv");
  const auto displs = to_ints(recv_offsets, "allgatherv");
  check(MPI_Allgatherv(send, to_int(send_bytes, "allgatherv"), MPI_BYTE, recv, counts.data(), displs.data(), MPI_BYTE,
                       comm_),
        "MPI_Allgatherv");
}

void MpiComm::alltoallv(const void* send, std::span<const std::size_t> send_bytes,
                        std::span<const std::size_t> send_offsets, void* recv, std::span<const std::size_t> recv_bytes,
                        std::span<const std::size_t> recv_offsets) const {
  const auto sc = to_ints(send_bytes, "alltoallv"), sd = to_ints(send_offsets, "alltoallv");
  const auto rc = to_ints(recv_bytes, "alltoallv"), rd = to_ints(recv_offsets, "alltoallv");
  check(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE, comm_),
        "MPI_Alltoallv");
}

void MpiComm::sendrecv(const void* send, std::size_t send_bytes, int dest, void* recv, std::size_t recv_bytes,
                       int source, int tag) const {
  check(MPI_Sendrecv(send, to_int(send_bytes, "sendrecv"), MPI_BYTE, dest < 0 ? MPI_PROC_NULL : dest, tag, recv,
                     to_int(recv_bytes, "sendrecv"), MPI_BYTE, source < 0 ? MPI_PROC_NULL : source, tag, comm_,
                     MPI_STATUS_IGNORE),
        "MPI_Sendrecv");
}

void MpiComm::barrier() const { check(MPI_Barrier(comm_), "MPI_Barrier"); }

}  // namespace surrogate
