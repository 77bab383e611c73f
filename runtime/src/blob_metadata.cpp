// Typed reading of the blob metadata (CONTRACTS.md §1) from its JSON value: python's
// contracts/blob_metadata.parse_metadata, step for step and check id for check id (validating
// what it read is blob_validate.cpp, python's contracts/blob_validate.validate).
#include "blob.h"
#include "blob_integrity.h"
#include "blob_json.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>

namespace tte {
namespace {

enum class Kind : uint8_t { String, Bool, Int64, Array };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::String: return "a string";
    case Kind::Bool: return "a boolean";
    case Kind::Int64: return "an integer (int64)";
    case Kind::Array: return "an array";
  }
  return "?";
}

bool is_int64(const Json& v) {
  if (v.is_number_unsigned()) {
    return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  }
  return v.is_number_integer();
}

bool has_kind(const Json& v, Kind k) {
  switch (k) {
    case Kind::String: return v.is_string();
    case Kind::Bool: return v.is_boolean();
    case Kind::Int64: return is_int64(v);
    case Kind::Array: return v.is_array();
  }
  return false;
}

// Typed members; `ok` turns false on the first refusal (later calls then do nothing).
struct Reader {
  Reason& why;
  bool ok = true;

  bool fail(const char* check, std::string msg) {
    if (ok) why.reject(check, std::move(msg));
    ok = false;
    return false;
  }
  Error refuse(const char* check, std::string msg) {
    fail(check, std::move(msg));
    return Error::InvalidProgram;
  }
  // obj[key] when present and of kind `k`; nullptr when absent (refused if required) or not.
  const Json* get(const Json& obj, const char* key, Kind k, const std::string& where,
                  bool required) {
    if (!ok) return nullptr;
    const auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) fail("metadata.missing", where + " has no '" + key + "'");
      return nullptr;
    }
    if (!has_kind(*it, k)) {
      fail("metadata.type",
           where + ": '" + key + "' must be " + kind_name(k) + ", got " + json_excerpt(*it));
      return nullptr;
    }
    return &*it;
  }
  std::string str(const Json& obj, const char* key, const std::string& where, bool required,
                  const char* dflt = "") {
    const Json* v = get(obj, key, Kind::String, where, required);
    return v ? v->get_ref<const std::string&>() : std::string(dflt);
  }
  // obj[key]: an array of binding names (required).
  std::vector<std::string> names(const Json& obj, const char* key) {
    std::vector<std::string> out;
    const Json* lst = get(obj, key, Kind::Array, "metadata", true);
    for (size_t i = 0; lst && i < lst->size(); ++i) {
      if (!(*lst)[i].is_string()) {
        fail("metadata.type", format("metadata: %s[%zu] must be a binding name string", key, i));
        return out;
      }
      out.push_back((*lst)[i].get_ref<const std::string&>());
    }
    return out;
  }
  // obj[key] (absent: none): objects with the string members `fields`, all required except,
  // when `last_default` is set, the last one (absent: `last_default`); each entry's strings in
  // field order.
  template <size_t N>
  std::vector<std::array<std::string, N>> entries(const Json& obj, const char* key,
                                                  const std::array<const char*, N>& fields,
                                                  const char* last_default = nullptr) {
    std::vector<std::array<std::string, N>> out;
    const Json* lst = get(obj, key, Kind::Array, "metadata", false);
    for (size_t i = 0; lst && ok && i < lst->size(); ++i) {
      const Json& e = (*lst)[i];
      const std::string where = format("%s[%zu]", key, i);
      if (!e.is_object()) {
        fail("metadata.type", where + " must be an object");
        break;
      }
      std::array<std::string, N> row;
      for (size_t f = 0; f < N; ++f) {
        const bool required = last_default == nullptr || f + 1 < N;
        row[f] = str(e, fields[f], where, required, required ? "" : last_default);
      }
      out.push_back(std::move(row));
    }
    return out;
  }
};

// The binding shape: integers >= -1 (dimensions, -1 dynamic).
bool read_shape(Reader& r, const Json& shape, const std::string& where, Binding& b) {
  for (const Json& s : shape) {
    if (!is_int64(s) || s.get<int64_t>() < -1) {
      return r.fail("binding.shape",
                    where + ": shape " + json_excerpt(shape, 200) + " must hold integers >= -1");
    }
    b.shape.push_back(s.get<int64_t>());
  }
  return true;
}

