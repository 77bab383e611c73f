// Blob parsing (CONTRACTS.md §1) and the JSON reader: upstream fixtures, TR03, and every
// malformed case refused with its error code, its check id (the one python's BlobError.check
// names for the same input) and a message naming the binding/key.
#include "blob_builder.h"
#include "check.h"

#include "blob.h"
#include "blob_json.h"

#include <nlohmann/json.hpp>

using executorch::runtime::Error;
using tte_test::BlobFields;
using tte_test::build;
using tte_test::replace_all;

namespace {

const std::string kFixtures = TTE_FIXTURES_DIR;

std::string upstream_engine() {
  std::string e = "NOT-A-TENSORRT-ENGINE:";
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 256; ++i) e.push_back(static_cast<char>(i));
  return e;
}

// The valid TR03 metadata both languages' blob tests start from (tests/fixtures/kv_meta.json):
// KV aliased, a copy-back counter, one delegate output.
const std::string kKvMeta = tte_test::read_file(kFixtures + "/kv_meta.json");

struct Parsed {
  std::string blob;  // info.engine points into it
  Error code = Error::Ok;
  tte::Reason why;
  tte::BlobInfo info;
};

Parsed parse(std::string blob) {
  Parsed p;
  p.blob = std::move(blob);
  auto r = tte::parse_blob(p.blob.data(), p.blob.size(), p.why);
  if (r.ok()) {
    p.info = std::move(r.get());
  } else {
    p.code = r.error();
  }
  return p;
}

Parsed parse_meta(const std::string& md, const std::string& magic = "TR03") {
  BlobFields f;
  f.magic = magic;
  f.metadata = md;
  f.engine = "ENGINE";
  return parse(build(f));
}

// Refused with `code` under check id `check`, the message holding `names` (the binding, key or
// value it names; the whole message where the test pins it).
void refused(const Parsed& p, Error code, const std::string& check, const std::string& names,
             int line) {
  if (p.code != code || p.why.check != check || p.why.text.find(names) == std::string::npos) {
    ++tte_test::failures();
    std::printf("  line %d: expected refusal 0x%x %s \"...%s...\"\n          got 0x%x %s \"%s\"\n",
                line, static_cast<unsigned>(code), check.c_str(), names.c_str(),
                static_cast<unsigned>(p.code), p.why.check, p.why.text.c_str());
  }
}
#define REFUSED(p, code, check, names) refused((p), Error::code, (check), (names), __LINE__)

}  // namespace

TEST(version_5_reads_a_plan_kept_as_named_data_with_an_empty_payload) {
  const std::string key = "tte/sha256/" + std::string(64, 'c');
  const std::string md = replace_all(
      replace_all(kKvMeta, "\"tte_version\":3", "\"tte_version\":5"),
      "\"engine_kind\":\"reference\"",
      "\"engine_kind\":\"tensorrt\",\"engine_data\":{\"key\":\"" + key + "\",\"nbytes\":4096}");
  BlobFields f;
  f.metadata = md;
  Parsed p = parse(build(f));  // the payload empty
  REQUIRE(p.code == Error::Ok);
  CHECK_EQ(p.info.engine_data.key, key);
  CHECK_EQ(p.info.engine_data.nbytes, uint64_t{4096});
  CHECK_EQ(p.info.engine_size, uint64_t{0});
  REFUSED(parse_meta(md), InvalidProgram, "engine_data.payload",
          "a blob whose plan is named data '" + key +
              "' carries a 6-byte payload; its payload is empty");
}

TEST(reads_upstream_tr01_fixture) {
  Parsed p = parse(tte_test::read_file(kFixtures + "/upstream_tr01.blob"));
  REQUIRE(p.code == Error::Ok);
  CHECK_EQ(std::string(p.info.magic), std::string("TR01"));
  CHECK_EQ(p.info.format, 1);
  REQUIRE(p.info.inputs.size() == 1 && p.info.outputs.size() == 1);
  CHECK_EQ(p.info.inputs[0].name, std::string("x"));
  CHECK_EQ(p.info.inputs[0].describe(), std::string("float32 [1,4]"));
  CHECK_EQ(p.info.outputs[0].name, std::string("y"));
  CHECK(p.info.engine_kind == tte::EngineKind::TensorRT);
  CHECK(p.info.aliased_io.empty());
  CHECK_EQ(p.info.delegate_inputs.size(), size_t(1));
  CHECK_EQ(p.info.delegate_outputs[0], std::string("y"));
  CHECK_EQ(std::string(reinterpret_cast<const char*>(p.info.engine), p.info.engine_size),
           upstream_engine());
  CHECK_EQ(p.info.device_id, int64_t(0));
  CHECK(!p.info.hardware_compatible);
}

