// Blob parsing and validation; see tte/blob.h. Mirrors python's executorch/blob.py check for
// check and, where the languages allow, message for message.
#include <tte/blob.h>
#include <tte/blob_integrity.h>
#include <tte/json.h>

#include <cstring>

namespace tte {

bool Binding::is_static() const {
  if (!known) return false;
  for (int64_t s : shape) {
    if (s < 0) return false;
  }
  return true;
}

size_t Binding::numel() const {
  if (!is_static()) return 0;
  uint64_t n = 1;
  for (int64_t s : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(s), &n)) return SIZE_MAX;
  }
  return n > kMaxBindingBytes ? SIZE_MAX : static_cast<size_t>(n);
}

size_t Binding::nbytes() const {
  const size_t n = numel();
  return n == SIZE_MAX || n > kMaxBindingBytes / dtype_size(dtype) ? SIZE_MAX
                                                                   : n * dtype_size(dtype);
}

bool Binding::fits() const {
  if (!known) return true;
  uint64_t n = dtype_size(dtype);
  for (int64_t s : shape) {
    if (s >= 0 && __builtin_mul_overflow(n, static_cast<uint64_t>(s), &n)) return false;
  }
  return n <= kMaxBindingBytes;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string Binding::describe() const {
  if (!known) return "unknown";
  return std::string(dtype_name(dtype)) + " " + shape_text(shape);
}

const Binding* BlobInfo::input(const std::string& name) const {
  for (const auto& b : inputs) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

const Binding* BlobInfo::output(const std::string& name) const {
  for (const auto& b : outputs) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

const std::string* BlobInfo::buffer_fqn(const std::string& input) const {
  for (const auto& b : buffers) {
    if (b.input == input) return &b.fqn;
  }
  return nullptr;
}

namespace {

uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t le64(const uint8_t* p) { return uint64_t(le32(p)) | uint64_t(le32(p + 4)) << 32; }

// Python's repr() of a 4-byte bytes object, so both readers name a bad magic the same way.
std::string bytes_repr(const uint8_t* p, size_t n) {
  std::string s = "b'";
  for (size_t i = 0; i < n; ++i) {
    uint8_t c = p[i];
    if (c == '\\' || c == '\'') {
      s += '\\';
      s += static_cast<char>(c);
    } else if (c == '\t') {
      s += "\\t";
    } else if (c == '\n') {
      s += "\\n";
    } else if (c == '\r') {
      s += "\\r";
    } else if (c < 0x20 || c >= 0x7f) {
      s += format("\\x%02x", c);
    } else {
      s += static_cast<char>(c);
    }
  }
  return s + "'";
}

const char* py_type(Json::Type t) {
  switch (t) {
    case Json::Type::String: return "str";
    case Json::Type::Bool: return "bool";
    case Json::Type::Array: return "list";
    case Json::Type::Number: return "int";
    default: return "?";
  }
}

// Reads typed members with python blob._expect's messages. `ok` turns false on the first error.
struct Reader {
  std::string& why;
  bool ok = true;

  bool fail(std::string msg) {
    if (ok) why = std::move(msg);
    ok = false;
    return false;
  }
  // fail() for functions returning the Error: every metadata defect is InvalidProgram.
  Error refuse(std::string msg) {
    fail(std::move(msg));
    return Error::InvalidProgram;
  }

  // Type check of obj[key]; returns nullptr when absent (error if required) or mistyped.
  const Json* get(const Json& obj, const char* key, Json::Type t, const std::string& where,
                  bool required) {
    if (!ok) return nullptr;
    const Json* v = obj.find(key);
    if (!v) {
      if (required) fail(where + " has no '" + key + "'");
      return nullptr;
    }
    bool good = v->type == t && (t != Json::Type::Number || v->is_integer);
    if (!good) {
      std::string shown = v->dump().substr(0, 40);
      fail(where + ": '" + key + "' must be " + py_type(t) + ", got " + shown);
      return nullptr;
    }
    return v;
  }

  std::string str(const Json& obj, const char* key, const std::string& where, bool required,
                  const char* dflt = "") {
    const Json* v = get(obj, key, Json::Type::String, where, required);
    return v ? v->string : std::string(dflt);
  }

  // obj[key] as a list of objects (absent: empty), each checked to be an object.
  const std::vector<Json>* entries(const Json& obj, const char* key) {
    const Json* lst = get(obj, key, Json::Type::Array, "metadata", false);
    if (!lst) return nullptr;
    for (size_t i = 0; i < lst->items.size(); ++i) {
      if (!lst->items[i].is(Json::Type::Object)) {
        fail(format("%s[%zu] must be an object", key, i));
        return nullptr;
      }
    }
    return &lst->items;
  }

  std::vector<std::string> names(const Json& obj, const char* key) {
    std::vector<std::string> out;
    const Json* lst = get(obj, key, Json::Type::Array, "metadata", true);
    if (!lst) return out;
    for (size_t i = 0; i < lst->items.size(); ++i) {
      if (!lst->items[i].is(Json::Type::String)) {
        fail(format("metadata: %s[%zu] must be a binding name string", key, i));
        return out;
      }
      out.push_back(lst->items[i].string);
    }
    return out;
  }
};

bool read_bindings(Reader& r, const Json& md, BlobInfo& info) {
  const Json* lst = r.get(md, "io_bindings", Json::Type::Array, "metadata", true);
  if (!lst) return false;
  for (size_t i = 0; i < lst->items.size(); ++i) {
    const Json& e = lst->items[i];
    std::string where = format("io_bindings[%zu]", i);
    if (!e.is(Json::Type::Object)) return r.fail(where + " must be an object");
    Binding b;
    b.name = r.str(e, "name", where, true);
    if (!r.ok) return false;
    if (b.name.empty()) return r.fail(where + " has an empty name");
    where += " '" + b.name + "'";
    std::string dtype = r.str(e, "dtype", where, true);
    if (!r.ok) return false;
    if (!dtype.empty() && !dtype_from_name(dtype, b.dtype)) {
      return r.fail(where + ": unknown dtype '" + dtype + "' (known: " + dtype_known_names() + ")");
    }
    const Json* shape = r.get(e, "shape", Json::Type::Array, where, true);
    if (!shape) return false;
    for (const Json& s : shape->items) {
      if (!s.is(Json::Type::Number) || !s.is_integer || s.integer < -1) {
        return r.fail(where + ": shape " + shape->dump() + " must hold integers >= -1");
      }
      b.shape.push_back(s.integer);
    }
    if (dtype.empty()) {  // upstream's "unknown": dtype "" and shape [], TR01/TR02 only
      if (info.format == 3) return r.fail(where + ": empty dtype; " + kUnknownInTr03);
      if (!b.shape.empty()) {
        return r.fail(where + ": empty dtype with shape " + shape_text(b.shape) +
                      "; a binding left to the delegate's tensors has dtype '' and shape []");
      }
      b.known = false;
    }
    const Json* is_input = r.get(e, "is_input", Json::Type::Bool, where, true);
    if (!is_input) return false;
    b.is_input = is_input->boolean;
    auto& side = b.is_input ? info.inputs : info.outputs;
    b.index = side.size();
    side.push_back(std::move(b));
  }
  return true;
}

// Error::Ok, Error::DelegateInvalidCompatibility (a TR03 tte_version other than 3) or
// Error::InvalidProgram, with `why` set.
Error read_metadata(const Json& md, BlobInfo& info, std::string& why) {
  const Error bad = Error::InvalidProgram;
  Reader r{why};
  if (!md.is(Json::Type::Object)) return r.refuse("metadata JSON must be an object");
  if (!read_bindings(r, md, info)) return bad;
  if (const auto* lst = r.entries(md, "aliased_io")) {
    for (size_t i = 0; i < lst->size(); ++i) {
      std::string where = format("aliased_io[%zu]", i);
      AliasedIO a;
      a.output = r.str((*lst)[i], "output", where, true);
      a.input = r.str((*lst)[i], "input", where, true);
      a.kind = r.str((*lst)[i], "kind", where, false, "kv_cache_update");
      if (!r.ok) return bad;
      info.aliased_io.push_back(std::move(a));
    }
  }
  if (!r.ok) return bad;
  if (info.format == 1 && !info.aliased_io.empty()) {
    return r.refuse("TR01 blob carries aliased_io; upstream writes such blobs as TR02");
  }
  if (const Json* v = r.get(md, "hardware_compatible", Json::Type::Bool, "metadata", false)) {
    info.hardware_compatible = v->boolean;
  }
  if (const Json* v = r.get(md, "device_id", Json::Type::Number, "metadata", false)) {
    info.device_id = v->integer;
  }
  info.serialized_metadata = r.str(md, "serialized_metadata", "metadata", false);
  info.target_platform = r.str(md, "target_platform", "metadata", false);
  if (!r.ok) return bad;

  if (info.format != 3) {
    if (md.find("tte_version") != nullptr) {  // a TR03 blob whose magic lost its '3'
      return r.refuse(
          format("TR0%d blob carries the TR03 key 'tte_version': its magic is "
                 "damaged; re-export the .pte",
                 info.format));
    }
    info.engine_kind = EngineKind::TensorRT;
    for (const auto& b : info.inputs) info.delegate_inputs.push_back(b.name);
    for (const auto& b : info.outputs) info.delegate_outputs.push_back(b.name);
    return Error::Ok;
  }
  const Json* version = md.find("tte_version");
  if (!version || !version->is(Json::Type::Number) || !version->is_integer ||
      version->integer != kTteVersion) {  // the integer 3: 3.0 and 3e0 are refused too
    r.fail(format("TR03 blob has tte_version %s; this reader understands version %d only",
                  version ? version->dump().c_str() : "null", kTteVersion));
    return Error::DelegateInvalidCompatibility;
  }
  std::string kind = r.str(md, "engine_kind", "metadata", true);
  if (!r.ok) return bad;
  if (kind == "reference") {
    info.engine_kind = EngineKind::Reference;
  } else if (kind == "tensorrt") {
    info.engine_kind = EngineKind::TensorRT;
  } else {
    return r.refuse("engine_kind '" + kind + "' is not one of ['reference', 'tensorrt']");
  }
  info.delegate_inputs = r.names(md, "delegate_inputs");
  info.delegate_outputs = r.names(md, "delegate_outputs");
  if (!r.ok) return bad;
  if (const auto* lst = r.entries(md, "buffers")) {
    for (size_t i = 0; i < lst->size(); ++i) {
      std::string where = format("buffers[%zu]", i);
      BufferRef b;
      b.input = r.str((*lst)[i], "input", where, true);
      b.fqn = r.str((*lst)[i], "fqn", where, true);
      if (!r.ok) return bad;
      info.buffers.push_back(std::move(b));
    }
  }
  if (const auto* lst = r.entries(md, "copy_back")) {
    for (size_t i = 0; i < lst->size(); ++i) {
      std::string where = format("copy_back[%zu]", i);
      CopyBackRef c;
      c.output = r.str((*lst)[i], "output", where, true);
      c.input = r.str((*lst)[i], "input", where, true);
      if (!r.ok) return bad;
      info.copy_back.push_back(std::move(c));
    }
  }
  if (const Json* v = r.get(md, "engine_sha256", Json::Type::String, "metadata", false)) {
    if (!is_hex_digest(v->string)) {
      return r.refuse(
          "metadata: 'engine_sha256' must be 64 lowercase hex digits (the SHA-256 "
          "of the engine payload), got " +
          v->dump().substr(0, 40));
    }
    info.engine_sha256 = v->string;
  }
  return r.ok ? Error::Ok : bad;
}

// python's messages for the same JSON defects (blob_validate._load_json).
std::string json_refusal(const JsonError& e) {
  switch (e.kind) {
    case JsonError::Kind::Syntax:
      return format("metadata JSON is truncated or malformed at byte %zu: %s", e.at,
                    e.what.c_str());
    case JsonError::Kind::DuplicateKey:
      return "metadata JSON has the key '" + e.what + "' twice in one object";
    case JsonError::Kind::NonFinite:
      return "metadata JSON holds the non-finite number " + e.what + "; numbers must be finite";
    case JsonError::Kind::Surrogate:
      return "metadata JSON holds the unpaired surrogate escape " + e.what +
             "; strings must be valid Unicode";
    case JsonError::Kind::Nul:
      return "metadata JSON holds a NUL character (\\u0000) in the string " + e.what.substr(0, 60) +
             "; strings must not contain NUL";
  }
  return "metadata JSON: " + e.message();
}

}  // namespace

Result<BlobInfo> parse_blob(const void* data, size_t size, std::string& why) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (size < kBlobHeaderSize) {
    why = format("blob is %zu bytes, shorter than its %zu-byte header", size, kBlobHeaderSize);
    return Error::InvalidProgram;
  }
  BlobInfo info;
  std::memcpy(info.magic, p, 4);
  if (std::memcmp(p, "TR01", 4) == 0) {
    info.format = 1;
  } else if (std::memcmp(p, "TR02", 4) == 0) {
    info.format = 2;
  } else if (std::memcmp(p, "TR03", 4) == 0) {
    info.format = 3;
  } else {
    why =
        "unsupported blob magic " + bytes_repr(p, 4) + ": this reader accepts TR01, TR02 and TR03";
    return Error::DelegateInvalidCompatibility;
  }
  const uint64_t md_off = le32(p + 4), md_size = le32(p + 8), eng_off = le32(p + 12);
  const uint64_t eng_size = le64(p + 16);
  const unsigned long long n = size;
  using ull = unsigned long long;
  const size_t header = info.format == 3 ? kTr03HeaderSize : kBlobHeaderSize;
  if (md_off < header) {
    why = format("metadata offset %llu lies inside the %zu-byte header", (ull)md_off, header);
    return Error::InvalidProgram;
  }
  if (md_off + md_size > n) {
    why = format("metadata [%llu, %llu) runs past the end of the %llu-byte blob", (ull)md_off,
                 (ull)(md_off + md_size), n);
    return Error::InvalidProgram;
  }
  if (eng_off % kEngineAlignment) {
    why = format("engine offset %llu is not %u-byte aligned", (ull)eng_off, kEngineAlignment);
    return Error::InvalidProgram;
  }
  // eng_size is 64-bit: compare without overflowing.
  if (eng_off > n || eng_size > n - eng_off) {
    why = format("engine [%llu, %llu) runs past the end of the %llu-byte blob", (ull)eng_off,
                 (ull)(eng_off + eng_size), n);
    return Error::InvalidProgram;
  }
  if (md_off + md_size > eng_off) {
    why = format("metadata [%llu, %llu) overlaps the engine at offset %llu", (ull)md_off,
                 (ull)(md_off + md_size), (ull)eng_off);
    return Error::InvalidProgram;
  }
  if (info.format == 3 && !metadata_digest_matches(p, md_off, md_size, why)) {
    return Error::InvalidProgram;
  }
  const char* md_text = reinterpret_cast<const char*>(p + md_off);
  if (size_t bad = utf8_invalid_at(md_text, md_size); bad != md_size) {
    why = format("metadata is not UTF-8 at byte %zu", bad);
    return Error::InvalidProgram;
  }
  JsonError json_err;
  auto md = parse_json(md_text, md_size, json_err);
  if (!md.ok()) {
    why = json_refusal(json_err);
    return Error::InvalidProgram;
  }
  if (Error e = read_metadata(md.get(), info, why); e != Error::Ok) return e;
  info.engine = p + eng_off;
  info.engine_size = eng_size;
  if (info.format == 3 && !engine_digest_matches(info, why)) return Error::InvalidProgram;
  if (!validate_blob(info, why)) return Error::InvalidProgram;
  return info;
}

}  // namespace tte