// TR03's optional upper bounds of a dynamic binding: integers >= 0.
bool read_max_shape(Reader& r, const Json& e, const std::string& where, Binding& b) {
  const Json* bound = r.get(e, "max_shape", Kind::Array, where, false);
  if (!r.ok) return false;
  if (!bound) return true;
  for (const Json& s : *bound) {
    if (!is_int64(s) || s.get<int64_t>() < 0) {
      return r.fail("binding.max_shape", where + ": max_shape " + json_excerpt(*bound, 200) +
                                             " must hold integers >= 0");
    }
    b.max_shape.push_back(s.get<int64_t>());
  }
  return true;
}

// A known dtype's name; "" is upstream's "unknown" (decided once the shape is read).
bool read_known_dtype(Reader& r, const std::string& dtype, const std::string& where, Binding& b) {
  if (dtype.empty() || dtype_from_name(dtype, b.dtype)) return true;
  return r.fail("binding.unknown_dtype",
                where + ": unknown dtype '" + dtype + "' (known: " + dtype_known_names() + ")");
}

// Upstream's "unknown" binding: dtype "" and shape [], TR01/TR02 only.
bool read_unknown(Reader& r, int blob_format, const std::string& where, Binding& b) {
  if (blob_format == 3) {
    return r.fail("binding.unknown_in_tr03", where + ": empty dtype; " + kUnknownInTr03);
  }
  if (!b.shape.empty()) {
    return r.fail("binding.unknown_with_shape",
                  where + ": empty dtype with shape " + shape_text(b.shape) +
                      "; a binding left to the delegate's tensors has dtype '' and shape []");
  }
  b.known = false;
  return true;
}

// io_bindings[i]: python's blob_validate._binding, in its order.
bool read_binding(Reader& r, const Json& e, size_t i, int blob_format, Binding& b) {
  std::string where = format("io_bindings[%zu]", i);
  if (!e.is_object()) return r.fail("metadata.type", where + " must be an object");
  b.name = r.str(e, "name", where, true);
  if (!r.ok) return false;
  if (b.name.empty()) return r.fail("binding.empty_name", where + " has an empty name");
  where += " '" + b.name + "'";
  const std::string dtype = r.str(e, "dtype", where, true);
  if (!r.ok || !read_known_dtype(r, dtype, where, b)) return false;
  const Json* shape = r.get(e, "shape", Kind::Array, where, true);
  if (!shape || !read_shape(r, *shape, where, b)) return false;
  if (dtype.empty() && !read_unknown(r, blob_format, where, b)) return false;
  const Json* is_input = r.get(e, "is_input", Kind::Bool, where, true);
  if (!is_input) return false;
  b.is_input = is_input->get<bool>();
  if (blob_format == 3 && !read_max_shape(r, e, where, b)) return false;
  b.position = i;
  return true;
}

bool read_bindings(Reader& r, const Json& md, BlobInfo& info) {
  const Json* lst = r.get(md, "io_bindings", Kind::Array, "metadata", true);
  for (size_t i = 0; lst && i < lst->size(); ++i) {
    Binding b;
    if (!read_binding(r, (*lst)[i], i, info.format, b)) return false;
    auto& side = b.is_input ? info.inputs : info.outputs;
    b.index = side.size();
    side.push_back(std::move(b));
  }
  return r.ok;
}

// Upstream's keys besides the bindings (defaults when absent).
bool read_upstream_keys(Reader& r, const Json& md, BlobInfo& info) {
  for (auto& [output, input, kind] :
       r.entries<3>(md, "aliased_io", {"output", "input", "kind"}, "kv_cache_update")) {
    info.aliased_io.push_back({std::move(output), std::move(input), std::move(kind)});
  }
  if (!r.ok) return false;
  if (info.format == 1 && !info.aliased_io.empty()) {
    return r.fail("metadata.tr01_aliased",
                  "TR01 blob carries aliased_io; upstream writes such blobs as TR02");
  }
  if (const Json* v = r.get(md, "hardware_compatible", Kind::Bool, "metadata", false)) {
    info.hardware_compatible = v->get<bool>();
  }
  if (const Json* v = r.get(md, "device_id", Kind::Int64, "metadata", false)) {
    info.device_id = v->get<int64_t>();
  }
  info.serialized_metadata = r.str(md, "serialized_metadata", "metadata", false);
  info.target_platform = r.str(md, "target_platform", "metadata", false);
  return r.ok;
}

