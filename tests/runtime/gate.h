// Test helper: a one-shot gate. A host function enqueued on a stream can block
// the stream on it, so a test controls exactly when the stream's later work
// (copies, event records) may run.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>

namespace hyperoffload::testing {

class Gate {
 public:
  void open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }
  // A host function that blocks its stream until open().
  std::function<void()> blocker() {
    return [this] { wait(); };
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace hyperoffload::testing