TEST(reads_upstream_tr02_fixture_with_aliased_kv) {
  Parsed p = parse(tte_test::read_file(kFixtures + "/upstream_tr02_kv.blob"));
  REQUIRE(p.code == Error::Ok);
  CHECK_EQ(p.info.format, 2);
  REQUIRE(p.info.inputs.size() == 3 && p.info.outputs.size() == 2);
  CHECK_EQ(p.info.inputs[2].name, std::string("pos"));
  CHECK_EQ(p.info.inputs[2].describe(), std::string("int64 [1]"));
  CHECK_EQ(p.info.inputs[0].nbytes(), size_t(1 * 2 * 8 * 4 * 4));
  REQUIRE(p.info.aliased_io.size() == 1);
  CHECK_EQ(p.info.aliased_io[0].output, std::string("cache_out"));
  CHECK_EQ(p.info.aliased_io[0].input, std::string("cache_in"));
  CHECK_EQ(p.info.aliased_io[0].kind, std::string("kv_cache_update"));
  // upstream meaning: every output is a delegate output, in binding order
  REQUIRE(p.info.delegate_outputs.size() == 2);
  CHECK_EQ(p.info.delegate_outputs[1], std::string("cache_out"));
  CHECK_EQ(p.info.engine_size, uint64_t(1046));
}

TEST(reads_tr03_extensions) {
  Parsed p = parse_meta(kKvMeta);
  REQUIRE(p.code == Error::Ok);
  CHECK(p.info.engine_kind == tte::EngineKind::Reference);
  CHECK_EQ(p.info.delegate_inputs[0], std::string("tok"));
  CHECK_EQ(p.info.delegate_inputs[2], std::string("cache_in"));
  CHECK_EQ(p.info.delegate_outputs.size(), size_t(1));
  CHECK_EQ(*p.info.buffer_fqn("cache_in"), std::string("layers.0.attn.k_cache"));
  CHECK_EQ(*p.info.buffer_fqn("step_in"), std::string("step"));
  CHECK(p.info.buffer_fqn("tok") == nullptr);
  REQUIRE(p.info.copy_back.size() == 1);
  CHECK_EQ(p.info.copy_back[0].output, std::string("step_out"));
  CHECK_EQ(std::string(reinterpret_cast<const char*>(p.info.engine), p.info.engine_size),
           std::string("ENGINE"));
}

TEST(refuses_bad_magic_and_other_versions_as_incompatible) {
  REFUSED(parse_meta(kKvMeta, "TRX1"), DelegateInvalidCompatibility, "blob.magic",
          "unsupported blob magic \"TRX1\" (bytes 54 52 58 31): this reader accepts TR01, TR02 "
          "and TR03");
  REFUSED(parse_meta(kKvMeta, "TR04"), DelegateInvalidCompatibility, "blob.magic", "\"TR04\"");
  REFUSED(parse_meta(kKvMeta, std::string("\x7f"
                                          "ELF",
                                          4)),
          DelegateInvalidCompatibility, "blob.magic", "\".ELF\" (bytes 7f 45 4c 46)");
  REFUSED(parse_meta(replace_all(kKvMeta, "\"tte_version\":3", "\"tte_version\":6")),
          DelegateInvalidCompatibility, "metadata.tte_version",
          "TR03 blob has tte_version 6; this reader understands versions 3 to 5 only");
  REFUSED(parse_meta(replace_all(kKvMeta, "\"tte_version\":3", "\"tte_version\":2")),
          DelegateInvalidCompatibility, "metadata.tte_version",
          "TR03 blob has tte_version 2; this reader understands versions 3 to 5 only");
  for (const char* v : {"\"tte_version\":4", "\"tte_version\":5"}) {
    CHECK(parse_meta(replace_all(kKvMeta, "\"tte_version\":3", v)).code == Error::Ok);
  }  // versions 4 (weights) and 5 (engine_data) are read, version 3 still is
}

