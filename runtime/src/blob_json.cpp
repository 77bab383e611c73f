// Strict JSON reading of blob metadata with nlohmann/json; see blob_json.h.
#include "blob_json.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace tte {
namespace {

// The checks nlohmann's parser leaves to its handler: nesting, duplicate keys, NUL characters,
// and which of its parse errors are the contract's non-finite numbers and surrogates.
class StrictSax {
 public:
  StrictSax(const char* text, size_t size, Reason& why) : text_(text), size_(size), why_(why) {}

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const std::string&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool string(std::string& s) {
    note_nul(s);
    return true;
  }
  bool key(std::string& k) {
    note_nul(k);
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second && !f.duplicate) f.duplicate = k;  // the first repeat
    return true;
  }
  bool start_object(size_t) { return open(); }
  bool start_array(size_t) { return open(); }
  bool end_array() {
    frames_.pop_back();
    return true;
  }
  bool end_object() {
    if (frames_.back().duplicate) {
      return why_.reject(
          "json.duplicate_key",
          "metadata JSON has the key '" + *frames_.back().duplicate + "' twice in one object");
    }
    frames_.pop_back();
    return true;
  }
  bool parse_error(size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& ex);

  // After a parse that reached the end: the first string holding a NUL, if any.
  bool finish() {
    if (nul_string_.empty()) return true;
    return why_.reject("json.nul", "metadata JSON holds a NUL character (\\u0000) in the string " +
                                       json_excerpt(Json(nul_string_), 60) +
                                       "; strings must not contain NUL");
  }

 private:
  struct Frame {
    std::unordered_set<std::string> keys;
    std::optional<std::string> duplicate;
  };

  bool open() {
    if (frames_.size() >= kMaxJsonNesting) {
      return why_.reject("json.depth", format("metadata JSON nests arrays and objects more than "
                                              "%zu deep",
                                              kMaxJsonNesting));
    }
    frames_.emplace_back();
    return true;
  }
  void note_nul(const std::string& s) {
    if (nul_string_.empty() && s.find('\0') != std::string::npos) nul_string_ = s;
  }
  // NaN, Infinity or -Infinity where a value starts: python's json reads them (and the blob
  // reader refuses them as non-finite), nlohmann refuses them as an invalid literal.
  bool non_finite_literal(size_t position, std::string& literal) const;

  const char* text_;
  size_t size_;
  Reason& why_;
  std::vector<Frame> frames_;
  std::string nul_string_;
};

bool StrictSax::non_finite_literal(size_t position, std::string& literal) const {
  // The lexer stopped right after the character it refused (`position` counts the bytes read):
  // 'N' or 'I', or the 'I' after '-'. It is a value's first character only when what precedes
  // it (past whitespace) is the text's start, '[', ',' or ':'.
  if (position == 0 || position > size_) return false;
  size_t start = position - 1;
  if (text_[start] == 'I' && start > 0 && text_[start - 1] == '-') --start;
  size_t before = start;
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (before > 0 && is_space(text_[before - 1])) --before;
  const char prev = before > 0 ? text_[before - 1] : '[';
  if (prev != '[' && prev != ',' && prev != ':') return false;
  for (const char* word : {"NaN", "Infinity", "-Infinity"}) {
    const size_t n = std::strlen(word);
    if (size_ - start >= n && std::memcmp(text_ + start, word, n) == 0) {
      literal = word;
      return true;
    }
  }
  return false;
}

// Which of the contract's checks a parse error of nlohmann 3.11 is, read from its message
// ("[json.exception.parse_error.101] parse error at line 1, column 6: syntax error while parsing
// value - invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF; last read:
// '<the token so far>'"), up to "; last read" so that the input's own text is never matched.
bool StrictSax::parse_error(size_t position, const std::string& last_token,
                            const nlohmann::detail::exception& ex) {
  const std::string what = ex.what();
  const std::string head = what.substr(0, what.find("; last read: "));
  std::string literal;
  if (ex.id == 406) {  // out_of_range.406: the number overflows a double
    literal = last_token;
  } else if (head.find("while parsing value - ") != std::string::npos) {
    (void)non_finite_literal(position, literal);
  }
  if (!literal.empty()) {
    return why_.reject("json.non_finite", "metadata JSON holds the non-finite number " + literal +
                                              "; numbers must be finite");
  }
  // "[json.exception.parse_error.101] parse error at line 1, column 6: <what is wrong>"
  const size_t column = what.find("column ");
  const size_t colon = column == std::string::npos ? column : what.find(": ", column);
  const std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
  const size_t at = position > 0 ? position - 1 : 0;
  if (head.find("- invalid string: surrogate U+") != std::string::npos) {
    return why_.reject("json.surrogate", format("metadata JSON holds an unpaired UTF-16 surrogate "
                                                "escape before byte %zu (%s); strings must be "
                                                "valid Unicode",
                                                position, detail.c_str()));
  }
  return why_.reject("json.syntax",
                     format("metadata JSON is malformed at byte %zu: %s", at, detail.c_str()));
}

// Offset of the first byte of the first invalid UTF-8 sequence in [data, data+size) (python's
// UnicodeDecodeError.start for the same bytes), or `size` when all of it is valid UTF-8.
size_t utf8_invalid_at(const char* data, size_t size) {
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  size_t i = 0;
  while (i < size) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Well-formed sequences (Unicode Table 3-7): lead byte, allowed range of the second byte.
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlongs
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // no overlongs
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return i;
    }
    if (i + 1 >= size || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (i + k >= size || p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return size;
}

}  // namespace

bool read_json(const char* data, size_t size, Json& out, Reason& why) {
  if (const size_t bad = utf8_invalid_at(data, size); bad != size) {
    return why.reject("json.utf8", format("metadata is not UTF-8 at byte %zu", bad));
  }
  if (size >= 3 && std::memcmp(data, "\xEF\xBB\xBF", 3) == 0) {
    return why.reject("json.syntax",
                      "metadata JSON starts with a UTF-8 byte order mark, which JSON "
                      "does not allow");
  }
  StrictSax sax(data, size, why);
  if (!Json::sax_parse(data, data + size, &sax) || !sax.finish()) return false;
  out = Json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) {  // the SAX pass accepted it: not expected
    return why.reject("json.syntax", "metadata JSON could not be read into a value");
  }
  return true;
}

std::string json_excerpt(const Json& v, size_t max) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > max) s.resize(max);
  return s;
}

}  // namespace tte