// TR01/TR02: upstream's meaning (a TensorRT engine, every binding a delegate argument/output).
Error read_upstream_meaning(Reader& r, const Json& md, BlobInfo& info) {
  if (md.contains("tte_version")) {  // a TR03 blob whose magic lost its '3'
    return r.refuse("metadata.damaged_magic",
                    format("TR0%d blob carries the TR03 key 'tte_version': its magic is "
                           "damaged; re-export the .pte",
                           info.format));
  }
  info.engine_kind = EngineKind::TensorRT;
  for (const auto& b : info.inputs) info.delegate_inputs.push_back(b.name);
  for (const auto& b : info.outputs) info.delegate_outputs.push_back(b.name);
  return Error::Ok;
}

Error read_version_and_kind(Reader& r, const Json& md, BlobInfo& info) {
  const auto version = md.find("tte_version");
  if (version == md.end() || !is_int64(*version) || version->get<int64_t>() < kTteOldestVersion ||
      version->get<int64_t>() > kTteVersion) {
    r.fail("metadata.tte_version",  // integers: 3.0, 3e0 and true are refused too
           format("TR03 blob has tte_version %s; this reader understands versions %d to %d only",
                  version == md.end() ? "(none)" : json_excerpt(*version).c_str(),
                  kTteOldestVersion, kTteVersion));
    return Error::DelegateInvalidCompatibility;
  }
  const std::string kind = r.str(md, "engine_kind", "metadata", true);
  if (!r.ok) return Error::InvalidProgram;
  if (kind == "reference") {
    info.engine_kind = EngineKind::Reference;
  } else if (kind == "tensorrt") {
    info.engine_kind = EngineKind::TensorRT;
  } else if (kind == "tensorrt_rtx") {
    info.engine_kind = EngineKind::TensorRTRTX;
  } else {
    return r.refuse("metadata.engine_kind", "engine_kind '" + kind +
                                                "' is not one of 'reference', 'tensorrt', "
                                                "'tensorrt_rtx'");
  }
  return Error::Ok;
}

// weights[i]: a static tensor of a known dtype within kMaxBindingBytes (python's _weight_tensor).
bool read_weight_tensor(Reader& r, const std::string& dtype, const Json& shape,
                        const std::string& where, WeightRef& w) {
  bool ok = dtype_from_name(dtype, w.dtype);
  uint64_t n = ok ? dtype_size(w.dtype) : 0;
  for (const Json& s : shape) {
    if (!ok) break;
    ok = is_int64(s) && s.get<int64_t>() >= 0;
    const uint64_t d = ok ? static_cast<uint64_t>(s.get<int64_t>()) : 0;
    n = (d != 0 && n > kMaxBindingBytes / d) ? kMaxBindingBytes + 1 : n * d;
    if (ok) w.shape.push_back(s.get<int64_t>());
  }
  if (!ok || n > kMaxBindingBytes) {
    return r.fail("weights.tensor", where + " '" + w.key + "': \"" + dtype + "\" " +
                                        json_excerpt(shape, 60) +
                                        " is not a static tensor of a known dtype within "
                                        "2**63-1 bytes");
  }
  w.nbytes = static_cast<size_t>(n);
  return true;
}

// Version 4 "weights" (python's blob_validate._weights, in its order).
bool read_weights(Reader& r, const Json& md, BlobInfo& info) {
  const Json* lst = r.get(md, "weights", Kind::Array, "metadata", false);
  for (size_t i = 0; lst && r.ok && i < lst->size(); ++i) {
    const Json& e = (*lst)[i];
    const std::string where = format("weights[%zu]", i);
    if (!e.is_object()) return r.fail("metadata.type", where + " must be an object");
    WeightRef w;
    w.key = r.str(e, "key", where, true);
    const std::string dtype = r.str(e, "dtype", where, true);
    const Json* shape = r.get(e, "shape", Kind::Array, where, true);
    if (!r.ok) return false;
    if (w.key.empty()) {
      return r.fail("weights.key", where + ": empty key; a weight is named data under a key");
    }
    if (!read_weight_tensor(r, dtype, *shape, where, w)) return false;
    info.weights.push_back(std::move(w));
  }
  if (r.ok && !info.weights.empty() && info.engine_kind != EngineKind::Reference) {
    return r.fail("weights.engine_kind",
                  "a TensorRT engine carries its weights in its plan; 'weights' is for "
                  "reference engines only");
  }
  return r.ok;
}