TEST(refuses_offsets_past_the_end) {
  REFUSED(parse(std::string("TR03") + std::string(10, '\0')), InvalidProgram, "blob.short",
          "blob is 14 bytes, shorter than its 32-byte header");
  BlobFields f;
  f.metadata = kKvMeta;
  f.engine = std::string(20, 'E');
  const size_t n = build(f).size();
  BlobFields md_past = f;
  md_past.md_size = static_cast<int64_t>(n);
  REFUSED(parse(build(md_past)), InvalidProgram, "blob.metadata_range",
          "metadata [64, " + std::to_string(64 + n) + ") runs past the end of the " +
              std::to_string(n) + "-byte blob");
  BlobFields eng_past = f;
  eng_past.eng_size = 21;
  const size_t eo = n - 20;
  REFUSED(parse(build(eng_past)), InvalidProgram, "blob.engine_range",
          "engine [" + std::to_string(eo) + ", " + std::to_string(eo + 21) +
              ") runs past the end of the " + std::to_string(n) + "-byte blob");
  BlobFields huge = f;
  huge.eng_size = -2;  // 0xffff...fe: must not wrap around
  REFUSED(parse(build(huge)), InvalidProgram, "blob.engine_range",
          "engine [" + std::to_string(eo) + ", " + std::to_string(eo - 2) +
              ") runs past the end of the " + std::to_string(n) + "-byte blob");
}

TEST(refuses_unaligned_engine_overlap_and_header_overlap) {
  BlobFields f;
  f.metadata = kKvMeta;
  f.eng_off = 40;
  f.eng_size = 0;
  REFUSED(parse(build(f)), InvalidProgram, "blob.engine_alignment",
          "engine offset 40 is not 16-byte aligned");
  f.eng_off = 48;
  REFUSED(parse(build(f)), InvalidProgram, "blob.overlap",
          "metadata [64, " + std::to_string(64 + tte_test::sealed_metadata(kKvMeta, "").size()) +
              ") overlaps the engine at offset 48");
  BlobFields h;
  h.metadata = kKvMeta;
  h.md_off = 16;
  REFUSED(parse(build(h)), InvalidProgram, "blob.metadata_offset",
          "metadata offset 16 lies inside the 64-byte header");
  h.md_off = 32;  // a TR03 header holds the metadata digest at [32, 64)
  REFUSED(parse(build(h)), InvalidProgram, "blob.metadata_offset",
          "metadata offset 32 lies inside the 64-byte header");
  h.magic = "TR02";
  h.metadata = tte_test::upstream_metadata({tte_test::upstream_binding("x", true)});
  h.md_off = 16;
  REFUSED(parse(build(h)), InvalidProgram, "blob.metadata_offset",
          "metadata offset 16 lies inside the 32-byte header");
}

TEST(refuses_truncated_or_trailing_json_as_syntax) {
  const std::string cut = kKvMeta.substr(0, kKvMeta.rfind(',') + 1);
  REFUSED(parse_meta(cut), InvalidProgram, "json.syntax",
          "metadata JSON is malformed at byte " + std::to_string(cut.size()));
  REFUSED(parse_meta("[1,2]"), InvalidProgram, "metadata.root", "metadata JSON must be an object");
  REFUSED(parse_meta(kKvMeta + "x"), InvalidProgram, "json.syntax",
          "metadata JSON is malformed at byte " + std::to_string(kKvMeta.size()));
  REFUSED(parse_meta("\xef\xbb\xbf" + kKvMeta), InvalidProgram, "json.syntax", "byte order mark");
}

TEST(refuses_alias_naming_unknown_or_wrong_direction_bindings) {
  REFUSED(parse_meta(
              replace_all(kKvMeta, R"("input":"cache_in","kind")", R"("input":"v_cache","kind")")),
          InvalidProgram, "ref.missing",
          "aliased_io[0] names input 'v_cache', which is not a binding");
  REFUSED(parse_meta(replace_all(kKvMeta, R"({"output":"cache_out","input":"cache_in")",
                                 R"({"output":"nope","input":"cache_in")")),
          InvalidProgram, "ref.missing",
          "aliased_io[0] names output 'nope', which is not a binding");
  REFUSED(parse_meta(replace_all(kKvMeta, R"({"output":"cache_out","input":"cache_in")",
                                 R"({"output":"cache_in","input":"cache_in")")),
          InvalidProgram, "ref.direction",
          "aliased_io[0] names output 'cache_in', which is an input binding");
}

