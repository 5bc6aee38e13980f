#include "output_file.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <system_error>

#include "surrogate/error.hpp"

namespace surrogate::detail {
namespace {

std::string reason(int error) { return std::generic_category().message(error); }

std::string quoted(const std::string& what, const std::string& path) { return what + " '" + path + "'"; }

/// The directory part of a path ("." for a bare name, "/" for a file in the root).
std::string directory_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

/// Test hooks (share/docs/reliability.md): with SURROGATE_TEST_FAIL_WRITE set, writing an output fails as
/// on a full disk (ENOSPC), for tests where no small file system can be mounted; with
/// SURROGATE_TEST_SIGNAL_IN_WRITE set, the process sends itself SIGTERM once a temporary is written and
/// synced, before the rename (as a job killed at that moment).
bool write_failure_injected() {
  const char* value = std::getenv("SURROGATE_TEST_FAIL_WRITE");
  return value && *value;
}

bool signal_in_write_injected() {
  const char* value = std::getenv("SURROGATE_TEST_SIGNAL_IN_WRITE");
  return value && *value;
}

// ---------------------------------------------------------------------------------------------------
// Temporaries to remove when a signal ends the process: fixed slots that the handler reads without a
// lock (unlink is async-signal-safe); the name is written before its slot is marked used.
constexpr int kSlots = 64;
constexpr std::size_t kNameBytes = 4096;
struct Slot {
  std::atomic<bool> used{false};
  char name[kNameBytes];
};
std::array<Slot, kSlots> g_slots;
std::mutex g_slots_mutex;

int register_temporary(const std::string& name) {
  if (name.size() >= kNameBytes) return -1;
  const std::lock_guard<std::mutex> lock(g_slots_mutex);
  for (int i = 0; i < kSlots; ++i) {
    Slot& slot = g_slots[static_cast<std::size_t>(i)];
    if (slot.used.load(std::memory_order_relaxed)) continue;
    std::memcpy(slot.name, name.c_str(), name.size() + 1);
    slot.used.store(true, std::memory_order_release);
    return i;
  }
  return -1;  // more than kSlots outputs open at once: this one is not removed on a signal
}

void unregister_temporary(int slot) {
  if (slot < 0) return;
  const std::lock_guard<std::mutex> lock(g_slots_mutex);
  g_slots[static_cast<std::size_t>(slot)].used.store(false, std::memory_order_release);
}

extern "C" void remove_temporaries_and_reraise(int signal_number) {
  for (Slot& slot : g_slots)
    if (slot.used.load(std::memory_order_acquire)) ::unlink(slot.name);
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

/// A unique name for a temporary in `directory`: short (so that any legal output name works) and hidden.
std::string temporary_name(const std::string& directory) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  unsigned char random[10];
  std::size_t got = 0;
  while (got < sizeof random) {
    const ssize_t n = ::getrandom(random + got, sizeof random - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(ErrorCode::io, "cannot draw a name for a temporary file: " + reason(errno));
    got += static_cast<std::size_t>(n);
  }
  std::string name = directory == "/" ? "/" : directory + "/";
  name += ".surrogate-";
  for (const unsigned char r : random) name += kAlphabet[r % (sizeof kAlphabet - 1)];
  return name + ".tmp";
}

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

}  // namespace

OutputPlace check_output_place(const std::string& path, const std::string& what, std::span<const std::string> inputs) {
  if (path.empty()) throw Error(ErrorCode::invalid_argument, what + ": empty file name");
  if (path.back() == '/') throw Error(ErrorCode::io, quoted(what, path) + " names a directory");
  OutputPlace place;
  place.target = path;
  struct stat link_info {};
  struct stat info {};
  bool exists = false;
  if (::lstat(path.c_str(), &link_info) == 0) {
    exists = true;
    if (S_ISLNK(link_info.st_mode)) {
      // Written through the link: the file it names is replaced, the link stays.
      if (::stat(path.c_str(), &info) != 0)
        throw Error(ErrorCode::io, quoted(what, path) + " is a symbolic link to a missing or unreachable file (" +
                                       reason(errno) + "); give the path of the file to write");
      char* resolved = ::realpath(path.c_str(), nullptr);
      if (!resolved) throw Error(ErrorCode::io, quoted(what, path) + ": cannot resolve its symbolic link: " + reason(errno));
      place.target = resolved;
      std::free(resolved);
    } else {
      info = link_info;
    }
  } else if (errno != ENOENT) {
    throw Error(ErrorCode::io, quoted(what, path) + ": " + reason(errno));
  }
  place.directory = directory_of(place.target);

  if (exists) {
    for (const std::string& input : inputs) {
      struct stat input_info {};
      if (!input.empty() && ::stat(input.c_str(), &input_info) == 0 && same_file(info, input_info))
        throw Error(ErrorCode::invalid_argument, quoted(what, path) + " is the same file as the input '" + input +
                                                     "': it would be overwritten; choose another output");
    }
    if (S_ISCHR(info.st_mode) || S_ISFIFO(info.st_mode)) {
      place.kind = OutputPlace::Kind::stream;
      return place;
    }
    if (S_ISDIR(info.st_mode)) throw Error(ErrorCode::io, quoted(what, path) + " is a directory");
    if (!S_ISREG(info.st_mode))
      throw Error(ErrorCode::io, quoted(what, path) + " exists and is " +
                                     (S_ISBLK(info.st_mode) ? "a block device" : S_ISSOCK(info.st_mode) ? "a socket" : "not a regular file") +
                                     ": refused (outputs are regular files, character devices such as /dev/null, or FIFOs)");
    if (::access(place.target.c_str(), W_OK) != 0)
      throw Error(ErrorCode::io, quoted(what, path) + " exists and is not writable (" + reason(errno) + ")");
  }
  struct stat directory_info {};
  if (::stat(place.directory.c_str(), &directory_info) != 0)
    throw Error(ErrorCode::io, quoted(what, path) + ": its directory '" + place.directory + "' " +
                                   (errno == ENOENT ? "does not exist" : "cannot be reached (" + reason(errno) + ")"));
  if (!S_ISDIR(directory_info.st_mode))
    throw Error(ErrorCode::io, quoted(what, path) + ": '" + place.directory + "' is not a directory");
  if (::access(place.directory.c_str(), W_OK | X_OK) != 0)
    throw Error(ErrorCode::io, quoted(what, path) + ": cannot create files in its directory '" + place.directory +
                                   "' (" + reason(errno) + ")");
  return place;
}

OutputFile::OutputFile(const std::string& path, const std::string& what, std::span<const std::string> inputs,
                       OutputWriters writers)
    : path_(path), what_(what), place_(check_output_place(path, what, inputs)) {
  if (place_.kind == OutputPlace::Kind::stream && writers == OutputWriters::by_name)
    throw Error(ErrorCode::io, quoted(what_, path_) + " is a device or a FIFO: refused (this output is written by "
                                                       "several processes with MPI-IO; it must be a regular file)");
  if (place_.kind == OutputPlace::Kind::stream) {
    // O_NONBLOCK: a FIFO nobody reads is ENXIO instead of a wait for ever; cleared once open.
    fd_ = ::open(place_.target.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) {
      const int error = errno;
      throw Error(ErrorCode::io, "cannot write " + quoted(what_, path_) + ": " +
                                     (error == ENXIO ? std::string("a FIFO with no reader") : reason(error)));
    }
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
    return;
  }
  for (int attempt = 0; fd_ < 0; ++attempt) {
    temporary_ = temporary_name(place_.directory);
    // O_EXCL with O_CREAT never follows a link (a planted link is EEXIST); the umask sets the mode.
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ >= 0) break;
    const int error = errno;
    if (error != EEXIST || attempt == 100) {
      temporary_.clear();
      throw Error(ErrorCode::io, "cannot write " + quoted(what_, path_) + ": cannot create a temporary file in '" +
                                     place_.directory + "': " + reason(error));
    }
  }
  slot_ = register_temporary(temporary_);
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
  unregister_temporary(slot_);
  slot_ = -1;
}

void OutputFile::fail(int error, const std::string& doing) {
  discard();
  throw Error(ErrorCode::io, "cannot write " + quoted(what_, path_) + ": " + reason(error) + doing +
                                 (place_.kind == OutputPlace::Kind::replace ? " (the previous file, if any, is left as it was)"
                                                                            : ""));
}

void OutputFile::write(std::span<const unsigned char> bytes) {
  if (fd_ < 0) throw Error(ErrorCode::internal, "OutputFile::write after commit or discard");
  if (write_failure_injected()) fail(ENOSPC, "");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(n < 0 ? errno : EIO, "");
    done += static_cast<std::size_t>(n);
  }
}

