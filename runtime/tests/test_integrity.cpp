// TR03 integrity (CONTRACTS.md §1 "Integrity") and the limits both blob readers share:
// every digest mismatch refused with its message; every byte of a real blob flipped is refused
// unless it is one the readers never read; NUL inside strings, nesting beyond 64 levels and
// bindings larger than 2**63-1 bytes refused under the check ids python's blob.parse names
// (tests/test_blob_differential.py compares the two readers on one corpus).
#include "blob_builder.h"
#include "check.h"

#include "blob.h"
#include "blob_json.h"
#include "sha256.h"

#include <nlohmann/json.hpp>

#include <cstring>

using executorch::runtime::Error;
using tte_test::BlobFields;
using tte_test::build;
using tte_test::replace_all;

namespace {

const std::string kPayloads = TTE_PAYLOADS_DIR;

const std::string kMeta = R"({"io_bindings":[
 {"name":"x","dtype":"float32","shape":[4],"is_input":true},
 {"name":"y","dtype":"float32","shape":[4],"is_input":false}],
 "tte_version":3,"engine_kind":"reference","delegate_inputs":["x"],"delegate_outputs":["y"]})";

std::string refusal(const std::string& blob) {
  tte::Reason why;
  auto r = tte::parse_blob(blob.data(), blob.size(), why);
  return r.ok() ? "accepted" : why.text;
}

// The check id of the refusal ("accepted" when none).
std::string check_of(const std::string& blob) {
  tte::Reason why;
  auto r = tte::parse_blob(blob.data(), blob.size(), why);
  return r.ok() ? "accepted" : why.check;
}

std::string blob_with(const std::string& md, const std::string& engine = "ENGINE") {
  BlobFields f;
  f.metadata = md;
  f.engine = engine;
  return build(f);
}

uint32_t le32(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(b[at + i]);
  return v;
}

}  // namespace

