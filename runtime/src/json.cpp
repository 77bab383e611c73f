// A small recursive-descent JSON reader; see tte/json.h for its invariant.
#include <tte/json.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <unordered_set>

namespace tte {

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) {
    std::vsnprintf(&s[0], s.size() + 1, fmt, ap2);
  }
  va_end(ap2);
  return s;
}

const Json* Json::find(const char* key) const {
  if (type != Type::Object) return nullptr;
  for (const auto& m : members) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

namespace {

// dump() writes what python's json.dumps(value) writes (default separators ", " and ": ",
// ensure_ascii, float repr), so both blob readers quote a bad value the same way.

void dump_u16(uint32_t u, std::string& out) { out += format("\\u%04x", u); }

void dump_string(const std::string& s, std::string& out) {
  out += '"';
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || c == 0x7f) {
            dump_u16(c, out);
          } else {
            out += static_cast<char>(c);
          }
      }
      continue;
    }
    // Decode one UTF-8 sequence (leniently: strings here come from validated metadata).
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    uint32_t cp = len == 4 ? c & 0x07 : len == 3 ? c & 0x0F : len == 2 ? c & 0x1F : c;
    size_t k = 1;
    for (; k < len && i + k < n && (p[i + k] & 0xC0) == 0x80; ++k) cp = cp << 6 | (p[i + k] & 0x3F);
    i += k;
    if (cp >= 0x10000) {
      cp -= 0x10000;
      dump_u16(0xD800 + (cp >> 10), out);
      dump_u16(0xDC00 + (cp & 0x3FF), out);
    } else {
      dump_u16(cp, out);
    }
  }
  out += '"';
}

// python's repr(float) (the shortest text that reads back as `v`; positional notation for
// exponents -4..15, else d.ddde+XX), e.g. 3.0, 0.1, 1e+16, 1e-05.
std::string py_float_repr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v < 0 ? "-Infinity" : "Infinity";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  // buf: [-]d[.ddd]e(+|-)XX
  std::string text(buf);
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    text.erase(0, 1);
  }
  const size_t e = text.find('e');
  std::string digits = text.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::atoi(text.c_str() + e + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exp >= -4 && exp < 16) {
    if (exp < 0) return sign + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    const size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_len) {
      return sign + digits + std::string(int_len - digits.size(), '0') + ".0";
    }
    return sign + digits.substr(0, int_len) + "." + digits.substr(int_len);
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  return sign + mant + format("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
}

void dump_value(const Json& v, std::string& out) {
  switch (v.type) {
    case Json::Type::Null: out += "null"; break;
    case Json::Type::Bool: out += v.boolean ? "true" : "false"; break;
    case Json::Type::Number:
      out += v.is_integer ? format("%lld", static_cast<long long>(v.integer))
                          : py_float_repr(v.number);
      break;
    case Json::Type::String: dump_string(v.string, out); break;
    case Json::Type::Array:
      out += '[';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += ", ";
        dump_value(v.items[i], out);
      }
      out += ']';
      break;
    case Json::Type::Object:
      out += '{';
      for (size_t i = 0; i < v.members.size(); ++i) {
        if (i) out += ", ";
        dump_string(v.members[i].first, out);
        out += ": ";
        dump_value(v.members[i].second, out);
      }
      out += '}';
      break;
  }
}

constexpr int kMaxDepth = 64;

class Parser {
 public:
  Parser(const char* d, size_t n) : d_(d), n_(n) {}

  bool parse(Json& out, JsonError& err) {
    skip_ws();
    if (!value(out, 0)) {
      err = std::move(err_);
      return false;
    }
    skip_ws();
    if (p_ != n_) {
      fail("unexpected data after the JSON value");
      err = std::move(err_);
      return false;
    }
    if (!surrogate_.empty()) {  // refused once the whole text parsed, as python finds it
      refuse(JsonError::Kind::Surrogate, std::move(surrogate_), surrogate_at_);
      err = std::move(err_);
      return false;
    }
    if (!nul_.empty()) {  // then the first string holding a NUL, in document order
      refuse(JsonError::Kind::Nul, std::move(nul_), 0);
      err = std::move(err_);
      return false;
    }
    return true;
  }

