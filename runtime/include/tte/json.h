// A small JSON reader for the blob metadata (RFC 8259, strict: what python's json.loads accepts
// with the blob reader's hooks, executorch/blob_validate.py).
//
// Invariant: `parse_json` either returns a complete value tree of the whole input (trailing
// whitespace only) or fails with a JsonError: a syntax error "<what>" at byte N, N being the
// offset where the input stopped being a valid JSON prefix (the input's length when it was a
// valid prefix that ended early); or a refusal of valid-looking JSON the blob contract forbids:
// an object holding a key twice (reported when that object closes, naming the first key seen
// twice, as python's object_pairs_hook does), a non-finite number (NaN, Infinity, -Infinity or
// a number that overflows a double, named by its text), or an unpaired UTF-16 surrogate escape
// (the first one, reported only once the whole text parsed: python keeps it in the string and
// the blob reader refuses it after json.loads); then a string (key or value) holding a NUL
// character (\u0000: the first such string, also reported only once the whole text parsed, after
// any surrogate) — C++ consumers compare names as C strings in places, so no reader accepts one.
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
  std::vector<Json> items;                            // Array
  std::vector<std::pair<std::string, Json>> members;  // Object, in document order

  bool is(Type t) const { return type == t; }
  // The member `key` of an object, or nullptr (also when this is not an object).
  const Json* find(const char* key) const;
  // JSON text of this value as python's json.dumps writes it (for messages).
  std::string dump() const;
};

struct JsonError {
  enum class Kind : uint8_t {
    Syntax,        // `what` at byte `at`
    DuplicateKey,  // `what`: the key
    NonFinite,     // `what`: the number's text
    Surrogate,     // `what`: the escape, "\\udc00"
    Nul,           // `what`: the first string holding \u0000, as json.dumps writes it
  };
  Kind kind = Kind::Syntax;
  std::string what;
  size_t at = 0;
  // "<what> at byte N" (Syntax) or a sentence naming the key / number / escape.
  std::string message() const;
};

Result<Json> parse_json(const char* data, size_t size, JsonError& err);
// The same, with `why` = err.message().
Result<Json> parse_json(const char* data, size_t size, std::string& why);

// Offset of the first byte of the first invalid UTF-8 sequence in [data, data+size) (python's
// UnicodeDecodeError.start for the same bytes), or `size` when all of it is valid UTF-8.
size_t utf8_invalid_at(const char* data, size_t size);

}  // namespace tte
