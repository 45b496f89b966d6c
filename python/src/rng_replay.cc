#include "rng_replay.h"

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <mutex>

namespace hyperoffload::python {
namespace {

at::Generator clone_of(at::Generator generator) {
  std::scoped_lock lock(generator.mutex());
  return generator.clone();
}

// Sets `generator` to the state `state` (a clone) holds.
void set_from(at::Generator generator, at::Generator state) {
  at::Tensor bytes;
  {
    std::scoped_lock lock(state.mutex());
    bytes = state.get_state();
  }
  std::scoped_lock lock(generator.mutex());
  generator.set_state(bytes);
}

}  // namespace

SavedGenerators::SavedGenerators(const std::optional<at::Generator>& explicit_generator,
                                 const std::vector<c10::Device>& devices) {
  if (explicit_generator && explicit_generator->defined()) {
    saved_.emplace_back(*explicit_generator, clone_of(*explicit_generator));
    return;
  }
  std::vector<c10::Device> seen;
  for (const c10::Device& device : devices) {
    if (device.is_meta()) continue;
    // A device without an index draws from its current device's generator.
    if (std::find(seen.begin(), seen.end(), device) == seen.end()) seen.push_back(device);
  }
  if (seen.empty()) seen.emplace_back(c10::kCPU);
  for (const c10::Device& device : seen) {
    at::Generator generator = at::globalContext().defaultGenerator(device);
    saved_.emplace_back(generator, clone_of(generator));
  }
}

SavedGenerators::Scope::Scope(const SavedGenerators& saved) {
  restore_.reserve(saved.saved_.size());
  for (const auto& [generator, state] : saved.saved_) {
    at::Generator target = generator;
    restore_.emplace_back(target, clone_of(target));
    set_from(target, state);
  }
}

SavedGenerators::Scope::~Scope() {
  // In reverse, so a generator saved twice ends as it began.
  for (auto it = restore_.rbegin(); it != restore_.rend(); ++it) {
    auto& [generator, state] = *it;
    try {
      set_from(generator, state);
    } catch (...) {  // setting a state cloned from the same generator does not fail
    }
  }
}

}  // namespace hyperoffload::python
