// A small recursive-descent JSON reader; see tte/json.h for its invariant.
#include <tte/json.h>

#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

const char* json_type_name(Json::Type t) {
  switch (t) {
    case Json::Type::Null: return "null";
    case Json::Type::Bool: return "a boolean";
    case Json::Type::Number: return "a number";
    case Json::Type::String: return "a string";
    case Json::Type::Array: return "an array";
    case Json::Type::Object: return "an object";
  }
  return "?";
}

const Json* Json::find(const char* key) const {
  if (type != Type::Object) return nullptr;
  for (const auto& m : members) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

namespace {

void dump_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += format("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

void dump_value(const Json& v, std::string& out) {
  switch (v.type) {
    case Json::Type::Null: out += "null"; break;
    case Json::Type::Bool: out += v.boolean ? "true" : "false"; break;
    case Json::Type::Number:
      out += v.is_integer ? format("%lld", static_cast<long long>(v.integer))
                          : format("%.17g", v.number);
      break;
    case Json::Type::String: dump_string(v.string, out); break;
    case Json::Type::Array:
      out += '[';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += ',';
        dump_value(v.items[i], out);
      }
      out += ']';
      break;
    case Json::Type::Object:
      out += '{';
      for (size_t i = 0; i < v.members.size(); ++i) {
        if (i) out += ',';
        dump_string(v.members[i].first, out);
        out += ':';
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

  bool parse(Json& out, std::string& why) {
    skip_ws();
    if (!value(out, 0)) {
      why = err_;
      return false;
    }
    skip_ws();
    if (p_ != n_) {
      why = format("unexpected data after the JSON value at byte %zu", p_);
      return false;
    }
    return true;
  }

 private:
  bool fail(const char* what) {
    err_ = format("%s at byte %zu", what, p_);
    return false;
  }
  bool eof_fail(const char* what) {
    return fail(p_ >= n_ ? "unexpected end of input" : what);
  }
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
      case 't': out.type = Json::Type::Bool; out.boolean = true; return literal("true");
      case 'f': out.type = Json::Type::Bool; out.boolean = false; return literal("false");
      case 'n': out.type = Json::Type::Null; return literal("null");
      default:
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
        return true;
      }
      return fail("expecting ',' or '}'");
    }
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

  bool hex4(uint32_t& v) {
    v = 0;
    for (int i = 0; i < 4; ++i) {
      if (p_ >= n_) return fail("unexpected end of input");
      char c = d_[p_];
      uint32_t h;
      if (c >= '0' && c <= '9') h = c - '0';
      else if (c >= 'a' && c <= 'f') h = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') h = c - 'A' + 10;
      else return fail("invalid \\u escape");
      v = v * 16 + h;
      ++p_;
    }
    return true;
  }

  bool string(std::string& out) {
    ++p_;  // opening quote
    out.clear();
    while (true) {
      if (p_ >= n_) return fail("unexpected end of input in a string");
      unsigned char c = static_cast<unsigned char>(d_[p_]);
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c < 0x20) return fail("control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++p_;
        continue;
      }
      ++p_;
      if (p_ >= n_) return fail("unexpected end of input in a string");
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
          uint32_t cp;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t lo;
            if (p_ + 1 < n_ && d_[p_] == '\\' && d_[p_ + 1] == 'u') {
              p_ += 2;
              if (!hex4(lo)) return false;
              if (lo < 0xDC00 || lo > 0xDFFF) return fail("invalid surrogate pair");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              return fail("unpaired surrogate");
            }
          }
          utf8(cp, out);
          break;
        }
        default:
          --p_;
          return fail("invalid escape");
      }
    }
  }

  bool number(Json& out) {
    out.type = Json::Type::Number;
    size_t start = p_;
    bool integral = true;
    if (d_[p_] == '-') ++p_;
    if (p_ >= n_) return fail("unexpected end of input");
    if (d_[p_] == '0') {
      ++p_;
    } else if (d_[p_] >= '1' && d_[p_] <= '9') {
      while (p_ < n_ && d_[p_] >= '0' && d_[p_] <= '9') ++p_;
    } else {
      return fail("expecting a digit");
    }
    if (p_ < n_ && d_[p_] == '.') {
      integral = false;
      ++p_;
      if (p_ >= n_ || d_[p_] < '0' || d_[p_] > '9') return eof_fail("expecting a digit");
      while (p_ < n_ && d_[p_] >= '0' && d_[p_] <= '9') ++p_;
    }
    if (p_ < n_ && (d_[p_] == 'e' || d_[p_] == 'E')) {
      integral = false;
      ++p_;
      if (p_ < n_ && (d_[p_] == '+' || d_[p_] == '-')) ++p_;
      if (p_ >= n_ || d_[p_] < '0' || d_[p_] > '9') return eof_fail("expecting a digit");
      while (p_ < n_ && d_[p_] >= '0' && d_[p_] <= '9') ++p_;
    }
    std::string text(d_ + start, p_ - start);
    out.number = std::strtod(text.c_str(), nullptr);
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
  std::string err_;
};

}  // namespace

std::string Json::dump() const {
  std::string out;
  dump_value(*this, out);
  return out;
}

Result<Json> parse_json(const char* data, size_t size, std::string& why) {
  Json root;
  Parser p(data, size);
  if (!p.parse(root, why)) return Error::InvalidProgram;
  return root;
}

}  // namespace tte