 private:
  bool fail(const char* what) {
    err_.kind = JsonError::Kind::Syntax;
    err_.what = what;
    err_.at = p_;
    return false;
  }
  bool refuse(JsonError::Kind kind, std::string what, size_t at) {
    err_.kind = kind;
    err_.what = std::move(what);
    err_.at = at;
    return false;
  }
  bool at_word(const char* word) const {
    const size_t len = std::strlen(word);
    return n_ - p_ >= len && std::memcmp(d_ + p_, word, len) == 0;
  }
  // NaN / Infinity / -Infinity (python's json reads them; the blob contract does not).
  bool non_finite_literal() {
    for (const char* word : {"NaN", "Infinity", "-Infinity"}) {
      if (at_word(word)) return refuse(JsonError::Kind::NonFinite, word, p_);
    }
    return fail("expecting a value");
  }
  // A lone surrogate escape: python's json.loads keeps it in the string and the blob reader
  // refuses it after parsing; remember the first and go on, so other errors keep their order.
  void unpaired(uint32_t cp, size_t at) {
    if (surrogate_.empty()) {
      surrogate_ = format("\\u%04x", cp);
      surrogate_at_ = at;
    }
  }
  bool eof_fail(const char* what) { return fail(p_ >= n_ ? "unexpected end of input" : what); }
  void skip_ws() {
    while (p_ < n_ && (d_[p_] == ' ' || d_[p_] == '\t' || d_[p_] == '\n' || d_[p_] == '\r')) ++p_;
  }
  bool literal(const char* word) {
    size_t len = std::strlen(word);
    for (size_t i = 0; i < len; ++i) {
      if (p_ + i >= n_) {
        p_ += i;
        return fail("unexpected end of input");
      }
      if (d_[p_ + i] != word[i]) return fail("invalid literal");
    }
    p_ += len;
    return true;
  }

  bool value(Json& out, int depth) {
    if (depth >= kMaxDepth) return fail("nesting deeper than 64 levels");
    if (p_ >= n_) return fail("unexpected end of input");
    char c = d_[p_];
    switch (c) {
      case '{': return object(out, depth);
      case '[': return array(out, depth);
      case '"': out.type = Json::Type::String; return string(out.string);
      case 't':
        out.type = Json::Type::Bool;
        out.boolean = true;
        return literal("true");
      case 'f':
        out.type = Json::Type::Bool;
        out.boolean = false;
        return literal("false");
      case 'n': out.type = Json::Type::Null; return literal("null");
      case 'N':
      case 'I': return non_finite_literal();
      default:
        if (at_word("-Infinity")) return non_finite_literal();
        if (c == '-' || (c >= '0' && c <= '9')) return number(out);
        return fail("expecting a value");
    }
  }

  bool object(Json& out, int depth) {
    out.type = Json::Type::Object;
    ++p_;  // '{'
    skip_ws();
    if (p_ < n_ && d_[p_] == '}') {
      ++p_;
      return true;
    }
    while (true) {
      skip_ws();
      if (p_ >= n_ || d_[p_] != '"') return eof_fail("expecting a property name in double quotes");
      std::string key;
      if (!string(key)) return false;
      skip_ws();
      if (p_ >= n_ || d_[p_] != ':') return eof_fail("expecting ':' delimiter");
      ++p_;
      skip_ws();
      out.members.emplace_back(std::move(key), Json());
      if (!value(out.members.back().second, depth + 1)) return false;
      skip_ws();
      if (p_ >= n_) return fail("unexpected end of input");
      if (d_[p_] == ',') {
        ++p_;
        continue;
      }
      if (d_[p_] == '}') {
        ++p_;
        return unique_keys(out);
      }
      return fail("expecting ',' or '}'");
    }
  }

  // At an object's close: the first key (in document order) that an earlier member already has.
  bool unique_keys(const Json& obj) {
    std::unordered_set<std::string_view> seen;
    seen.reserve(obj.members.size());
    for (const auto& m : obj.members) {
      if (!seen.insert(m.first).second) {
        return refuse(JsonError::Kind::DuplicateKey, m.first, p_);
      }
    }
    return true;
  }

  bool array(Json& out, int depth) {
    out.type = Json::Type::Array;
    ++p_;  // '['
    skip_ws();
    if (p_ < n_ && d_[p_] == ']') {
      ++p_;
      return true;
    }
    while (true) {
      skip_ws();
      out.items.emplace_back();
      if (!value(out.items.back(), depth + 1)) return false;
      skip_ws();
      if (p_ >= n_) return fail("unexpected end of input");
      if (d_[p_] == ',') {
        ++p_;
        continue;
      }
      if (d_[p_] == ']') {
        ++p_;
        return true;
      }
      return fail("expecting ',' or ']'");
    }
  }

  static void utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool bad_u_escape(size_t u) {
    p_ = u;
    return fail("invalid \\u escape");
  }

  bool hex4(uint32_t& v) {
    v = 0;
    for (int i = 0; i < 4; ++i) {
      if (p_ >= n_) return fail("unexpected end of input");
      char c = d_[p_];
      uint32_t h;
      if (c >= '0' && c <= '9')
        h = c - '0';
      else if (c >= 'a' && c <= 'f')
        h = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        h = c - 'A' + 10;
      else
        return fail("invalid \\u escape");
      v = v * 16 + h;
      ++p_;
    }
    return true;
  }

