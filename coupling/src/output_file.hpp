// Files the library writes for its users (prediction files, VTK pieces and indices): checked before any
// heavy work, written where nothing else can be hurt (share/docs/reliability.md, "Outputs").
//
// A regular (or new) output is written to a temporary with a unique name beside it, created exclusively
// and without following links, with the mode a new file gets from the umask, then synced and renamed
// over the target: readers never see half a file, a failure leaves the previous file as it was, and no
// planted link or unrelated file is touched. A character device or a FIFO (`--output /dev/null`) is
// written in place. Directories, block devices, sockets, dangling links and files that are one of the
// run's inputs are refused.
#pragma once

#include <cstddef>
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

/// An output being written (see above). Local; not thread-safe.
class OutputFile {
 public:
  /// Checks the place again and opens the temporary (or the device / FIFO: a FIFO without a reader is an
  /// error, not a wait).
  OutputFile(const std::string& path, const std::string& what, std::span<const std::string> inputs = {});
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

 private:
  [[noreturn]] void fail(int error, const std::string& doing);
  std::string path_, what_;
  OutputPlace place_;
  std::string temporary_;
  int fd_ = -1;
  int slot_ = -1;  // in the signal-cleanup registry
};

/// Installs SIGTERM, SIGINT and SIGHUP handlers that remove the temporaries of unfinished OutputFiles and
/// then end the process as the signal would have (the command-line tool calls it; a program using the
/// library may). Earlier handlers are not chained.
void remove_temporaries_on_signals();

}  // namespace surrogate::detail
