// The alias planner; see plan.h for the table it builds and the copies it allows.
#include "binding_plan.h"

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

constexpr uint32_t kNoArg = UINT32_MAX;

class Planner {
 public:
  Planner(const BlobInfo& info, Reason& why) : info_(info), why_(why) {}

  Result<BindingPlan> run() {
    if (!delegate_inputs() || !delegate_outputs() || !aliased_outputs() || !copy_back_outputs() ||
        !every_output_targeted()) {
      return Error::InvalidArgument;
    }
    return std::move(plan_);
  }

 private:
  std::string counter_key(const Binding& input) const {
    const std::string* fqn = info_.buffer_fqn(input.name);
    return fqn ? *fqn : input.name;
  }

  // The fields every copy of output `out` into/out of input `in` shares (slot `s` plans `out`).
  CopyStep copy_step(CopyKind kind, const OutputSlot& s, const Binding& out,
                     const Binding& in) const {
    CopyStep c;
    c.kind = kind;
    c.input = s.input;
    c.output = static_cast<uint32_t>(out.index);
    c.nbytes = out.nbytes();
    c.counter_key = counter_key(in);
    return c;
  }

  // Delegate argument i -> input binding, and back.
  bool delegate_inputs() {
    input_arg_.assign(info_.inputs.size(), kNoArg);
    for (const auto& name : info_.delegate_inputs) {
      const Binding* b = info_.input(name);
      if (!b) {  // parse_blob validated this; a hand-built BlobInfo may not have been
        return why_.reject("plan.unknown_binding",
                           "delegate input '" + name + "' is not an input binding");
      }
      input_arg_[b->index] = static_cast<uint32_t>(plan_.arg_input.size());
      plan_.arg_input.push_back(static_cast<uint32_t>(b->index));
    }
    return true;
  }

  bool delegate_outputs() {
    plan_.outputs.resize(info_.outputs.size());
    planned_.assign(info_.outputs.size(), false);
    for (size_t j = 0; j < info_.delegate_outputs.size(); ++j) {
      const Binding* b = info_.output(info_.delegate_outputs[j]);
      if (!b) {
        return why_.reject("plan.unknown_binding", "delegate output '" + info_.delegate_outputs[j] +
                                                       "' is not an output binding");
      }
      plan_.delegate_output.push_back(static_cast<uint32_t>(b->index));
      OutputSlot& s = plan_.outputs[b->index];
      s.target = OutputTarget::DelegateOutput;
      s.delegate_output = static_cast<uint32_t>(j);
      s.also_delegate_output = true;
      planned_[b->index] = true;
    }
    return true;
  }

  // A pair the blob does not size (an unknown side; or dynamic, when the output is also a
  // delegate output and so copied from its input) is compared on its tensors at execute.
  bool alias_check(size_t pair, const Binding& out, const Binding& in, const OutputSlot& s,
                   bool is_delegate_output) {
    const bool sized = out.is_static() && in.is_static();
    if (out.known && in.known && (sized || !is_delegate_output)) return true;
    if (!is_delegate_output || input_arg_[in.index] == kNoArg) {
      return why_.reject("plan.unsized_alias",
                         "aliased pair '" + out.name + "' -> '" + in.name +
                             "' has a side the blob does not size, but its output and input are "
                             "not both delegate tensors to compare");
    }
    AliasCheck k;
    k.pair = static_cast<uint32_t>(pair);
    k.input_arg = input_arg_[in.index];
    k.delegate_output = s.delegate_output;
    k.output_known = out.known;
    k.input_known = in.known;
    plan_.alias_checks.push_back(k);
    return true;
  }

  bool aliased_outputs() {
    for (size_t i = 0; i < info_.aliased_io.size(); ++i) {
      const AliasedIO& a = info_.aliased_io[i];
      const Binding* out = info_.output(a.output);
      const Binding* in = info_.input(a.input);
      if (!out || !in) {
        return why_.reject("plan.unknown_binding", "aliased output '" + a.output + "' -> '" +
                                                       a.input + "' names no binding");
      }
      OutputSlot& s = plan_.outputs[out->index];
      const bool is_delegate_output = planned_[out->index];
      s.target = OutputTarget::AliasedInput;
      s.input = static_cast<uint32_t>(in->index);
      s.nbytes = out->nbytes();
      planned_[out->index] = true;
      if (!alias_check(i, *out, *in, s, is_delegate_output)) return false;
      if (is_delegate_output) {  // upstream TR02: ExecuTorch also expects the value there
        CopyStep c = copy_step(CopyKind::InputToDelegateOutput, s, *out, *in);
        c.delegate_output = s.delegate_output;
        c.sized_by_tensor = !out->is_static();
        plan_.copies.push_back(std::move(c));
      }
    }
    return true;
  }

  bool copy_back_output(const CopyBackRef& cb) {
    const Binding* out = info_.output(cb.output);
    const Binding* in = info_.input(cb.input);
    if (!out || !in) {
      return why_.reject("plan.unknown_binding", "copy-back output '" + cb.output + "' -> '" +
                                                     cb.input + "' names no binding");
    }
    if (planned_[out->index]) {  // also a delegate output: handed out and copied into `in`
      const OutputSlot& s = plan_.outputs[out->index];
      CopyStep c = copy_step(CopyKind::DelegateOutputToInput, s, *out, *in);
      c.input = static_cast<uint32_t>(in->index);
      c.delegate_output = s.delegate_output;
      c.sized_by_tensor = !out->is_static();
      plan_.copies.push_back(std::move(c));
      return true;
    }
    if (!out->is_static()) {  // parse_blob refuses this; a hand-built one may not
      return why_.reject("plan.dynamic_scratch",
                         "copy-back output '" + cb.output + "' is " + out->describe() +
                             "; the runtime needs a static shape for its scratch");
    }
    OutputSlot& s = plan_.outputs[out->index];
    s.target = OutputTarget::Scratch;
    s.input = static_cast<uint32_t>(in->index);
    s.scratch = static_cast<uint32_t>(plan_.scratch_nbytes.size());
    s.nbytes = out->nbytes();
    plan_.scratch_nbytes.push_back(out->nbytes());
    planned_[out->index] = true;
    CopyStep c = copy_step(CopyKind::ScratchToInput, s, *out, *in);
    c.scratch = s.scratch;
    plan_.copies.push_back(std::move(c));
    return true;
  }

  bool copy_back_outputs() {
    for (const CopyBackRef& cb : info_.copy_back) {
      if (!copy_back_output(cb)) return false;
    }
    return true;
  }

  bool every_output_targeted() {
    for (const Binding& b : info_.outputs) {
      if (!planned_[b.index]) {
        return why_.reject("plan.no_target", "output binding '" + b.name +
                                                 "' has no target (neither delegate output, "
                                                 "aliased nor copy-back)");
      }
      OutputSlot& s = plan_.outputs[b.index];
      if (s.nbytes == 0) s.nbytes = b.nbytes();
      s.sized_by_tensor = !b.is_static();
    }
    return true;
  }

  const BlobInfo& info_;
  Reason& why_;
  BindingPlan plan_;
  std::vector<uint32_t> input_arg_;  // input binding -> delegate argument (kNoArg: none)
  std::vector<bool> planned_;        // output binding has a target
};

}  // namespace

Result<BindingPlan> plan_bindings(const BlobInfo& info, Reason& why) {
  return Planner(info, why).run();
}

}  // namespace tte