TEST(refuses_shape_or_dtype_mismatch_in_aliased_pair) {
  const std::string out_decl =
      R"({"name":"cache_out","dtype":"float32","shape":[1,2,8,4],"is_input":false})";
  REFUSED(parse_meta(replace_all(
              kKvMeta, out_decl,
              R"({"name":"cache_out","dtype":"float32","shape":[1,2,4,4],"is_input":false})")),
          InvalidProgram, "aliased.mismatch",
          "aliased pair 'cache_out' -> 'cache_in' differs: output is float32 [1,2,4,4], input "
          "is float32 [1,2,8,4]");
  REFUSED(parse_meta(replace_all(
              kKvMeta, out_decl,
              R"({"name":"cache_out","dtype":"float16","shape":[1,2,8,4],"is_input":false})")),
          InvalidProgram, "aliased.mismatch",
          "aliased pair 'cache_out' -> 'cache_in' differs: output is float16 [1,2,8,4], input "
          "is float32 [1,2,8,4]");
}

TEST(refuses_internal_output_that_would_be_dropped) {
  REFUSED(parse_meta(replace_all(kKvMeta, R"([{"output":"step_out","input":"step_in"}])", "[]")),
          InvalidProgram, "output.dropped",
          "output binding 'step_out' is neither a delegate output, aliased (aliased_io) nor "
          "copy-back (copy_back): its value would be dropped");
}

TEST(refuses_other_inconsistencies_like_python) {
  REFUSED(parse_meta(replace_all(kKvMeta, "\"reference\"", "\"onnx\"")), InvalidProgram,
          "metadata.engine_kind", "engine_kind 'onnx' is not one of");
  REFUSED(parse_meta(replace_all(kKvMeta, R"(["tok","pos","cache_in","step_in"])",
                                 R"(["tok","pos","cache_in"])")),
          InvalidProgram, "delegate_inputs.missing",
          "delegate_inputs misses input binding 'step_in' (every input binding must be a "
          "delegate argument)");
  REFUSED(parse_meta(replace_all(kKvMeta, R"("delegate_outputs":["logits"])",
                                 R"("delegate_outputs":["logits","logits"])")),
          InvalidProgram, "delegate_outputs.duplicate",
          "delegate_outputs lists output binding 'logits' twice");
  REFUSED(parse_meta(replace_all(kKvMeta, R"(["tok","pos","cache_in","step_in"])",
                                 R"(["tok","pos","cache_in","step_in","pos"])")),
          InvalidProgram, "delegate_inputs.duplicate",
          "delegate_inputs lists input binding 'pos' twice");
  REFUSED(parse_meta(replace_all(kKvMeta, R"(["tok","pos","cache_in","step_in"])",
                                 R"(["tok","pos","cache_in","logits"])")),
          InvalidProgram, "ref.direction",
          "delegate_inputs[3] names input 'logits', which is an output binding");
  REFUSED(parse_meta(replace_all(kKvMeta, R"("delegate_outputs":["logits"])",
                                 R"("delegate_outputs":["logits","nope"])")),
          InvalidProgram, "ref.missing",
          "delegate_outputs[1] names output 'nope', which is not a binding");
  REFUSED(parse_meta(replace_all(kKvMeta, R"({"name":"tok",)", R"({"name":"cache_in",)")),
          InvalidProgram, "binding.duplicate",
          "binding name 'cache_in' appears twice in io_bindings");
  REFUSED(parse_meta(replace_all(kKvMeta, R"({"name":"step_out","dtype":"int64")",
                                 R"({"name":"step_out","dtype":"int32")")),
          InvalidProgram, "copy_back.mismatch",
          "copy_back pair 'step_out' -> 'step_in' differs: output is int32 [1], input is int64 "
          "[1]");
  REFUSED(
      parse_meta(replace_all(
          kKvMeta, R"([{"output":"step_out","input":"step_in"}])",
          R"([{"output":"step_out","input":"step_in"},{"output":"cache_out","input":"cache_in"}])")),
      InvalidProgram, "copy_back.aliased",
      "output binding 'cache_out' is both aliased and copy-back");
  REFUSED(parse_meta(replace_all(kKvMeta, R"("dtype":"float32","shape":[1,2,1,4])",
                                 R"("dtype":"complex64","shape":[1,2,1,4])")),
          InvalidProgram, "binding.unknown_dtype",
          "io_bindings[1] 'tok': unknown dtype 'complex64' (known: float32, float16, bfloat16, "
          "int64, int32, int8, uint8, bool, float64)");
  REFUSED(parse_meta(replace_all(kKvMeta, R"("device_id":0)", R"("device_id":"0")")),
          InvalidProgram, "metadata.type",
          "metadata: 'device_id' must be an integer (int64), got \"0\"");
  REFUSED(parse_meta(kKvMeta, "TR01"), InvalidProgram, "metadata.tr01_aliased",
          "TR01 blob carries aliased_io; upstream writes such blobs as TR02");
}

