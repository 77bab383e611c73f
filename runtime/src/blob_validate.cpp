// Consistency of blob metadata (CONTRACTS.md §1 "Validation"): python's blob.validate(), check
// for check and message for message. See tte/blob.h for the invariant it upholds.
#include <tte/blob.h>

#include <map>
#include <set>

namespace tte {

const char* const kUnknownInTr03 =
    "only upstream TR01/TR02 blobs may leave a binding's dtype and shape to the delegate's "
    "tensors (dtype '' and shape []); a TR03 blob must give both";

bool validate_blob(const BlobInfo& info, std::string& why) {
  auto fail = [&](std::string msg) {
    why = std::move(msg);
    return false;
  };
  std::set<std::string> names;
  // io_bindings order: walk inputs and outputs merged back into document order is not needed
  // for the message — a duplicate is reported by its name.
  for (const auto* side : {&info.inputs, &info.outputs}) {
    for (const auto& b : *side) {
      if (!names.insert(b.name).second) {
        return fail("binding name '" + b.name + "' appears twice in io_bindings");
      }
      if (info.format == 3 && !b.known) {
        return fail("binding '" + b.name + "' has an empty dtype; " + kUnknownInTr03);
      }
      if (!b.fits()) {
        return fail("binding '" + b.name + "' (" + b.describe() + ") is larger than 2**63-1 bytes");
      }
    }
  }
  // Name lookup with direction check; nullptr + why on failure.
  auto need = [&](const std::string& name, bool want_input,
                  const std::string& where) -> const Binding* {
    const char* kind = want_input ? "input" : "output";
    const Binding* b = want_input ? info.input(name) : info.output(name);
    if (b) return b;
    const Binding* other = want_input ? info.output(name) : info.input(name);
    if (!other) {
      why = where + " names " + kind + " '" + name + "', which is not a binding";
    } else {
      why = where + " names " + kind + " '" + name + "', which is an " +
            (other->is_input ? "input" : "output") + " binding";
    }
    return nullptr;
  };
  auto same_type = [&](const Binding& out, const Binding& in, const char* what) {
    if (out.known != in.known || out.dtype != in.dtype || out.shape != in.shape) {
      why = std::string(what) + " pair '" + out.name + "' -> '" + in.name +
            "' differs: output is " + out.describe() + ", input is " + in.describe();
      return false;
    }
    return true;
  };

  std::map<std::string, std::string> writer_of;
  std::set<std::string> aliased;
  for (size_t i = 0; i < info.aliased_io.size(); ++i) {
    const auto& a = info.aliased_io[i];
    std::string where = format("aliased_io[%zu]", i);
    const Binding* out = need(a.output, false, where);
    if (!out) return false;
    const Binding* in = need(a.input, true, where);
    if (!in) return false;
    // A pair with an unknown side is compared on the delegate's tensors at execute.
    if (out->known && in->known && !same_type(*out, *in, "aliased")) return false;
    if (!aliased.insert(a.output).second) {
      return fail("output binding '" + a.output + "' is aliased twice in aliased_io");
    }
    auto it = writer_of.find(a.input);
    if (it != writer_of.end()) {
      return fail("input binding '" + a.input + "' is written by both '" + it->second + "' and '" +
                  a.output + "'");
    }
    writer_of[a.input] = a.output;
  }

  std::set<std::string> seen;
  for (size_t i = 0; i < info.delegate_inputs.size(); ++i) {
    const auto& name = info.delegate_inputs[i];
    if (!need(name, true, format("delegate_inputs[%zu]", i))) return false;
    if (!seen.insert(name).second) {
      return fail("delegate_inputs lists input binding '" + name + "' twice");
    }
  }
  for (const auto& b : info.inputs) {
    if (!seen.count(b.name)) {
      return fail("delegate_inputs misses input binding '" + b.name +
                  "' (every input binding must be a delegate argument)");
    }
  }
  std::set<std::string> delegate_outs;
  for (size_t i = 0; i < info.delegate_outputs.size(); ++i) {
    const auto& name = info.delegate_outputs[i];
    if (!need(name, false, format("delegate_outputs[%zu]", i))) return false;
    if (!delegate_outs.insert(name).second) {
      return fail("delegate_outputs lists output binding '" + name + "' twice");
    }
  }

  std::map<std::string, std::string> fqns;
  std::set<std::string> buffer_inputs;
  for (size_t i = 0; i < info.buffers.size(); ++i) {
    const auto& b = info.buffers[i];
    if (!need(b.input, true, format("buffers[%zu]", i))) return false;
    if (b.fqn.empty()) {
      return fail(format("buffers[%zu] has an empty fqn for input '%s'", i, b.input.c_str()));
    }
    if (!buffer_inputs.insert(b.input).second) {
      return fail("buffers lists input binding '" + b.input + "' twice");
    }
    auto it = fqns.find(b.fqn);
    if (it != fqns.end()) {
      return fail("buffer '" + b.fqn + "' is bound to both '" + it->second + "' and '" + b.input +
                  "'");
    }
    fqns[b.fqn] = b.input;
  }

  std::set<std::string> copied;
  for (size_t i = 0; i < info.copy_back.size(); ++i) {
    const auto& c = info.copy_back[i];
    std::string where = format("copy_back[%zu]", i);
    const Binding* out = need(c.output, false, where);
    if (!out) return false;
    const Binding* in = need(c.input, true, where);
    if (!in) return false;
    if (!same_type(*out, *in, "copy_back")) return false;
    if (aliased.count(c.output)) {
      return fail("output binding '" + c.output + "' is both aliased and copy-back");
    }
    if (!copied.insert(c.output).second) {
      return fail("copy_back lists output binding '" + c.output + "' twice");
    }
    auto it = writer_of.find(c.input);
    if (it != writer_of.end()) {
      return fail("input binding '" + c.input + "' is written by both '" + it->second + "' and '" +
                  c.output + "'");
    }
    writer_of[c.input] = c.output;
    if (!delegate_outs.count(c.output) && !out->is_static()) {
      return fail("copy-back output '" + c.output + "' has a dynamic shape " +
                  shape_text(out->shape) + "; the runtime needs a static one for its scratch");
    }
  }

  for (const auto& b : info.outputs) {
    if (!delegate_outs.count(b.name) && !aliased.count(b.name) && !copied.count(b.name)) {
      return fail("output binding '" + b.name +
                  "' is neither a delegate output, aliased (aliased_io) nor copy-back "
                  "(copy_back): its value would be dropped");
    }
  }
  return true;
}

}  // namespace tte
