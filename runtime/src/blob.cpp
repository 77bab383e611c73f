// Blob header, ranges and the order of the reading steps; see blob.h. Each step mirrors one of
// python's contracts/blob.py, with the same check id.
#include "blob.h"

#include "blob_integrity.h"

#include <cctype>
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

bool Binding::bounded_dynamic() const {
  return known && !is_static() && max_shape.size() == shape.size();
}

size_t Binding::max_nbytes() const {
  if (is_static()) return nbytes();
  if (!known || max_shape.size() != shape.size()) return 0;
  uint64_t n = dtype_size(dtype);
  for (int64_t s : max_shape) {
    if (s < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(s), &n)) return SIZE_MAX;
  }
  return n > kMaxBindingBytes ? SIZE_MAX : static_cast<size_t>(n);
}

bool Binding::fits() const {
  if (!known) return true;
  uint64_t n = dtype_size(dtype);
  for (int64_t s : shape) {
    if (s >= 0 && __builtin_mul_overflow(n, static_cast<uint64_t>(s), &n)) return false;
  }
  return n <= kMaxBindingBytes;
}

std::string Binding::describe() const {
  if (!known) return "unknown";
  const std::string bound = max_shape.empty() ? "" : " (max " + shape_text(max_shape) + ")";
  return std::string(dtype_name(dtype)) + " " + shape_text(shape) + bound;
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

using ull = unsigned long long;

uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t le64(const uint8_t* p) { return uint64_t(le32(p)) | uint64_t(le32(p + 4)) << 32; }

struct Header {
  uint64_t md_off = 0, md_size = 0, eng_off = 0, eng_size = 0;
  size_t size = 0;  // TR03: 64, else 32
};

// The magic and the four offset/size fields.
Error read_header(const uint8_t* p, size_t n, BlobInfo& info, Header& h, Reason& why) {
  if (n < kBlobHeaderSize) {
    return why.fail(
        Error::InvalidProgram, "blob.short",
        format("blob is %zu bytes, shorter than its %zu-byte header", n, kBlobHeaderSize));
  }
  std::memcpy(info.magic, p, 4);
  for (int format_digit = 1; format_digit <= 3; ++format_digit) {
    const char want[5] = {'T', 'R', '0', static_cast<char>('0' + format_digit), 0};
    if (std::memcmp(p, want, 4) == 0) info.format = format_digit;
  }
  if (info.format == 0) {
    char shown[5];
    for (int i = 0; i < 4; ++i) shown[i] = std::isprint(p[i]) ? static_cast<char>(p[i]) : '.';
    shown[4] = 0;
    return why.fail(Error::DelegateInvalidCompatibility, "blob.magic",
                    format("unsupported blob magic \"%s\" (bytes %02x %02x %02x %02x): this "
                           "reader accepts TR01, TR02 and TR03",
                           shown, p[0], p[1], p[2], p[3]));
  }
  h.md_off = le32(p + 4);
  h.md_size = le32(p + 8);
  h.eng_off = le32(p + 12);
  h.eng_size = le64(p + 16);
  h.size = info.format == 3 ? kTr03HeaderSize : kBlobHeaderSize;
  return Error::Ok;
}

// The metadata and engine ranges lie inside the blob, in order, the engine aligned.
Error check_ranges(const Header& h, size_t size, Reason& why) {
  const Error bad = Error::InvalidProgram;
  const ull n = size, md_end = h.md_off + h.md_size;
  if (h.md_off < h.size) {
    return why.fail(
        bad, "blob.metadata_offset",
        format("metadata offset %llu lies inside the %zu-byte header", (ull)h.md_off, h.size));
  }
  if (md_end > n) {
    return why.fail(bad, "blob.metadata_range",
                    format("metadata [%llu, %llu) runs past the end of the %llu-byte blob",
                           (ull)h.md_off, md_end, n));
  }
  if (h.eng_off % kEngineAlignment) {
    return why.fail(
        bad, "blob.engine_alignment",
        format("engine offset %llu is not %u-byte aligned", (ull)h.eng_off, kEngineAlignment));
  }
  if (h.eng_off > n || h.eng_size > n - h.eng_off) {  // eng_size is 64-bit: no overflow
    return why.fail(bad, "blob.engine_range",
                    format("engine [%llu, %llu) runs past the end of the %llu-byte blob",
                           (ull)h.eng_off, (ull)(h.eng_off + h.eng_size), n));
  }
  if (md_end > h.eng_off) {
    return why.fail(bad, "blob.overlap",
                    format("metadata [%llu, %llu) overlaps the engine at offset %llu",
                           (ull)h.md_off, md_end, (ull)h.eng_off));
  }
  return Error::Ok;
}

Result<BlobInfo> read_blob(const uint8_t* p, size_t size, Reason& why) {
  BlobInfo info;
  Header h;
  if (Error e = read_header(p, size, info, h, why); e != Error::Ok) return e;
  if (Error e = check_ranges(h, size, why); e != Error::Ok) return e;
  if (info.format == 3 && !metadata_digest_matches(p, h.md_off, h.md_size, why)) {
    return Error::InvalidProgram;
  }
  const char* md_text = reinterpret_cast<const char*>(p + h.md_off);
  if (Error e = read_metadata(md_text, h.md_size, info, why); e != Error::Ok) return e;
  info.engine = p + h.eng_off;
  info.engine_size = h.eng_size;
  if (info.format == 3 && !engine_digest_matches(info, why)) return Error::InvalidProgram;
  if (!info.engine_data.key.empty() && info.engine_size != 0) {
    return why.fail(Error::InvalidProgram, "engine_data.payload",
                    format("a blob whose plan is named data '%s' carries a %llu-byte payload; its "
                           "payload is empty",
                           info.engine_data.key.c_str(), (ull)info.engine_size));
  }
  if (!validate_blob(info, why)) return Error::InvalidProgram;
  return info;
}

}  // namespace

Result<BlobInfo> parse_blob(const void* data, size_t size, Reason& why) {
  try {  // the one catch of the reader: strings, vectors and nlohmann's values allocate
    return read_blob(static_cast<const uint8_t*>(data), size, why);
  } catch (...) {  // std::bad_alloc; the text fits std::string's small buffer
    why.check = "runtime.out_of_memory";
    why.text = "out of memory";
    return Error::MemoryAllocationFailed;
  }
}

}  // namespace tte
