// SHA-256 (FIPS 180-4) for the blob's integrity digests (CONTRACTS.md §1, "Integrity"), computed
// by OpenSSL's libcrypto.
//
// Invariant: `sha256` of a byte range equals python's hashlib.sha256 of the same bytes (checked
// by the tests on the FIPS test vectors and on random data against Python). It never throws and
// reads [data, data+size) once; should OpenSSL fail (no memory for its context) it returns the
// all-zero digest, which no recorded digest matches, so the blob is refused.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tte {

using Digest = std::array<uint8_t, 32>;

Digest sha256(const void* data, size_t size) noexcept;

// 64 lowercase hex digits (python's hashlib.sha256(...).hexdigest()); allocates.
std::string hex_digest(const Digest& d);

// The digest `hex_digest` writes as `hex` (64 lowercase hex digits); false for any other text.
bool digest_from_hex(const std::string& hex, Digest& out) noexcept;

}  // namespace tte