// Version 5 "engine_data" (python's blob_validate._engine_data, in its order).
bool read_engine_data(Reader& r, const Json& md, BlobInfo& info) {
  const auto it = md.find("engine_data");
  if (!r.ok || it == md.end()) return r.ok;
  if (!it->is_object()) {
    return r.fail("metadata.type",
                  "metadata: 'engine_data' must be an object, got " + json_excerpt(*it));
  }
  const std::string key = r.str(*it, "key", "engine_data", true);
  const Json* nbytes = r.get(*it, "nbytes", Kind::Int64, "engine_data", true);
  if (!r.ok) return false;
  const size_t n = std::strlen(kNamedDataKeyPrefix);
  if (key.size() != n + 64 || key.compare(0, n, kNamedDataKeyPrefix) != 0 ||
      !is_hex_digest(key.substr(n))) {
    return r.fail("engine_data.key", "engine_data: key " + json_excerpt(*it->find("key"), 90) +
                                         " is not 'tte/sha256/' and the 64 lowercase hex digits "
                                         "of the plan's SHA-256");
  }
  if (nbytes->get<int64_t>() < 1) {
    return r.fail("engine_data.nbytes", "engine_data: nbytes " + json_excerpt(*nbytes) +
                                            " is not a plan's size (at least 1 byte)");
  }
  if (info.engine_kind == EngineKind::Reference) {
    return r.fail("engine_data.engine_kind",
                  "a reference engine's program is its payload; 'engine_data' is for TensorRT "
                  "plans only");
  }
  info.engine_data = {key, static_cast<uint64_t>(nbytes->get<int64_t>())};
  return true;
}

// The TR03 extension keys, after tte_version and engine_kind.
Error read_extensions(Reader& r, const Json& md, BlobInfo& info) {
  info.delegate_inputs = r.names(md, "delegate_inputs");
  info.delegate_outputs = r.names(md, "delegate_outputs");
  for (auto& [input, fqn] : r.entries<2>(md, "buffers", {"input", "fqn"})) {
    info.buffers.push_back({std::move(input), std::move(fqn)});
  }
  for (auto& [output, input] : r.entries<2>(md, "copy_back", {"output", "input"})) {
    info.copy_back.push_back({std::move(output), std::move(input)});
  }
  if (const Json* v = r.get(md, "engine_sha256", Kind::String, "metadata", false)) {
    const std::string& digest = v->get_ref<const std::string&>();
    if (!is_hex_digest(digest)) {
      return r.refuse("metadata.engine_sha256",
                      "metadata: 'engine_sha256' must be 64 lowercase hex digits (the SHA-256 of "
                      "the engine payload), got " +
                          json_excerpt(*v));
    }
    info.engine_sha256 = digest;
  }
  if (const Json* v = r.get(md, "weight_streaming_budget", Kind::Int64, "metadata", false)) {
    if (v->get<int64_t>() < 0) {
      return r.refuse("metadata.weight_streaming_budget",
                      "metadata: 'weight_streaming_budget' must be a non-negative integer (bytes "
                      "of engine weights kept on the device), got " +
                          json_excerpt(*v));
    }
    info.weight_streaming_budget = v->get<int64_t>();
  }
  read_weights(r, md, info);
  read_engine_data(r, md, info);
  return r.ok ? Error::Ok : Error::InvalidProgram;
}

}  // namespace

Error read_metadata(const char* text, size_t size, BlobInfo& info, Reason& why) {
  Json md;
  if (!read_json(text, size, md, why)) return Error::InvalidProgram;
  Reader r{why};
  if (!md.is_object()) return r.refuse("metadata.root", "metadata JSON must be an object");
  if (!read_bindings(r, md, info) || !read_upstream_keys(r, md, info)) {
    return Error::InvalidProgram;
  }
  if (info.format != 3) return read_upstream_meaning(r, md, info);
  if (Error e = read_version_and_kind(r, md, info); e != Error::Ok) return e;
  return read_extensions(r, md, info);
}

}  // namespace tte
