// Builds blobs for the C++ tests: header fields and JSON chosen freely, so malformed blobs can
// be made as easily as valid ones.
//
// Invariant: with default fields, `build` lays a blob out exactly as python's blob.serialize
// does (header `<4sIIIQ8s>`; for TR03 the metadata's SHA-256 at 32 and the metadata at 64, else
// the metadata at 32; engine at the next 16-byte boundary). A sealed TR03 blob (the default)
// gets `"engine_sha256"` appended to its metadata object (unless the text names one already or
// does not end in '}') and the metadata digest in its header, so tests write only what they
// test; `seal = false` leaves both to the test.
#pragma once

#include "sha256.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tte_test {

struct BlobFields {
  std::string magic = "TR03";
  std::string metadata;
  std::string engine;
  int64_t md_off = -1, md_size = -1, eng_off = -1,
          eng_size = -1;  // -1: computed; other values are written as is
  bool seal = true;
};

// The metadata with `"engine_sha256"` for `engine` appended, as serialize writes it.
inline std::string sealed_metadata(const std::string& md, const std::string& engine) {
  const size_t close = md.find_last_not_of(" \t\r\n");
  if (close == std::string::npos || md[close] != '}' ||
      md.find("\"engine_sha256\"") != std::string::npos) {
    return md;
  }
  const size_t last = md.find_last_not_of(" \t\r\n", close - 1);
  const bool empty = last != std::string::npos && md[last] == '{';
  return md.substr(0, close) + (empty ? "" : ",") + "\"engine_sha256\":\"" +
         tte::hex_digest(tte::sha256(engine.data(), engine.size())) + "\"" + md.substr(close);
}

inline void put32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
inline void put64(std::string& s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

inline std::string build(const BlobFields& f) {
  const bool tr03 = f.magic == "TR03";
  const std::string md = tr03 && f.seal ? sealed_metadata(f.metadata, f.engine) : f.metadata;
  const int64_t md_off = f.md_off != -1 ? f.md_off : tr03 ? 64 : 32;
  const size_t md_end = static_cast<size_t>(md_off) + md.size();
  const size_t aligned = (md_end + 15) / 16 * 16;
  const size_t eo = f.eng_off == -1 ? aligned : static_cast<size_t>(f.eng_off);
  std::string s(32, '\0');
  std::memcpy(&s[0], f.magic.data(), 4);
  put32(s, 4, static_cast<uint32_t>(md_off));
  put32(s, 8, static_cast<uint32_t>(f.md_size == -1 ? md.size() : f.md_size));
  put32(s, 12, static_cast<uint32_t>(eo));
  put64(s, 16, static_cast<uint64_t>(f.eng_size == -1 ? f.engine.size() : f.eng_size));
  s[24] = 1;
  if (tr03 && f.seal && md_off >= 64) {
    const tte::Digest d = tte::sha256(md.data(), md.size());
    s.append(reinterpret_cast<const char*>(d.data()), d.size());
  }
  s.resize(static_cast<size_t>(md_off), '\0');
  s += md;
  size_t body = eo > aligned ? eo : aligned;
  if (s.size() > body) body = s.size();
  s.resize(body, '\0');
  return s + f.engine;
}

// A binding as torch-tensorrt 2.14.0's TensorRTBackend.preprocess writes it: it does not know
// the dtype and shape and leaves TensorRTIOBinding's defaults, "" and [].
inline std::string upstream_binding(const std::string& name, bool is_input) {
  return R"({"name":")" + name + R"(","dtype":"","shape":[],"is_input":)" +
         (is_input ? "true" : "false") + "}";
}

// Upstream's metadata JSON (its key order, compact separators, as tests/test_blob.py's
// upstream_meta writes it): `bindings` are io_bindings entries, `aliased` the aliased_io list.
inline std::string upstream_metadata(const std::vector<std::string>& bindings,
                                     const std::string& aliased = "[]") {
  std::string s = R"({"io_bindings":[)";
  for (size_t i = 0; i < bindings.size(); ++i) s += (i ? "," : "") + bindings[i];
  return s + R"(],"aliased_io":)" + aliased +
         R"(,"hardware_compatible":false,"device_id":0,"serialized_metadata":"",)"
         R"("target_platform":""})";
}

// `blob` with its TR03 digests recomputed for whatever it now holds (the engine digest only
// where the metadata text has `"engine_sha256":"` + 64 characters), so a test or fuzz harness
// can change the metadata or the payload and reach the checks behind the integrity check. Any
// other blob, or one whose header ranges do not fit, is returned unchanged.
inline std::string reseal(std::string blob) {
  auto le = [&](size_t at, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(blob[at + i]);
    return v;
  };
  if (blob.size() < 64 || blob.compare(0, 4, "TR03") != 0) return blob;
  const uint64_t n = blob.size(), md_off = le(4, 4), md_size = le(8, 4), eng_off = le(12, 4);
  const uint64_t eng_size = le(16, 8);
  if (md_off < 64 || md_off + md_size > n || eng_off > n || eng_size > n - eng_off) return blob;
  const std::string key = "\"engine_sha256\":\"";
  const size_t at = blob.find(key, md_off);
  if (at != std::string::npos && at + key.size() + 64 <= md_off + md_size) {
    const std::string hex = tte::hex_digest(tte::sha256(blob.data() + eng_off, eng_size));
    blob.replace(at + key.size(), 64, hex);
  }
  const tte::Digest d = tte::sha256(blob.data() + md_off, md_size);
  std::memcpy(&blob[32], d.data(), d.size());
  return blob;
}

inline std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) {
    s.replace(p, from.size(), to);
  }
  return s;
}

}  // namespace tte_test
