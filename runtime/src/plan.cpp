// The alias planner; see tte/plan.h for the table it builds and the copies it allows.
#include <tte/plan.h>

namespace tte {

const char* output_target_name(OutputTarget t) {
  switch (t) {
    case OutputTarget::DelegateOutput: return "delegate-output";
    case OutputTarget::AliasedInput: return "aliased-input";
    case OutputTarget::Scratch: return "scratch";
  }
  return "?";
}

namespace {

std::string counter_key(const BlobInfo& info, const Binding& input) {
  const std::string* fqn = info.buffer_fqn(input.name);
  return fqn ? *fqn : input.name;
}

}  // namespace

Result<BindingPlan> plan_bindings(const BlobInfo& info, std::string& why) {
  BindingPlan plan;
  constexpr uint32_t kNoArg = UINT32_MAX;
  std::vector<uint32_t> input_arg(info.inputs.size(), kNoArg);  // input binding -> delegate arg
  for (const auto& name : info.delegate_inputs) {
    const Binding* b = info.input(name);
    if (!b) {  // parse_blob validated this; a hand-built BlobInfo may not have been
      why = "delegate input '" + name + "' is not an input binding";
      return Error::InvalidArgument;
    }
    input_arg[b->index] = static_cast<uint32_t>(plan.arg_input.size());
    plan.arg_input.push_back(static_cast<uint32_t>(b->index));
  }
  plan.outputs.resize(info.outputs.size());
  for (size_t j = 0; j < info.delegate_outputs.size(); ++j) {
    const Binding* b = info.output(info.delegate_outputs[j]);
    if (!b) {
      why = "delegate output '" + info.delegate_outputs[j] + "' is not an output binding";
      return Error::InvalidArgument;
    }
    plan.delegate_output.push_back(static_cast<uint32_t>(b->index));
    OutputSlot& s = plan.outputs[b->index];
    s.target = OutputTarget::DelegateOutput;
    s.delegate_output = static_cast<uint32_t>(j);
    s.also_delegate_output = true;
  }
  std::vector<bool> planned(info.outputs.size(), false);
  for (uint32_t j : plan.delegate_output) planned[j] = true;

  for (const auto& a : info.aliased_io) {
    const Binding* out = info.output(a.output);
    const Binding* in = info.input(a.input);
    if (!out || !in) {
      why = "aliased output '" + a.output + "' -> '" + a.input + "' names no binding";
      return Error::InvalidArgument;
    }
    OutputSlot& s = plan.outputs[out->index];
    const bool is_delegate_output = planned[out->index];
    s.target = OutputTarget::AliasedInput;
    s.input = static_cast<uint32_t>(in->index);
    s.nbytes = out->nbytes();
    planned[out->index] = true;
    const bool sized = out->is_static() && in->is_static();
    if (!out->known || !in->known || (!sized && is_delegate_output)) {
      if (!is_delegate_output || input_arg[in->index] == kNoArg) {
        why = "aliased pair '" + a.output + "' -> '" + a.input + "' has a side the blob does " +
              "not size, but its output and input are not both delegate tensors to compare";
        return Error::InvalidArgument;
      }
      AliasCheck k;
      k.pair = static_cast<uint32_t>(&a - info.aliased_io.data());
      k.input_arg = input_arg[in->index];
      k.delegate_output = s.delegate_output;
      k.output_known = out->known;
      k.input_known = in->known;
      plan.alias_checks.push_back(k);
    }
    if (is_delegate_output) {
      // Upstream TR02 shape: ExecuTorch also expects the value in the delegate output.
      CopyStep c;
      c.kind = CopyKind::InputToDelegateOutput;
      c.input = s.input;
      c.delegate_output = s.delegate_output;
      c.output = static_cast<uint32_t>(out->index);
      c.nbytes = out->nbytes();
      c.sized_by_tensor = !out->is_static();
      c.counter_key = counter_key(info, *in);
      plan.copies.push_back(std::move(c));
    }
  }
  for (const auto& cb : info.copy_back) {
    const Binding* out = info.output(cb.output);
    const Binding* in = info.input(cb.input);
    if (!out || !in) {
      why = "copy-back output '" + cb.output + "' -> '" + cb.input + "' names no binding";
      return Error::InvalidArgument;
    }
    if (planned[out->index]) continue;  // a delegate output: ExecuTorch's write-back copies it
    if (!out->is_static()) {            // parse_blob refuses this; a hand-built BlobInfo may not
      why = "copy-back output '" + cb.output + "' is " + out->describe() +
            "; the runtime needs a static shape for its scratch";
      return Error::InvalidArgument;
    }
    OutputSlot& s = plan.outputs[out->index];
    s.target = OutputTarget::Scratch;
    s.input = static_cast<uint32_t>(in->index);
    s.scratch = static_cast<uint32_t>(plan.scratch_nbytes.size());
    s.nbytes = out->nbytes();
    plan.scratch_nbytes.push_back(out->nbytes());
    planned[out->index] = true;
    CopyStep c;
    c.kind = CopyKind::ScratchToInput;
    c.input = s.input;
    c.scratch = s.scratch;
    c.output = static_cast<uint32_t>(out->index);
    c.nbytes = out->nbytes();
    c.counter_key = counter_key(info, *in);
    plan.copies.push_back(std::move(c));
  }
  for (const auto& b : info.outputs) {
    if (!planned[b.index]) {
      why = "output binding '" + b.name +
            "' has no target (neither delegate output, aliased "
            "nor copy-back)";
      return Error::InvalidArgument;
    }
    if (plan.outputs[b.index].nbytes == 0) plan.outputs[b.index].nbytes = b.nbytes();
    plan.outputs[b.index].sized_by_tensor = !b.is_static();
  }
  return plan;
}

}  // namespace tte