  // A syntax error inside a string is placed where python's json places it: an unterminated
  // string at its opening quote, a bad escape at its backslash, a bad \u escape at its 'u'.
  bool string(std::string& out) {
    const size_t quote = p_;
    ++p_;  // opening quote
    out.clear();
    while (true) {
      if (p_ >= n_) {
        p_ = quote;
        return fail("unterminated string");
      }
      unsigned char c = static_cast<unsigned char>(d_[p_]);
      if (c == '"') {
        ++p_;
        if (nul_.empty() && out.find('\0') != std::string::npos) {
          Json shown;
          shown.type = Json::Type::String;
          shown.string = out;
          nul_ = shown.dump();
        }
        return true;
      }
      if (c < 0x20) return fail("control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++p_;
        continue;
      }
      ++p_;
      if (p_ >= n_) {
        p_ = quote;
        return fail("unterminated string");
      }
      char e = d_[p_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          const size_t at = p_ - 2;
          uint32_t cp;
          if (!hex4(cp)) return bad_u_escape(at + 1);
          if (cp >= 0xD800 && cp < 0xDC00) {
            // A high surrogate pairs only with an immediately following \u low surrogate.
            uint32_t lo = 0;
            size_t save = p_;
            bool paired = false;
            if (p_ + 1 < n_ && d_[p_] == '\\' && d_[p_ + 1] == 'u') {
              p_ += 2;
              if (!hex4(lo)) return bad_u_escape(save + 1);
              paired = lo >= 0xDC00 && lo <= 0xDFFF;
            }
            if (paired) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              p_ = save;
              unpaired(cp, at);
            }
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            unpaired(cp, at);
          }
          utf8(cp, out);
          break;
        }
        default: p_ -= 2; return fail("invalid escape");
      }
    }
  }

  bool number(Json& out) {
    out.type = Json::Type::Number;
    size_t start = p_;
    bool integral = true;
    auto digit = [&](size_t at) { return at < n_ && d_[at] >= '0' && d_[at] <= '9'; };
    if (d_[p_] == '-') ++p_;
    if (!digit(p_)) {  // "-" alone is no value (python places the error at the '-')
      p_ = start;
      return fail("expecting a value");
    }
    if (d_[p_] == '0') {
      ++p_;
    } else {
      while (digit(p_)) ++p_;
    }
    // A fraction or exponent without digits is not part of the number (python's number pattern
    // takes the longest valid prefix); what follows is then the syntax error.
    if (p_ < n_ && d_[p_] == '.' && digit(p_ + 1)) {
      integral = false;
      ++p_;
      while (digit(p_)) ++p_;
    }
    if (p_ < n_ && (d_[p_] == 'e' || d_[p_] == 'E')) {
      const size_t sign = p_ + 1 < n_ && (d_[p_ + 1] == '+' || d_[p_ + 1] == '-') ? 1 : 0;
      if (digit(p_ + 1 + sign)) {
        integral = false;
        p_ += 1 + sign;
        while (digit(p_)) ++p_;
      }
    }
    std::string text(d_ + start, p_ - start);
    out.number = std::strtod(text.c_str(), nullptr);
    if (!std::isfinite(out.number)) return refuse(JsonError::Kind::NonFinite, text, start);
    if (integral) {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (errno == 0) {
        out.is_integer = true;
        out.integer = v;
      }
    }
    return true;
  }

  const char* d_;
  size_t n_;
  size_t p_ = 0;
  JsonError err_;
  std::string surrogate_;  // the first unpaired surrogate escape, "\\ud800"
  size_t surrogate_at_ = 0;
  std::string nul_;  // the first string (key or value) holding a \u0000, as json.dumps writes it
};

}  // namespace

std::string Json::dump() const {
  std::string out;
  dump_value(*this, out);
  return out;
}

std::string JsonError::message() const {
  switch (kind) {
    case Kind::Syntax: return format("%s at byte %zu", what.c_str(), at);
    case Kind::DuplicateKey: return "the key '" + what + "' appears twice in one object";
    case Kind::NonFinite: return "the non-finite number " + what;
    case Kind::Surrogate: return "the unpaired surrogate escape " + what;
    case Kind::Nul: return "a NUL character in the string " + what;
  }
  return what;
}

Result<Json> parse_json(const char* data, size_t size, JsonError& err) {
  Json root;
  Parser p(data, size);
  if (!p.parse(root, err)) return Error::InvalidProgram;
  return root;
}

Result<Json> parse_json(const char* data, size_t size, std::string& why) {
  JsonError err;
  auto r = parse_json(data, size, err);
  if (!r.ok()) why = err.message();
  return r;
}

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

}  // namespace tte