void OutputFile::write(const std::string& text) {
  write(std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(text.data()), text.size()));
}

std::uint64_t OutputFile::size() const {
  struct stat info {};
  if (fd_ < 0 || ::fstat(fd_, &info) != 0) return 0;
  return static_cast<std::uint64_t>(info.st_size);
}

void OutputFile::reserve(std::uint64_t bytes) {
  if (fd_ < 0) throw Error(ErrorCode::internal, "OutputFile::reserve after commit or discard");
  if (place_.kind == OutputPlace::Kind::stream || bytes == 0) return;
  if (write_failure_injected()) fail(ENOSPC, " (reserving " + std::to_string(bytes) + " bytes)");
  int result = 0;
  do {
    result = ::fallocate(fd_, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes));
  } while (result != 0 && errno == EINTR);
  if (result == 0) {
    reserved_ = true;
    return;
  }
  const int error = errno;
  if (error == ENOSPC || error == EDQUOT || error == EFBIG || error == EIO)
    fail(error, " (reserving " + std::to_string(bytes) + " bytes)");
  // EOPNOTSUPP, ENOSYS, ...: this file system cannot reserve; the writers go on without.
}

void OutputFile::commit() {
  if (fd_ < 0) throw Error(ErrorCode::internal, "OutputFile::commit after commit or discard");
  if (reserved_) {
    // Gives back the reserved blocks beyond the end that the writers did not use (ext4, tmpfs, ...).
    struct stat info {};
    if (::fstat(fd_, &info) == 0) {
      const int given_back = ::ftruncate(fd_, info.st_size);  // best effort: the file is complete either way
      (void)given_back;
    }
    reserved_ = false;
  }
  if (place_.kind == OutputPlace::Kind::stream) {
    const int closed = ::close(fd_);
    fd_ = -1;
    if (closed != 0 && errno != EINTR) fail(errno, "");
    return;
  }
  if (::fsync(fd_) != 0) fail(errno, "");
  if (signal_in_write_injected()) std::raise(SIGTERM);
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0 && errno != EINTR) fail(errno, "");
  if (::rename(temporary_.c_str(), place_.target.c_str()) != 0)
    fail(errno, " (moving the finished file into place)");
  temporary_.clear();
  unregister_temporary(slot_);
  slot_ = -1;
  // The rename itself reaches the disk with the directory (best effort: some file systems refuse it).
  const int directory = ::open(place_.directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory >= 0) {
    (void)::fsync(directory);
    ::close(directory);
  }
}

void remove_temporaries_on_signals() {
  for (const int signal_number : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction action {};
    action.sa_handler = remove_temporaries_and_reraise;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    ::sigaction(signal_number, &action, nullptr);
  }
}

}  // namespace surrogate::detail
