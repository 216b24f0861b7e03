#pragma once
// The keys of one open JSON object, for the reader's duplicate-key check (engine/json_parser.cpp: a key
// already in the object is an error at once). Up to 16 keys (an LLM's answer, a request's objects) are a list
// compared one by one; past that, an open-addressing set over the keys' views keeps the check linear (a
// model's vocabulary is one object of hundreds of thousands of keys, for which std::unordered_set allocated a
// node per key and rehashed them all at every growth). The views point into the text or the document's
// decoded strings, which outlive the parse. Kept per depth and reused between parses (clear()).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

namespace crl {

class JsonObjectKeys {
 public:
  // Adds `key`; false when the object has it already.
  bool add(std::string_view key) {
    if (set_) return set_->insert(key);
    for (const std::string_view& k : list_) {
      if (k == key) return false;
    }
    list_.push_back(key);
    if (list_.size() > kListed) set_ = std::make_unique<Set>(list_);
    return true;
  }
  void clear() {
    list_.clear();
    set_.reset();
  }

 private:
  static constexpr size_t kListed = 16;

  class Set {
   public:
    explicit Set(const std::vector<std::string_view>& keys) {
      for (const std::string_view key : keys) insert(key);
    }
    bool insert(std::string_view key) {
      if ((count_ + 1) * 2 > slots_.size()) grow();
      const uint64_t h = std::hash<std::string_view>{}(key);
      for (size_t s = h & mask_;; s = (s + 1) & mask_) {
        Slot& slot = slots_[s];
        if (!slot.used) {
          slot = Slot{h, key, true};
          ++count_;
          return true;
        }
        if (slot.hash == h && slot.key == key) return false;
      }
    }

   private:
    struct Slot {
      uint64_t hash = 0;
      std::string_view key;
      bool used = false;
    };
    void grow() {
      std::vector<Slot> old(std::max<size_t>(64, slots_.size() * 2));
      old.swap(slots_);
      mask_ = slots_.size() - 1;
      for (const Slot& slot : old) {
        if (!slot.used) continue;
        size_t s = slot.hash & mask_;
        while (slots_[s].used) s = (s + 1) & mask_;
        slots_[s] = slot;
      }
    }
    std::vector<Slot> slots_;
    size_t mask_ = 0;
    size_t count_ = 0;
  };

  std::vector<std::string_view> list_;
  std::unique_ptr<Set> set_;
};

}  // namespace crl
