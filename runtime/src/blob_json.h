// Strict JSON for delegate blob metadata (CONTRACTS.md §1), read with nlohmann/json.
//
// Invariant: `read_json` fills `out` with the value of the whole text exactly when it is strict
// JSON the blob contract allows; otherwise it returns false with `why` naming the first defect
// the parse reaches, in document order: json.utf8 (the first byte that is not UTF-8: checked
// over the whole text first), json.syntax (nlohmann's parse error; also a UTF-8 BOM, which
// python's json refuses and nlohmann would skip), json.depth (an array or object opened inside
// kMaxJsonNesting others), json.non_finite (NaN, Infinity, -Infinity, or a number that overflows
// a double), json.surrogate (an unpaired \ud800-\udfff escape), json.duplicate_key (an object
// holding a key twice, reported when that object closes); then json.nul (a string, key or value,
// holding \u0000: reported only once the whole text parsed). Python's contracts/blob_json reads
// in the same order, so both readers name the same check for the same text (their sentences are
// their own). No exception leaves it: nlohmann's SAX parser reports parse errors to the handler
// instead of throwing, and values are type-checked before they are read; only an allocation
// failure could throw (parse_blob catches that).
#pragma once

#include "common.h"

#include <nlohmann/json_fwd.hpp>

#include <cstddef>

namespace tte {

using Json = nlohmann::ordered_json;  // document order kept, for messages quoting a value

// Arrays and objects nest at most this deep (the root container is depth 1).
constexpr size_t kMaxJsonNesting = 64;

bool read_json(const char* data, size_t size, Json& out, Reason& why);

// `v` as JSON text for a message (compact, at most `max` bytes; never throws on odd strings).
std::string json_excerpt(const Json& v, size_t max = 40);

}  // namespace tte