TEST(sha256_is_fips_180_4) {
  CHECK_EQ(tte::hex_digest(tte::sha256("", 0)),
           std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  CHECK_EQ(tte::hex_digest(tte::sha256("abc", 3)),
           std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // 2 blocks
  CHECK_EQ(tte::hex_digest(tte::sha256(two.data(), two.size())),
           std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
  const std::string million(1000000, 'a');
  CHECK_EQ(tte::hex_digest(tte::sha256(million.data(), million.size())),
           std::string("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

TEST(digest_mismatches_are_refused_naming_both_digests) {
  const std::string good = blob_with(kMeta);
  CHECK_EQ(refusal(good), std::string("accepted"));
  std::string md_flip = good;
  md_flip[64 + 5] ^= 0x20;  // inside the metadata text
  const size_t md_size = le32(good, 8);
  const std::string got = tte::hex_digest(tte::sha256(md_flip.data() + 64, md_size));
  tte::Digest rec;
  std::memcpy(rec.data(), good.data() + 32, 32);
  CHECK_EQ(check_of(md_flip), std::string("blob.metadata_digest"));
  CHECK_EQ(refusal(md_flip), "metadata SHA-256 mismatch: the header records " +
                                 tte::hex_digest(rec) + ", the " + std::to_string(md_size) +
                                 " metadata bytes hash to " + got +
                                 "; the blob is corrupt (or was written without checksums by an "
                                 "older torch-tensorrt-ext): re-export the .pte");
  std::string eng_flip = good;
  eng_flip[eng_flip.size() - 1] ^= 1;  // the payload's last byte
  CHECK_EQ(check_of(eng_flip), std::string("blob.engine_digest"));
  CHECK_EQ(refusal(eng_flip), "engine payload SHA-256 mismatch: the metadata records " +
                                  tte::hex_digest(tte::sha256("ENGINE", 6)) +
                                  ", the 6 payload bytes hash to " +
                                  tte::hex_digest(tte::sha256("ENGIND", 6)) +
                                  "; the blob is corrupt: re-export "
                                  "the .pte");
}

TEST(engine_digest_is_required_and_well_formed) {
  BlobFields f;
  f.metadata = kMeta;
  f.engine = "ENGINE";
  f.seal = false;
  CHECK_EQ(refusal(tte_test::reseal(build(f))), std::string("metadata has no 'engine_sha256'"));
  CHECK_EQ(check_of(tte_test::reseal(build(f))), std::string("blob.engine_digest_missing"));
  const std::string with = kMeta.substr(0, kMeta.size() - 1) + R"(,"engine_sha256":)";
  CHECK_EQ(refusal(blob_with(with + std::string("\"") + std::string(64, 'A') + "\"}")),
           std::string("metadata: 'engine_sha256' must be 64 lowercase hex digits (the SHA-256 "
                       "of the engine payload), got \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
  CHECK_EQ(check_of(blob_with(with + "\"" + std::string(63, 'a') + "\"}")),
           std::string("metadata.engine_sha256"));
  CHECK_EQ(refusal(blob_with(with + "5}")),
           std::string("metadata: 'engine_sha256' must be a string, got 5"));
  CHECK_EQ(check_of(blob_with(with + "5}")), std::string("metadata.type"));
}

TEST(every_flipped_byte_of_a_real_blob_is_refused_unless_never_read) {
  // kv_step.blob: written by python's serialize around a real reference payload.
  const std::string good = tte_test::read_file(kPayloads + "/kv_step.blob");
  REQUIRE(refusal(good) == "accepted");
  const size_t md_end = le32(good, 4) + le32(good, 8), eng_off = le32(good, 12);
  size_t refused = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = -1; bit < 8; ++bit) {  // the whole byte, then (header only) each bit
      if (bit >= 0 && i >= 64) break;
      std::string b = good;
      b[i] ^= static_cast<char>(bit < 0 ? 0xff : 1 << bit);
      const bool never_read = (i >= 24 && i < 32) || (i >= md_end && i < eng_off);
      std::string why = refusal(b);
      if (never_read) {
        CHECK_EQ(why, std::string("accepted"));  // reserved header bytes, padding
      } else if (why == "accepted") {
        FAIL_AT("byte " + std::to_string(i) + " flipped was accepted");
      } else {
        ++refused;
      }
    }
  }
  CHECK(refused > good.size());
}

TEST(nul_inside_a_string_is_refused_wherever_it_is) {
  CHECK_EQ(
      refusal(blob_with(replace_all(kMeta, R"("dtype":"float32","shape":[4],"is_input":true)",
                                    R"("dtype":"float32\u0000junk","shape":[4],"is_input":true)"))),
      std::string("metadata JSON holds a NUL character (\\u0000) in the string "
                  "\"float32\\u0000junk\"; strings must not contain NUL"));
  CHECK_EQ(check_of(blob_with(
               replace_all(kMeta, R"({"io_bindings")", R"({"a":"\u0000","io_bindings")"))),
           std::string("json.nul"));
  CHECK_EQ(
      refusal(blob_with(replace_all(kMeta, R"({"io_bindings")", R"({"a\u0000":1,"io_bindings")"))),
      std::string("metadata JSON holds a NUL character (\\u0000) in the string "
                  "\"a\\u0000\"; strings must not contain NUL"));
  tte::DType d;
  CHECK(!tte::dtype_from_name(std::string("float32\0junk", 12), d));
  CHECK(tte::dtype_from_name("float32", d) && d == tte::DType::Float32);
}

TEST(arrays_and_objects_nest_at_most_64_deep) {
  auto with_member = [](const std::string& value) {
    return replace_all(kMeta, R"({"io_bindings")", "{\"x\":" + value + ",\"io_bindings\"");
  };
  // The root object is depth 1: 63 arrays inside it are the deepest allowed.
  const std::string a63(63, '['), c63(63, ']'), a64(64, '['), c64(64, ']');
  CHECK_EQ(refusal(blob_with(with_member(a63 + "1" + c63))), std::string("accepted"));
  CHECK_EQ(refusal(blob_with(with_member(a63 + c63))), std::string("accepted"));
  CHECK_EQ(check_of(blob_with(with_member(a64 + c64))), std::string("json.depth"));
  CHECK_EQ(refusal(blob_with(with_member(a64 + "1" + c64))),
           std::string("metadata JSON nests arrays and objects more than 64 deep"));
  CHECK_EQ(check_of(blob_with(with_member(std::string(5000, '[')))), std::string("json.depth"));
  std::string objects;
  for (int i = 0; i < 5000; ++i) objects += "{\"a\":";
  CHECK_EQ(check_of(blob_with(with_member(objects))), std::string("json.depth"));
  // a syntax error before the deep value is what is refused
  CHECK_EQ(check_of(blob_with(with_member("[1 2" + std::string(70, '[')))),
           std::string("json.syntax"));
}

TEST(syntax_errors_are_refused_as_syntax) {
  for (const std::string text :
       {R"(["ab\x"])", R"(["ab\u12x4"])", R"(["a\ud800\u12x4"])", R"(["abc)", "[1.]", "[1e+]",
        "[-]", "[01]", "", "{} x", "[1,]", "{\"a\":1,}", "[\"\x01\"]", "//c\n{}", "nul", "'a'",
        // the input's own words never pick the check
        R"(["a surrogate U+D800 while parsing value - NaN)",
        R"(["- invalid string: surrogate U+D8)"}) {
    tte::Reason why;
    tte::Json j;
    CHECK(!tte::read_json(text.data(), text.size(), j, why));
    CHECK_EQ(std::string(why.check), std::string("json.syntax"));
    CHECK(why.text.rfind("metadata JSON is malformed at byte ", 0) == 0);
  }
}

TEST(bindings_larger_than_2_63_bytes_are_refused_and_sizes_never_wrap) {
  auto with_shape = [](const std::string& dtype, const std::string& shape) {
    return blob_with(replace_all(kMeta, R"("name":"x","dtype":"float32","shape":[4])",
                                 R"("name":"x","dtype":")" + dtype + R"(","shape":)" + shape));
  };
  CHECK_EQ(refusal(with_shape("float32", "[4611686018427387904,4]")),
           std::string("binding 'x' (float32 [4611686018427387904,4]) is larger than 2**63-1 "
                       "bytes"));
  CHECK_EQ(refusal(with_shape("float32", "[4294967296,4294967296,0]")),  // wraps before the 0
           std::string("binding 'x' (float32 [4294967296,4294967296,0]) is larger than 2**63-1 "
                       "bytes"));
  CHECK_EQ(refusal(with_shape("float32", "[-1,4611686018427387904]")),
           std::string("binding 'x' (float32 [-1,4611686018427387904]) is larger than 2**63-1 "
                       "bytes"));
  // (x is a delegate input, so an input this large is refused only at execute by its tensor.)
  CHECK_EQ(check_of(with_shape("float32", "[4611686018427387904,4]")),
           std::string("binding.too_large"));
  std::string b = with_shape("int8", "[9223372036854775807]");
  tte::Reason why;
  auto info = tte::parse_blob(b.data(), b.size(), why);
  REQUIRE(info.ok());
  CHECK_EQ(info->inputs[0].nbytes(), size_t(9223372036854775807ull));
  tte::Binding wide = info->inputs[0];
  wide.dtype = tte::DType::Int64;  // not validated: the size saturates instead of wrapping
  CHECK(!wide.fits());
  CHECK_EQ(wide.nbytes(), SIZE_MAX);
}

TEST_MAIN()
