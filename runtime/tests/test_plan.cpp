// The alias planner: the fixed binding table and the exact copy list for each blob shape.
#include "blob_builder.h"
#include "check.h"

#include <tte/plan.h>

using executorch::runtime::Error;
using tte::CopyKind;
using tte::OutputTarget;

namespace {

const std::string kFixtures = TTE_FIXTURES_DIR;

struct Planned {
  std::string blob;  // keeps info.engine valid
  tte::BlobInfo info;
  tte::BindingPlan plan;
  bool ok = false;
};

Planned plan_for(std::string blob) {
  Planned p;
  p.blob = std::move(blob);
  std::string why;
  auto info = tte::parse_blob(p.blob.data(), p.blob.size(), why);
  if (!info.ok()) {
    std::printf("  parse failed: %s\n", why.c_str());
    return p;
  }
  p.info = std::move(info.get());
  auto plan = tte::plan_bindings(p.info, why);
  if (!plan.ok()) {
    std::printf("  plan failed: %s\n", why.c_str());
    return p;
  }
  p.plan = std::move(plan.get());
  p.ok = true;
  return p;
}

std::string tr03(const std::string& md) {
  tte_test::BlobFields f;
  f.metadata = md;
  return tte_test::build(f);
}

}  // namespace

TEST(tr03_kv_and_copy_back_table) {
  // inputs: cache_in(0) tok(1) pos(2) step_in(3); outputs: logits(0) cache_out(1) step_out(2)
  Planned p = plan_for(tr03(R"({"io_bindings":[
   {"name":"cache_in","dtype":"float32","shape":[1,2,8,4],"is_input":true},
   {"name":"tok","dtype":"float32","shape":[1,2,1,4],"is_input":true},
   {"name":"pos","dtype":"int64","shape":[1],"is_input":true},
   {"name":"step_in","dtype":"int64","shape":[1],"is_input":true},
   {"name":"logits","dtype":"float32","shape":[1,2],"is_input":false},
   {"name":"cache_out","dtype":"float32","shape":[1,2,8,4],"is_input":false},
   {"name":"step_out","dtype":"int64","shape":[1],"is_input":false}],
   "aliased_io":[{"output":"cache_out","input":"cache_in","kind":"kv_cache_update"}],
   "tte_version":3,"engine_kind":"reference",
   "delegate_inputs":["tok","pos","cache_in","step_in"],"delegate_outputs":["logits"],
   "buffers":[{"input":"cache_in","fqn":"layers.0.attn.k_cache"},{"input":"step_in","fqn":"step"}],
   "copy_back":[{"output":"step_out","input":"step_in"}]})"));
  REQUIRE(p.ok);
  const auto& plan = p.plan;
  CHECK(plan.arg_input == (std::vector<uint32_t>{1, 2, 0, 3}));
  CHECK(plan.delegate_output == (std::vector<uint32_t>{0}));
  REQUIRE(plan.outputs.size() == 3);
  CHECK(plan.outputs[0].target == OutputTarget::DelegateOutput);
  CHECK_EQ(plan.outputs[0].delegate_output, 0u);
  CHECK_EQ(plan.outputs[0].nbytes, size_t(8));
  CHECK(plan.outputs[1].target == OutputTarget::AliasedInput);
  CHECK_EQ(plan.outputs[1].input, 0u);  // cache_in's address: written in place
  CHECK(!plan.outputs[1].also_delegate_output);
  CHECK(plan.outputs[2].target == OutputTarget::Scratch);
  CHECK_EQ(plan.outputs[2].input, 3u);
  CHECK_EQ(plan.outputs[2].scratch, 0u);
  CHECK(plan.scratch_nbytes == (std::vector<size_t>{8}));
  // exactly one copy per call: the 8-byte step counter, scratch -> step_in; none for the KV cache
  REQUIRE(plan.copies.size() == 1);
  CHECK(plan.copies[0].kind == CopyKind::ScratchToInput);
  CHECK_EQ(plan.copies[0].input, 3u);
  CHECK_EQ(plan.copies[0].nbytes, size_t(8));
  CHECK_EQ(plan.copies[0].counter_key, std::string("step"));
}

TEST(copy_back_that_is_a_delegate_output_is_left_to_executorch) {
  Planned p = plan_for(tr03(R"({"io_bindings":[
   {"name":"state","dtype":"float32","shape":[3],"is_input":true},
   {"name":"new_state","dtype":"float32","shape":[3],"is_input":false}],
   "tte_version":3,"engine_kind":"reference","delegate_inputs":["state"],
   "delegate_outputs":["new_state"],"buffers":[{"input":"state","fqn":"ring"}],
   "copy_back":[{"output":"new_state","input":"state"}]})"));
  REQUIRE(p.ok);
  CHECK(p.plan.outputs[0].target == OutputTarget::DelegateOutput);
  CHECK(p.plan.copies.empty());
  CHECK(p.plan.scratch_nbytes.empty());
}

TEST(upstream_tr02_aliased_delegate_output_gets_one_reflect_copy) {
  Planned p = plan_for(tte_test::read_file(kFixtures + "/upstream_tr02_kv.blob"));
  REQUIRE(p.ok);
  const auto& plan = p.plan;
  CHECK(plan.arg_input == (std::vector<uint32_t>{0, 1, 2}));
  CHECK(plan.delegate_output == (std::vector<uint32_t>{0, 1}));
  CHECK(plan.outputs[0].target == OutputTarget::DelegateOutput);
  CHECK(plan.outputs[1].target == OutputTarget::AliasedInput);  // TensorRT writes in place
  CHECK(plan.outputs[1].also_delegate_output);
  CHECK_EQ(plan.outputs[1].delegate_output, 1u);
  REQUIRE(plan.copies.size() == 1);
  CHECK(plan.copies[0].kind == CopyKind::InputToDelegateOutput);
  CHECK_EQ(plan.copies[0].delegate_output, 1u);
  CHECK_EQ(plan.copies[0].nbytes, size_t(256));
  CHECK_EQ(plan.copies[0].counter_key, std::string("cache_in"));  // no buffers map in TR02
}

TEST(upstream_tr01_is_all_delegate_io_without_copies) {
  Planned p = plan_for(tte_test::read_file(kFixtures + "/upstream_tr01.blob"));
  REQUIRE(p.ok);
  CHECK(p.plan.arg_input == (std::vector<uint32_t>{0}));
  CHECK(p.plan.outputs[0].target == OutputTarget::DelegateOutput);
  CHECK(p.plan.copies.empty());
}

TEST(hand_built_info_with_untargeted_output_is_refused) {
  tte::BlobInfo info;
  tte::Binding out;
  out.name = "lost";
  out.is_input = false;
  out.shape = {2};
  info.outputs.push_back(out);
  std::string why;
  auto r = tte::plan_bindings(info, why);
  CHECK(!r.ok());
  CHECK_EQ(why, std::string("output binding 'lost' has no target (neither delegate output, "
                            "aliased nor copy-back)"));
}

TEST_MAIN()
