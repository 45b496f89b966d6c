// OpNames: a trace's interned op names, in one character buffer with an
// offset per name.
//
// A std::vector<std::string> held a heap block per name longer than the
// small-string buffer (15 characters): a 1M-op transformer step has a million
// distinct names ("layer12345.attn.qkv"), a million allocations when the trace
// is read and a million more for every trace derived from it (the recompute and
// hybrid planners' augmented traces). Here a name costs its characters and one
// offset, and a derived trace shares the table instead of copying it
// (Trace::op_names_shared, TraceBuilder::use_op_names).
//
// Thread-safety: a const OpNames may be read from any number of threads;
// append() needs exclusive access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace hyperoffload {

class OpNames {
 public:
  // The names in order, as string_views into the table (valid while it lives).
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = std::string_view;

    Iterator() = default;
    Iterator(const OpNames* names, std::size_t index) : names_(names), index_(index) {}
    std::string_view operator*() const { return (*names_)[index_]; }
    Iterator& operator++() {
      ++index_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator before = *this;
      ++index_;
      return before;
    }
    bool operator==(const Iterator& other) const { return index_ == other.index_; }

   private:
    const OpNames* names_ = nullptr;
    std::size_t index_ = 0;
  };

  std::size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }

  // Precondition: index < size().
  std::string_view operator[](std::size_t index) const {
    const std::size_t begin = index == 0 ? 0 : ends_[index - 1];
    return {chars_.data() + begin, ends_[index] - begin};
  }

  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, size()}; }

  // Appends `name` (no interning here: TraceBuilder interns) and returns its
  // index. Amortized O(name.size()).
  std::uint32_t append(std::string_view name) {
    chars_.append(name);
    ends_.push_back(chars_.size());
    return static_cast<std::uint32_t>(ends_.size() - 1);
  }

 private:
  std::string chars_;               // every name, back to back
  std::vector<std::size_t> ends_;   // per name: one past its last character in chars_
};

}  // namespace hyperoffload
