// TR03 integrity (CONTRACTS.md §1 "Integrity"): the header's bytes [32, 64) hold the SHA-256 of
// the metadata bytes, and the metadata's `engine_sha256` that of the engine payload.
//
// Invariant: each check returns true exactly when the recorded digest equals the digest of the
// bytes as they are, else false with `why` (blob.metadata_digest, blob.engine_digest or
// blob.engine_digest_missing: python's blob._check_*_digest refuse with the same ids) naming both
// digests and what to do. They read only the ranges given, which the caller has bounds-checked.
#pragma once

#include "blob.h"

#include <cstdint>
#include <string>

namespace tte {

// 64 lowercase hex digits.
bool is_hex_digest(const std::string& s);
bool metadata_digest_matches(const uint8_t* blob, uint64_t md_off, uint64_t md_size, Reason& why);
// Also false ("metadata has no 'engine_sha256'") when the metadata recorded none.
bool engine_digest_matches(const BlobInfo& info, Reason& why);

}  // namespace tte