TEST(reads_the_tensorrt_rtx_kind_and_the_weight_streaming_budget) {
  const std::string rtx = replace_all(kKvMeta, "\"reference\"", "\"tensorrt_rtx\"");
  Parsed p = parse_meta(rtx);
  REQUIRE(p.code == Error::Ok);
  CHECK(p.info.engine_kind == tte::EngineKind::TensorRTRTX);
  CHECK_EQ(p.info.weight_streaming_budget, int64_t{-1});  // none: TensorRT's own budget
  const std::string budget = R"("engine_kind":"tensorrt_rtx","weight_streaming_budget":1048576,)";
  p = parse_meta(replace_all(rtx, R"("engine_kind":"tensorrt_rtx",)", budget));
  REQUIRE(p.code == Error::Ok);
  CHECK_EQ(p.info.weight_streaming_budget, int64_t{1048576});
  REFUSED(parse_meta(replace_all(rtx, R"("engine_kind":"tensorrt_rtx",)",
                                 R"("engine_kind":"tensorrt_rtx","weight_streaming_budget":-1,)")),
          InvalidProgram, "metadata.weight_streaming_budget",
          "metadata: 'weight_streaming_budget' must be a non-negative integer (bytes of engine "
          "weights kept on the device), got -1");
}

TEST(tr02_ignores_extension_keys_but_refuses_tte_version) {
  const std::string md = replace_all(kKvMeta, R"([{"output":"step_out","input":"step_in"}])", "[]");
  Parsed p = parse_meta(replace_all(md, R"("tte_version":3,)", ""), "TR02");
  REQUIRE(p.code == Error::Ok);
  CHECK(p.info.engine_kind == tte::EngineKind::TensorRT);
  CHECK_EQ(p.info.delegate_outputs.size(), size_t(3));
  CHECK(p.info.buffers.empty() && p.info.copy_back.empty());
  // tte_version is what a TR03 writer puts there: a TR02 magic on it is a damaged TR03 magic.
  REFUSED(parse_meta(md, "TR02"), InvalidProgram, "metadata.damaged_magic",
          "TR02 blob carries the TR03 key 'tte_version': its magic is damaged; re-export the .pte");
}

// What torch-tensorrt 2.14.0's preprocess writes for tests/test_blob.py::upstream_meta: every
// binding with dtype "" and shape [], the KV output aliased to its input.
static std::string upstream_kv_meta(const std::string& cache_out = "") {
  using tte_test::upstream_binding;
  return tte_test::upstream_metadata(
      {upstream_binding("cache_in", true), upstream_binding("tokens", true),
       upstream_binding("pos", true), upstream_binding("logits", false),
       cache_out.empty() ? upstream_binding("cache_out", false) : cache_out},
      R"([{"output":"cache_out","input":"cache_in","kind":"kv_cache_update"}])");
}

