// TR03 integrity checks; see blob_integrity.h.
#include "blob_integrity.h"

#include "sha256.h"

#include <cstring>

namespace tte {

bool is_hex_digest(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// TR03 integrity (CONTRACTS.md §1): bytes [32, 64) hold the SHA-256 of the metadata bytes.
bool metadata_digest_matches(const uint8_t* p, uint64_t md_off, uint64_t md_size, Reason& why) {
  const Digest got = sha256(p + md_off, md_size);
  if (std::memcmp(got.data(), p + kBlobHeaderSize, got.size()) == 0) return true;
  Digest recorded;
  std::memcpy(recorded.data(), p + kBlobHeaderSize, recorded.size());
  return why.reject(
      "blob.metadata_digest",
      format("metadata SHA-256 mismatch: the header records %s, the %llu metadata bytes hash "
             "to %s; the blob is corrupt (or was written without checksums by an older "
             "torch-tensorrt-ext): re-export the .pte",
             hex_digest(recorded).c_str(), static_cast<unsigned long long>(md_size),
             hex_digest(got).c_str()));
}

// ... and the metadata's engine_sha256 that of the engine payload.
bool engine_digest_matches(const BlobInfo& info, Reason& why) {
  if (info.engine_sha256.empty()) {
    return why.reject("blob.engine_digest_missing", "metadata has no 'engine_sha256'");
  }
  const std::string got = hex_digest(sha256(info.engine, info.engine_size));
  if (got == info.engine_sha256) return true;
  return why.reject(
      "blob.engine_digest",
      format("engine payload SHA-256 mismatch: the metadata records %s, the %llu payload bytes "
             "hash to %s; the blob is corrupt: re-export the .pte",
             info.engine_sha256.c_str(), static_cast<unsigned long long>(info.engine_size),
             got.c_str()));
}

}  // namespace tte
