// Files the library writes for its users (prediction files, VTK pieces and indices): checked before any
// heavy work, written where nothing else can be hurt (share/docs/reliability.md, "Outputs").
//
// A regular (or new) output is written to a temporary with a unique name beside it, created exclusively
// and without following links, with the mode a new file gets from the umask, then synced and renamed
// over the target: readers never see half a file, a failure leaves the previous file as it was, and no
// planted link or unrelated file is touched. A character device or a FIFO (`--output /dev/null`) is
// written in place. Directories, block devices, sockets, dangling links and files that are one of the
// run's inputs are refused.
//
// An output that several processes write (a VTKHDF step, written by every rank with parallel HDF5) is
// created the same way by one process, which hands temporary_path() to the others; they open it by name,
// write and close it, and the creating process then commits it (OutputWriters::by_name: the target must
// be a regular file or new, since MPI-IO cannot write a FIFO or a device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace surrogate::detail {

/// Where an output goes once checked.
struct OutputPlace {
  enum class Kind { replace, stream } kind = Kind::replace;
  std::string target;     // the file renamed over (a link's target when the output is a symbolic link)
  std::string directory;  // where the temporary is created (the target's directory)
};

/// Checks that `path` can be written as an output without harm (above) and is none of `inputs` (the same
/// device and inode, through links); throws Error(io) or Error(invalid_argument) naming `what` ("output
/// file", "--output") and the path. Local: callers agree on the outcome.
OutputPlace check_output_place(const std::string& path, const std::string& what,
                               std::span<const std::string> inputs = {});

/// Who writes an output's bytes: this process through OutputFile::write, or also other processes that
/// open OutputFile::temporary_path() by name.
enum class OutputWriters { this_process, by_name };

/// An output being written (see above). Local; not thread-safe.
class OutputFile {
 public:
  /// Checks the place again and opens the temporary (or the device / FIFO: a FIFO without a reader is an
  /// error, not a wait). With OutputWriters::by_name a device or FIFO is refused (Error(io)).
  OutputFile(const std::string& path, const std::string& what, std::span<const std::string> inputs = {},
             OutputWriters writers = OutputWriters::this_process);
  ~OutputFile();  // removes the temporary unless commit() succeeded
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  /// Appends bytes; throws Error(io) with the system's reason.
  void write(std::span<const unsigned char> bytes);
  void write(const std::string& text);
  /// Syncs and closes the temporary and renames it over the target (a stream is closed); throws Error(io)
  /// and leaves the previous file as it was.
  void commit();
  /// Closes and removes the temporary now (idempotent); what the destructor does.
  void discard() noexcept;

  const std::string& path() const { return path_; }
  /// The temporary's path, for the other writers of OutputWriters::by_name.
  const std::string& temporary_path() const { return temporary_; }
  /// The temporary's size now (what the other writers have written so far).
  std::uint64_t size() const;
  /// Reserves `bytes` of disk for the temporary without changing its size (fallocate, KEEP_SIZE), so
  /// that writers that cannot fail cleanly on a full disk (parallel HDF5) find the space; throws Error(io)
  /// on ENOSPC or EDQUOT (and under SURROGATE_TEST_FAIL_WRITE), does nothing where the file system cannot
  /// reserve. commit() gives back what was not used.
  void reserve(std::uint64_t bytes);

 private:
  [[noreturn]] void fail(int error, const std::string& doing);
  std::string path_, what_;
  OutputPlace place_;
  std::string temporary_;
  int fd_ = -1;
  int slot_ = -1;  // in the signal-cleanup registry
  bool reserved_ = false;
};

/// Installs SIGTERM, SIGINT and SIGHUP handlers that remove the temporaries of unfinished OutputFiles and
/// then end the process as the signal would have (the command-line tool calls it; a program using the
/// library may). Earlier handlers are not chained.
void remove_temporaries_on_signals();

}  // namespace surrogate::detail