TEST(reads_upstream_preprocess_blob_with_unknown_bindings) {
  Parsed p = parse_meta(upstream_kv_meta(), "TR02");
  REQUIRE(p.code == Error::Ok);
  REQUIRE(p.info.inputs.size() == 3 && p.info.outputs.size() == 2);
  for (const auto* side : {&p.info.inputs, &p.info.outputs}) {
    for (const tte::Binding& b : *side) {
      CHECK(!b.known);
      CHECK(!b.is_static());
      CHECK_EQ(b.nbytes(), size_t(0));  // the delegate tensor's, at execute
      CHECK_EQ(b.describe(), std::string("unknown"));
    }
  }
  REQUIRE(p.info.aliased_io.size() == 1);
  CHECK_EQ(p.info.delegate_outputs[1], std::string("cache_out"));
  // TR01 likewise, without aliased_io
  Parsed t1 = parse_meta(tte_test::upstream_metadata({tte_test::upstream_binding("x", true),
                                                      tte_test::upstream_binding("y", false)}),
                         "TR01");
  REQUIRE(t1.code == Error::Ok);
  CHECK(!t1.info.inputs[0].known && !t1.info.outputs[0].known);
  // one side known, the other unknown: still left to execute
  Parsed mixed = parse_meta(
      upstream_kv_meta(
          R"({"name":"cache_out","dtype":"float32","shape":[1,2,8,4],"is_input":false})"),
      "TR02");
  REQUIRE(mixed.code == Error::Ok);
  CHECK(mixed.info.outputs[1].known && !mixed.info.inputs[0].known);
  CHECK_EQ(mixed.info.outputs[1].nbytes(), size_t(256));
}

TEST(unknown_bindings_are_refused_in_tr03_and_with_a_shape) {
  const std::string tr03 =
      replace_all(upstream_kv_meta(), R"("target_platform":"")",
                  R"("target_platform":"","tte_version":3,"engine_kind":"tensorrt",)"
                  R"("delegate_inputs":["cache_in","tokens","pos"],"delegate_outputs":["logits"])");
  REFUSED(parse_meta(tr03, "TR03"), InvalidProgram, "binding.unknown_in_tr03",
          "io_bindings[0] 'cache_in': empty dtype; only upstream TR01/TR02 blobs may leave a "
          "binding's dtype and shape to the delegate's tensors (dtype '' and shape []); a TR03 "
          "blob must give both");
  // a TR03 blob with one unknown binding among known ones names that one
  REFUSED(parse_meta(replace_all(kKvMeta, R"({"name":"pos","dtype":"int64","shape":[1])",
                                 R"({"name":"pos","dtype":"","shape":[])")),
          InvalidProgram, "binding.unknown_in_tr03",
          "io_bindings[2] 'pos': empty dtype; only upstream TR01/TR02 blobs may leave a "
          "binding's dtype and shape to the delegate's tensors (dtype '' and shape []); a TR03 "
          "blob must give both");
  REFUSED(parse_meta(upstream_kv_meta(R"({"name":"cache_out","dtype":"","shape":[1,4],)"
                                      R"("is_input":false})"),
                     "TR02"),
          InvalidProgram, "binding.unknown_with_shape",
          "io_bindings[4] 'cache_out': empty dtype with shape [1,4]; a binding left to the "
          "delegate's tensors has dtype '' and shape []");
  // a hand-built TR03 BlobInfo (what validate_blob sees without parse_blob)
  Parsed p = parse_meta(upstream_kv_meta(), "TR02");
  REQUIRE(p.code == Error::Ok);
  p.info.format = 3;
  tte::Reason why;
  CHECK(!tte::validate_blob(p.info, why));
  CHECK_EQ(std::string(why.check), std::string("binding.unknown_in_tr03"));
  CHECK_EQ(why.text, std::string("binding 'cache_in' has an empty dtype; only upstream TR01/TR02 "
                                 "blobs may leave a binding's dtype and shape to the delegate's "
                                 "tensors (dtype '' and shape []); a TR03 blob must give both"));
}

TEST(known_aliased_pair_in_tr02_is_still_compared_at_parse) {
  REFUSED(
      parse_meta(
          replace_all(
              upstream_kv_meta(
                  R"({"name":"cache_out","dtype":"float16","shape":[1,2,8,4],"is_input":false})"),
              tte_test::upstream_binding("cache_in", true),
              R"({"name":"cache_in","dtype":"float32","shape":[1,2,8,4],"is_input":true})"),
          "TR02"),
      InvalidProgram, "aliased.mismatch",
      "aliased pair 'cache_out' -> 'cache_in' differs: output is float16 [1,2,8,4], input "
      "is float32 [1,2,8,4]");
}

