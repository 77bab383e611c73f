// A small JSON reader for the blob metadata (RFC 8259 subset: no duplicate-key semantics).
//
// Invariant: `parse_json` either returns a complete value tree of the whole input (trailing
// whitespace only) or fails with "<what> at byte N", N being the offset where the input stopped
// being a valid JSON prefix (the input's length when it was a valid prefix that ended early).
// Nesting is limited to 64 levels so hostile metadata cannot exhaust the stack.
#pragma once

#include <tte/common.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tte {

class Json {
 public:
  enum class Type : uint8_t { Null, Bool, Number, String, Array, Object };

  Type type = Type::Null;
  bool boolean = false;
  double number = 0;
  bool is_integer = false;  // a number written without fraction/exponent that fits int64
  int64_t integer = 0;
  std::string string;
  std::vector<Json> items;                             // Array
  std::vector<std::pair<std::string, Json>> members;  // Object, in document order

  bool is(Type t) const { return type == t; }
  // The member `key` of an object, or nullptr (also when this is not an object).
  const Json* find(const char* key) const;
  // Compact JSON text of this value (for messages).
  std::string dump() const;
};

const char* json_type_name(Json::Type t);

Result<Json> parse_json(const char* data, size_t size, std::string& why);

}  // namespace tte
