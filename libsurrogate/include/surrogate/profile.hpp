// Where a plan's forwards spend their time on this rank: seconds and calls per named phase (building the
// plan, each layer kind), for `surrogate predict --timing`, Surrogate::profile and PETSc's -log_view.
// Families declare phase names with PhaseName and mark phases with ScopedPhase (adding-a-family.md §6b).
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

/// The name of a phase, declared once at namespace scope (`const PhaseName kTreePhase{"ball tree"};`).
/// Declaring registers the name at static initialisation, so every name an executable can time is known
/// before its first forward and is the same on every rank: what profilers that register names
/// collectively (PETSc's log events) need.
class PhaseName {
 public:
  explicit PhaseName(const char* name);  // a string literal (kept by pointer)
  const char* c_str() const noexcept { return name_; }

 private:
  const char* name_;
};

/// Every declared phase name, sorted and without duplicates: identical on every rank of one executable.
std::vector<std::string> phase_names();

/// Told where phases begin and end on the thread that runs a forward (the thread with a current profile),
/// including the exchanges' moves (the phase "exchange", which the profile itself leaves to Traffic).
/// The PETSc coupling installs one that turns phases into log events.
class PhaseObserver {
 public:
  virtual ~PhaseObserver() = default;
  virtual void begin(const char* name) noexcept = 0;
  virtual void end(const char* name) noexcept = 0;
};
/// Installs the process's observer (nullptr: none). Not thread-safe against running forwards.
void set_phase_observer(PhaseObserver* observer) noexcept;

/// The phase name of the exchanges' moves (ExchangePlan), seen by observers only.
extern const PhaseName kExchangePhase;

/// Tells the observer (if any) that the phase `name` begins or ends, when this thread has a current
/// profile; does not record the phase in the profile.
class ObservedPhase {
 public:
  explicit ObservedPhase(const PhaseName& name) noexcept;
  ~ObservedPhase();
  ObservedPhase(const ObservedPhase&) = delete;
  ObservedPhase& operator=(const ObservedPhase&) = delete;

 private:
  const char* name_ = nullptr;  // nullptr: not observed
};

/// Times its scope as the phase `name` of the current profile (nothing when there is none, e.g. inside
/// OpenMP worker threads). Phases nest: the time of an inner phase also counts in the outer one.
class ScopedPhase {
 public:
  explicit ScopedPhase(const PhaseName& name);
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