TEST(json_reader_handles_escapes_numbers_and_depth) {
  tte::Reason why;
  tte::Json j;
  const std::string text =
      R"({"a":"x\"\\\/\n\u00e9\ud83d\ude00","n":[-12,3.5,1e3,0],"t":true,"z":null})";
  REQUIRE(tte::read_json(text.data(), text.size(), j, why));
  CHECK_EQ(j["a"].get<std::string>(), std::string("x\"\\/\n\xc3\xa9\xf0\x9f\x98\x80"));
  CHECK(j["n"][0].is_number_integer() && j["n"][0].get<int64_t>() == -12);
  CHECK(j["n"][1].is_number_float() && j["n"][1].get<double>() == 3.5);
  CHECK(j["n"][2].is_number_float() && j["n"][2].get<double>() == 1000.0);
  CHECK(j["t"].get<bool>());
  CHECK(j["z"].is_null());
  // Arrays and objects nest at most 64 deep (the root is depth 1); scalars inside do not count.
  const std::string ok64 = std::string(64, '[') + "1" + std::string(64, ']');
  CHECK(tte::read_json(ok64.data(), ok64.size(), j, why));
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  CHECK(!tte::read_json(deep.data(), deep.size(), j, why));
  CHECK_EQ(std::string(why.check), std::string("json.depth"));
  const std::string bad = R"({"a" 1})";
  CHECK(!tte::read_json(bad.data(), bad.size(), j, why));
  CHECK_EQ(std::string(why.check), std::string("json.syntax"));
  CHECK(why.text.rfind("metadata JSON is malformed at byte ", 0) == 0);
}

// tests/test_blob.py's "JSON the readers refuse" section: the same texts, the same check ids.
Parsed kv_with(const std::string& from, const std::string& to) {
  if (kKvMeta.find(from) == std::string::npos) FAIL_AT("kKvMeta has no " + from);
  std::string md = kKvMeta;
  md.replace(md.find(from), from.size(), to);
  return parse_meta(md);
}

TEST(json_defects_are_refused_with_their_check) {
  REFUSED(kv_with(R"("device_id":0)", R"("device_id":0,"device_id":1)"), InvalidProgram,
          "json.duplicate_key", "metadata JSON has the key 'device_id' twice in one object");
  REFUSED(kv_with(R"("name":"pos")", R"("name":"pos","name":"pos2")"), InvalidProgram,
          "json.duplicate_key", "'name'");
  for (std::string text : {"NaN", "Infinity", "-Infinity", "1e999", "-1.5e400"}) {
    REFUSED(kv_with(R"("device_id":0)", R"("device_id":)" + text), InvalidProgram,
            "json.non_finite",
            "metadata JSON holds the non-finite number " + text + "; numbers must be finite");
  }
  const std::string ones(400, '1');
  REFUSED(kv_with(R"("device_id":0)", R"("device_id":)" + ones), InvalidProgram, "json.non_finite",
          ones);
  // NaN is a value: where a key or a separator is due, it is a syntax error.
  REFUSED(kv_with(R"("device_id":0)", R"(NaN:0)"), InvalidProgram, "json.syntax", "byte");
  REFUSED(kv_with(R"("device_id":0)", R"("device_id" NaN)"), InvalidProgram, "json.syntax", "byte");
  // Integers are int64: beyond, a typed key refuses them (no reader rounds them to a double).
  REFUSED(kv_with(R"("device_id":0)", R"("device_id":100000000000000000000)"), InvalidProgram,
          "metadata.type", "metadata: 'device_id' must be an integer (int64), got 1");
  REFUSED(kv_with(R"("device_id":0)", R"("device_id":9223372036854775808)"), InvalidProgram,
          "metadata.type", "'device_id'");
  REFUSED(kv_with(R"("device_id":0)", R"("device_id":-9223372036854775809)"), InvalidProgram,
          "metadata.type", "'device_id'");
  REFUSED(kv_with(R"("shape":[1])", R"("shape":[9223372036854775808])"), InvalidProgram,
          "binding.shape", "io_bindings[2] 'pos': shape [9223372036854775808] must hold integers");
  REFUSED(kv_with(R"("shape":[1])", R"("shape":[1,2.5,"a\n\u00e9"])"), InvalidProgram,
          "binding.shape", "io_bindings[2] 'pos': shape [1,2.5,");
  auto max = kv_with(R"("device_id":0)", R"("device_id":9223372036854775807)");
  CHECK(max.code == Error::Ok);
  CHECK_EQ(max.info.device_id, int64_t(9223372036854775807LL));
  auto min = kv_with(R"("device_id":0)", R"("device_id":-9223372036854775808)");
  CHECK(min.code == Error::Ok);
  auto unused = kv_with(R"("device_id":0)", R"("device_id":0,"x":100000000000000000000)");
  CHECK(unused.code == Error::Ok);  // an unread key is not typed
  for (std::string v : {"3.0", "3e0", "true", "\"3\"", "null"}) {
    REFUSED(kv_with(R"("tte_version":3)", R"("tte_version":)" + v), DelegateInvalidCompatibility,
            "metadata.tte_version", "; this reader understands versions 3 to 5 only");
  }
}

