// The alias planner: the fixed binding table and the exact copy list for each blob shape.
#include "blob_builder.h"
#include "check.h"

#include "binding_plan.h"

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
  tte::Reason why;
  auto info = tte::parse_blob(p.blob.data(), p.blob.size(), why);
  if (!info.ok()) {
    std::printf("  parse failed: %s\n", why.text.c_str());
    return p;
  }
  p.info = std::move(info.get());
  auto plan = tte::plan_bindings(p.info, why);
  if (!plan.ok()) {
    std::printf("  plan failed: %s\n", why.text.c_str());
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

// The blob records that the delegate copies `new_state` into `state`; that the program also reads
// the value (a delegate output) does not change it: handed out *and* copied, delegate output ->
// input, once per call (the runtime reads the record, it does not decide).
TEST(copy_back_that_is_a_delegate_output_is_handed_out_and_copied) {
  Planned p = plan_for(tr03(R"({"io_bindings":[
   {"name":"state","dtype":"float32","shape":[3],"is_input":true},
   {"name":"new_state","dtype":"float32","shape":[3],"is_input":false}],
   "tte_version":3,"engine_kind":"reference","delegate_inputs":["state"],
   "delegate_outputs":["new_state"],"buffers":[{"input":"state","fqn":"ring"}],
   "copy_back":[{"output":"new_state","input":"state"}]})"));
  REQUIRE(p.ok);
  CHECK(p.plan.outputs[0].target == OutputTarget::DelegateOutput);
  REQUIRE(p.plan.copies.size() == 1);
  const tte::CopyStep& c = p.plan.copies[0];
  CHECK(c.kind == CopyKind::DelegateOutputToInput);
  CHECK_EQ(c.delegate_output, 0u);
  CHECK_EQ(c.input, 0u);
  CHECK_EQ(c.nbytes, size_t(12));
  CHECK_EQ(c.counter_key, std::string("ring"));
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
  tte::Reason why;
  auto r = tte::plan_bindings(info, why);
  CHECK(!r.ok());
  CHECK_EQ(std::string(why.check), std::string("plan.no_target"));
  CHECK_EQ(why.text, std::string("output binding 'lost' has no target (neither delegate output, "
                                 "aliased nor copy-back)"));
}

TEST(alias_checks_and_tensor_sizes_are_planned_at_init) {
  // Upstream TR02 (preprocess): every binding unknown, the aliased output a delegate output.
  using tte_test::upstream_binding;
  tte_test::BlobFields f;
  f.magic = "TR02";
  f.engine = "E";
  f.metadata = tte_test::upstream_metadata(
      {upstream_binding("tokens", true), upstream_binding("cache_in", true),
       upstream_binding("logits", false), upstream_binding("cache_out", false)},
      R"([{"output":"cache_out","input":"cache_in","kind":"kv_cache_update"}])");
  Planned p = plan_for(tte_test::build(f));
  REQUIRE(p.ok);
  REQUIRE(p.plan.alias_checks.size() == 1);
  const tte::AliasCheck& c = p.plan.alias_checks[0];
  CHECK_EQ(c.pair, 0u);
  CHECK_EQ(c.input_arg, 1u);        // cache_in is delegate argument 1
  CHECK_EQ(c.delegate_output, 1u);  // cache_out is delegate output 1
  CHECK(!c.output_known && !c.input_known);
  CHECK(p.plan.outputs[0].sized_by_tensor && p.plan.outputs[1].sized_by_tensor);
  REQUIRE(p.plan.copies.size() == 1);
  CHECK(p.plan.copies[0].sized_by_tensor);

  // Known but dynamic (-1): sized by the tensors too, and the pair compared at execute.
  f.metadata = tte_test::upstream_metadata(
      {R"({"name":"cache_in","dtype":"float32","shape":[1,-1,4],"is_input":true})",
       R"({"name":"cache_out","dtype":"float32","shape":[1,-1,4],"is_input":false})",
       R"({"name":"y","dtype":"float32","shape":[2],"is_input":false})"},
      R"([{"output":"cache_out","input":"cache_in","kind":"kv_cache_update"}])");
  Planned d = plan_for(tte_test::build(f));
  REQUIRE(d.ok);
  REQUIRE(d.plan.alias_checks.size() == 1);
  CHECK(d.plan.alias_checks[0].output_known && d.plan.alias_checks[0].input_known);
  CHECK(d.plan.outputs[0].sized_by_tensor);
  CHECK_EQ(d.plan.outputs[0].nbytes, size_t(0));
  CHECK(!d.plan.outputs[1].sized_by_tensor);
  CHECK_EQ(d.plan.outputs[1].nbytes, size_t(8));
  REQUIRE(d.plan.copies.size() == 1);
  CHECK(d.plan.copies[0].sized_by_tensor);

  // Static known pairs need no execute-time comparison.
  Planned s = plan_for(tte_test::read_file(kFixtures + "/upstream_tr02_kv.blob"));
  REQUIRE(s.ok);
  CHECK(s.plan.alias_checks.empty());
  CHECK(!s.plan.copies[0].sized_by_tensor);
}

TEST(hand_built_dynamic_copy_back_scratch_is_refused) {
  tte::BlobInfo info;
  tte::Binding in, out;
  in.name = "state";
  in.shape = {-1};
  out = in;
  out.name = "state_out";
  out.is_input = false;
  info.inputs.push_back(in);
  info.outputs.push_back(out);
  info.delegate_inputs = {"state"};
  info.copy_back.push_back({"state_out", "state"});
  tte::Reason why;
  CHECK(!tte::plan_bindings(info, why).ok());
  CHECK_EQ(std::string(why.check), std::string("plan.dynamic_scratch"));
  CHECK_EQ(why.text,
           std::string("copy-back output 'state_out' is float32 [-1]; the runtime needs a "
                       "static shape for its scratch"));
}

TEST_MAIN()
