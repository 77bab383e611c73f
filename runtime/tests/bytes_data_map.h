// A named data map of the tests' own (ExecuTorch's NamedDataMap over keys -> bytes held here),
// for the runtime's unit tests and the fuzz harness: get_data hands the bytes out in place (no
// copy, no free) and counts the look-ups; an absent key is NotFound, as the program's map says.
#pragma once

#include <executorch/runtime/core/named_data_map.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace tte_test {

class BytesDataMap final : public executorch::runtime::NamedDataMap {
 public:
  using Error = executorch::runtime::Error;
  template <class T>
  using Result = executorch::runtime::Result<T>;

  std::map<std::string, std::string> data;
  mutable int lookups = 0;

  Result<const executorch::runtime::TensorLayout> get_tensor_layout(
      std::string_view) const override {
    return Error::NotImplemented;
  }
  Result<executorch::runtime::FreeableBuffer> get_data(std::string_view key) const override {
    ++lookups;
    auto it = data.find(std::string(key));
    if (it == data.end()) return Error::NotFound;
    return executorch::runtime::FreeableBuffer(it->second.data(), it->second.size(), nullptr);
  }
  Error load_data_into(std::string_view, void*, size_t) const override {
    return Error::NotImplemented;
  }
  Result<uint32_t> get_num_keys() const override { return static_cast<uint32_t>(data.size()); }
  Result<const char*> get_key(uint32_t i) const override {
    if (i >= data.size()) return Error::InvalidArgument;
    auto it = data.begin();
    std::advance(it, i);
    return it->first.c_str();
  }
};

}  // namespace tte_test