TEST(metadata_must_be_utf8_at_the_byte_python_names) {
  const std::string slot = R"("target_platform":"@@")";
  const std::string md = replace_all(kKvMeta, R"("target_platform":"")", slot);
  const size_t start = md.find("@@");
  const std::pair<std::string, size_t> cases[] = {
      {"\xff", 0},       {"\xc0\xaf", 0},      {"\xed\xa0\x80", 0}, {"\xf4\x90\x80\x80", 0},
      {"ab\xe2\x82", 2}, {"a\xe2\x28\xa1", 1}, {"\xc3\xa9\x80", 2}, {"\xf0\x9f\x98", 0}};
  for (const auto& [bad, at] : cases) {
    REFUSED(parse_meta(replace_all(md, "@@", bad)), InvalidProgram, "json.utf8",
            "metadata is not UTF-8 at byte " + std::to_string(start + at));
  }
  auto good = parse_meta(replace_all(md, "@@", "\\u00e9\xc3\xa9\\ud83d\\ude00"));
  CHECK(good.code == Error::Ok);
  CHECK_EQ(good.info.target_platform, std::string("\xc3\xa9\xc3\xa9\xf0\x9f\x98\x80"));
  for (const char* escape : {"\\ud800", "\\udc00", "x\\ud800\\u0041", "\\ud800\\ud800\\udc00",
                             "\\ud800\"", "\\udfff\\ud800"}) {
    REFUSED(parse_meta(replace_all(md, "\"@@\"", std::string("\"") + escape + "\"")),
            InvalidProgram, "json.surrogate", "surrogate");
  }
  // A surrogate is refused where it is: a later defect is not reached, an earlier one wins.
  REFUSED(parse_meta(replace_all(md, "\"@@\"", "\"\\ud800\",\"device_id\":NaN")), InvalidProgram,
          "json.surrogate", "surrogate");
  REFUSED(parse_meta(replace_all(md, "\"@@\"", "NaN,\"x\":\"\\ud800\"")), InvalidProgram,
          "json.non_finite", "NaN");
  // The input's own words never pick the check: an unterminated string saying "surrogate".
  REFUSED(parse_meta(replace_all(md, "\"@@\"", "\"a surrogate U+D800 while parsing value - ")),
          InvalidProgram, "json.syntax", "malformed");
  REFUSED(parse_meta(replace_all(md, "\"@@\"", "[1 NaN]")), InvalidProgram, "json.syntax",
          "malformed");
  // ... but a NUL waits for the whole text (a later surrogate comes first).
  REFUSED(parse_meta(replace_all(md, "\"@@\"", "\"\\u0000\",\"x\":\"\\ud800\"")), InvalidProgram,
          "json.surrogate", "surrogate");
}

TEST(mutated_blobs_never_crash_and_always_explain) {
  // Deterministic byte flips and truncations of a valid blob: each parse either succeeds or
  // fails with a reason (run under ASan in development; here it must simply not crash).
  BlobFields f;
  f.metadata = kKvMeta;
  f.engine = "ENGINE-BYTES";
  const std::string good = build(f);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  size_t ok = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string b = good;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < flips; ++k) b[next() % b.size()] = static_cast<char>(next() & 0xff);
    if (next() % 4 == 0) b.resize(next() % b.size());
    tte::Reason why;
    auto r = tte::parse_blob(b.data(), b.size(), why);
    if (r.ok()) {
      ++ok;
      CHECK(r->engine >= reinterpret_cast<const uint8_t*>(b.data()));
      CHECK(r->engine + r->engine_size <= reinterpret_cast<const uint8_t*>(b.data()) + b.size());
    } else {
      ++refused;
      if (why.text.empty() || why.check[0] == '\0') FAIL_AT("refusal without a reason or check");
    }
  }
  CHECK(ok > 0 && refused > 0);
}

TEST_MAIN()
