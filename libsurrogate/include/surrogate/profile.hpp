// Where a plan's forwards spend their time on this rank: seconds and calls per named phase (building the
// plan, each layer kind), for `surrogate predict --timing` and Surrogate::profile. Families mark phases
// with ScopedPhase (share/docs/adding-a-family.md, "Timing").
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace surrogate {

class Profile {
 public:
  struct Phase {
    std::string name;
    double seconds = 0.0;
    std::uint64_t calls = 0;
    int depth = 0;  // 0 for an outermost phase, 1 for a phase inside it, ...
  };
  /// Adds `seconds` to the phase `name` (created at the end of the list on first use, at depth 0).
  void add(const std::string& name, double seconds);
  /// The phases in the order they first started (an outer phase before the phases inside it).
  std::vector<Phase> phases() const;
  double seconds(const std::string& name) const;
  void clear();

  /// The innermost phase running now on the thread that runs the forward ("" when none); safe to read
  /// from another thread (a progress line).
  std::string current() const;

  // Used by ScopedPhase.
  void begin(const std::string& name);
  void end(const std::string& name, const std::string& outer, double seconds);

 private:
  mutable std::mutex mutex_;
  std::vector<Phase> phases_;
  std::string current_;
  int depth_ = 0;
};

/// The name of the innermost phase running now in this process (a string literal; "" when none), for a
/// progress line printed by another thread.
const char* running_phase() noexcept;

/// The profile the phases of this thread go to (Model::plan and Model::predict set it to the plan's
/// profile for the duration of the build or the forward; nullptr: phases are not recorded).
Profile* current_profile() noexcept;

/// Sets the current profile of this thread for its lifetime, then restores the previous one.
class ProfileScope {
 public:
  explicit ProfileScope(Profile* profile) noexcept;
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  Profile* previous_;
};

/// Times its scope as the phase `name` of the current profile (nothing when there is none, e.g. inside
/// OpenMP worker threads). Phases nest: the time of an inner phase also counts in the outer one.
class ScopedPhase {
 public:
  explicit ScopedPhase(const char* name);
  ~ScopedPhase();
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  Profile* profile_;
  const char* name_;
  const char* outer_running_ = "";
  std::string outer_;
  double start_ = 0.0;
};

}  // namespace surrogate
