// Profile, ProfileScope and ScopedPhase (surrogate/profile.hpp).
#include "surrogate/profile.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>

namespace surrogate {
namespace {

thread_local Profile* t_profile = nullptr;
std::atomic<const char*> g_running{""};
std::atomic<PhaseObserver*> g_observer{nullptr};

// The declared names (a function-local static: PhaseNames of other translation units register during
// static initialisation, in an order this must not depend on).
struct NameRegistry {
  std::mutex mutex;
  std::vector<std::string> names;
};
NameRegistry& name_registry() {
  static NameRegistry registry;
  return registry;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void Profile::add(const std::string& name, double seconds) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (Phase& p : phases_)
    if (p.name == name) {
      p.seconds += seconds;
      ++p.calls;
      return;
    }
  phases_.push_back({name, seconds, 1});
}

std::vector<Profile::Phase> Profile::phases() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return phases_;
}

double Profile::seconds(const std::string& name) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const Phase& p : phases_)
    if (p.name == name) return p.seconds;
  return 0.0;
}

void Profile::clear() {
  const std::lock_guard<std::mutex> lock(mutex_);
  phases_.clear();
  depth_ = 0;
}

std::string Profile::current() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return current_;
}

void Profile::begin(const std::string& name) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    // The entry exists from the phase's first start, so that phases list outer before inner.
    bool known = false;
    for (const Phase& p : phases_) known = known || p.name == name;
    if (!known) phases_.push_back({name, 0.0, 0, depth_});
    current_ = name;
    ++depth_;
  }
}

void Profile::end(const std::string& name, const std::string& outer, double seconds) {
  add(name, seconds);
  const std::lock_guard<std::mutex> lock(mutex_);
  current_ = outer;
  if (depth_ > 0) --depth_;
}

PhaseName::PhaseName(const char* name) : name_(name) {
  NameRegistry& r = name_registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.names.emplace_back(name);
}

std::vector<std::string> phase_names() {
  NameRegistry& r = name_registry();
  std::vector<std::string> names;
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    names = r.names;
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

const PhaseName kExchangePhase{"exchange"};

void set_phase_observer(PhaseObserver* observer) noexcept { g_observer.store(observer); }

ObservedPhase::ObservedPhase(const PhaseName& name) noexcept {
  PhaseObserver* observer = g_observer.load();
  if (!t_profile || !observer) return;
  name_ = name.c_str();
  observer->begin(name_);
}

ObservedPhase::~ObservedPhase() {
  if (!name_) return;
  if (PhaseObserver* observer = g_observer.load()) observer->end(name_);
}

Profile* current_profile() noexcept { return t_profile; }
const char* running_phase() noexcept { return g_running.load(std::memory_order_relaxed); }

ProfileScope::ProfileScope(Profile* profile) noexcept : previous_(t_profile) { t_profile = profile; }
ProfileScope::~ProfileScope() { t_profile = previous_; }

ScopedPhase::ScopedPhase(const PhaseName& name) : profile_(t_profile), name_(name.c_str()) {
  if (!profile_) return;
  outer_ = profile_->current();
  outer_running_ = g_running.exchange(name_, std::memory_order_relaxed);
  profile_->begin(name_);
  if (PhaseObserver* observer = g_observer.load()) observer->begin(name_);
  start_ = now();
}

ScopedPhase::~ScopedPhase() {
  if (profile_) {
    if (PhaseObserver* observer = g_observer.load()) observer->end(name_);
    g_running.store(outer_running_, std::memory_order_relaxed);
    try {
      profile_->end(name_, outer_, now() - start_);
    } catch (...) {  // std::bad_alloc must not escape a destructor; the phase goes unrecorded
    }
  }
}

}  // namespace surrogate
