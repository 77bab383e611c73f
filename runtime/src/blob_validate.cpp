// Consistency of blob metadata (CONTRACTS.md §1 "Validation"): python's contracts/blob_validate
// .validate, check for check, in its order, with its check ids. See blob.h for the invariant.
#include "blob.h"

#include <algorithm>
#include <map>
#include <set>

namespace tte {

const char* const kUnknownInTr03 =
    "only upstream TR01/TR02 blobs may leave a binding's dtype and shape to the delegate's "
    "tensors (dtype '' and shape []); a TR03 blob must give both";

namespace {

class Validator {
 public:
  Validator(const BlobInfo& info, Reason& why) : info_(info), why_(why) {}

  bool run() {
    return bindings() && aliased_pairs() && delegate_inputs() && delegate_outputs() && buffers() &&
           copy_back_pairs() && outputs_targeted();
  }

 private:
  // Unique names, known in TR03, at most 2**63-1 bytes; in io_bindings' order.
  bool bindings() {
    std::vector<const Binding*> all;
    for (const auto* side : {&info_.inputs, &info_.outputs}) {
      for (const Binding& b : *side) all.push_back(&b);
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const Binding* a, const Binding* b) { return a->position < b->position; });
    std::set<std::string> names;
    for (const Binding* b : all) {
      if (!names.insert(b->name).second) {
        return why_.reject("binding.duplicate",
                           "binding name '" + b->name + "' appears twice in io_bindings");
      }
      if (info_.format == 3 && !b->known) {
        return why_.reject("binding.unknown_in_tr03",
                           "binding '" + b->name + "' has an empty dtype; " + kUnknownInTr03);
      }
      if (!b->fits()) {
        return why_.reject("binding.too_large", "binding '" + b->name + "' (" + b->describe() +
                                                    ") is larger than 2**63-1 bytes");
      }
      if (!b->max_shape.empty() && !bounded(*b)) return false;
    }
    return true;
  }

  // A max_shape bounds a dynamic binding: its rank, its static dims as they are, and at most
  // 2**63-1 bytes in all (the memory planned for it). python: blob_validate._check_max_shape.
  bool bounded(const Binding& b) {
    std::string why;
    bool dynamic = false;
    for (int64_t s : b.shape) dynamic = dynamic || s < 0;
    if (!dynamic) {
      why = "the binding has no dynamic (-1) dimension";
    } else if (b.max_shape.size() != b.shape.size()) {
      why = format("rank %zu, the binding's is %zu", b.max_shape.size(), b.shape.size());
    } else {
      for (size_t k = 0; why.empty() && k < b.shape.size(); ++k) {
        if (b.shape[k] >= 0 && b.max_shape[k] != b.shape[k]) {
          why = "it differs from the binding's static dimensions";
        }
      }
      if (why.empty() && b.max_nbytes() == SIZE_MAX) {
        why = "it bounds the binding at more than 2**63-1 bytes";
      }
    }
    if (why.empty()) return true;
    return why_.reject("binding.max_shape", "binding '" + b.name + "' (" + b.describe() +
                                                ") has max_shape " + shape_text(b.max_shape) +
                                                ": " + why);
  }

  // The binding `name` of the wanted direction, or nullptr with the refusal recorded.
  const Binding* need(const std::string& name, bool want_input, const std::string& where) {
    const char* kind = want_input ? "input" : "output";
    const Binding* b = want_input ? info_.input(name) : info_.output(name);
    if (b) return b;
    const Binding* other = want_input ? info_.output(name) : info_.input(name);
    if (!other) {
      why_.reject("ref.missing",
                  where + " names " + kind + " '" + name + "', which is not a binding");
    } else {
      why_.reject("ref.direction", where + " names " + kind + " '" + name + "', which is an " +
                                       (other->is_input ? "input" : "output") + " binding");
    }
    return nullptr;
  }

  bool same_type(const Binding& out, const Binding& in, const char* what, const char* check) {
    if (out.known == in.known && out.dtype == in.dtype && out.shape == in.shape &&
        out.max_shape == in.max_shape) {
      return true;
    }
    return why_.reject(check, std::string(what) + " pair '" + out.name + "' -> '" + in.name +
                                  "' differs: output is " + out.describe() + ", input is " +
                                  in.describe());
  }

  // An input binding is written by at most one output (aliased or copy-back).
  bool record_writer(const std::string& input, const std::string& output) {
    const auto it = writer_of_.find(input);
    if (it != writer_of_.end()) {
      return why_.reject("writer.twice", "input binding '" + input + "' is written by both '" +
                                             it->second + "' and '" + output + "'");
    }
    writer_of_[input] = output;
    return true;
  }

  bool aliased_pairs() {
    for (size_t i = 0; i < info_.aliased_io.size(); ++i) {
      const AliasedIO& a = info_.aliased_io[i];
      const std::string where = format("aliased_io[%zu]", i);
      const Binding* out = need(a.output, false, where);
      const Binding* in = out ? need(a.input, true, where) : nullptr;
      if (!in) return false;
      // A pair with an unknown side is compared on the delegate's tensors at execute.
      if (out->known && in->known && !same_type(*out, *in, "aliased", "aliased.mismatch")) {
        return false;
      }
      if (!aliased_.insert(a.output).second) {
        return why_.reject("aliased.twice",
                           "output binding '" + a.output + "' is aliased twice in aliased_io");
      }
      if (!record_writer(a.input, a.output)) return false;
    }
    return true;
  }

  // Each of `names` (the metadata list `list`) names a binding of the wanted direction, once;
  // `seen` collects them. Refused at the first that does not (dup_check: a name listed twice).
  bool listed_once(const std::vector<std::string>& names, bool inputs, const char* list,
                   const char* dup_check, std::set<std::string>& seen) {
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string& name = names[i];
      if (!need(name, inputs, format("%s[%zu]", list, i))) return false;
      if (!seen.insert(name).second) {
        return why_.reject(dup_check, std::string(list) + " lists " +
                                          (inputs ? "input" : "output") + " binding '" + name +
                                          "' twice");
      }
    }
    return true;
  }

  bool delegate_inputs() {
    std::set<std::string> seen;
    if (!listed_once(info_.delegate_inputs, true, "delegate_inputs", "delegate_inputs.duplicate",
                     seen)) {
      return false;
    }
    for (const Binding& b : info_.inputs) {
      if (!seen.count(b.name)) {
        return why_.reject("delegate_inputs.missing",
                           "delegate_inputs misses input binding '" + b.name +
                               "' (every input binding must be a delegate argument)");
      }
    }
    return true;
  }

  bool delegate_outputs() {
    return listed_once(info_.delegate_outputs, false, "delegate_outputs",
                       "delegate_outputs.duplicate", delegate_outs_);
  }

  bool buffers() {
    std::map<std::string, std::string> fqns;
    std::set<std::string> inputs;
    for (size_t i = 0; i < info_.buffers.size(); ++i) {
      const BufferRef& b = info_.buffers[i];
      if (!need(b.input, true, format("buffers[%zu]", i))) return false;
      if (b.fqn.empty()) {
        return why_.reject("buffers.empty_fqn", format("buffers[%zu] has an empty fqn for "
                                                       "input '%s'",
                                                       i, b.input.c_str()));
      }
      if (!inputs.insert(b.input).second) {
        return why_.reject("buffers.duplicate_input",
                           "buffers lists input binding '" + b.input + "' twice");
      }
      const auto it = fqns.find(b.fqn);
      if (it != fqns.end()) {
        return why_.reject("buffers.duplicate_fqn", "buffer '" + b.fqn + "' is bound to both '" +
                                                        it->second + "' and '" + b.input + "'");
      }
      fqns[b.fqn] = b.input;
    }
    return true;
  }

  bool copy_back_pair(size_t i) {
    const CopyBackRef& c = info_.copy_back[i];
    const std::string where = format("copy_back[%zu]", i);
    const Binding* out = need(c.output, false, where);
    const Binding* in = out ? need(c.input, true, where) : nullptr;
    if (!in || !same_type(*out, *in, "copy_back", "copy_back.mismatch")) return false;
    if (aliased_.count(c.output)) {
      return why_.reject("copy_back.aliased",
                         "output binding '" + c.output + "' is both aliased and copy-back");
    }
    if (!copied_.insert(c.output).second) {
      return why_.reject("copy_back.duplicate",
                         "copy_back lists output binding '" + c.output + "' twice");
    }
    if (!record_writer(c.input, c.output)) return false;
    if (!delegate_outs_.count(c.output) && !out->is_static()) {  // its scratch is sized at init
      return why_.reject("copy_back.dynamic_scratch",
                         "copy-back output '" + c.output + "' has a dynamic shape " +
                             shape_text(out->shape) +
                             "; the runtime needs a static one for its scratch");
    }
    return true;
  }

  bool copy_back_pairs() {
    for (size_t i = 0; i < info_.copy_back.size(); ++i) {
      if (!copy_back_pair(i)) return false;
    }
    return true;
  }

  bool outputs_targeted() {
    for (const Binding& b : info_.outputs) {
      if (!delegate_outs_.count(b.name) && !aliased_.count(b.name) && !copied_.count(b.name)) {
        return why_.reject("output.dropped",
                           "output binding '" + b.name +
                               "' is neither a delegate output, aliased (aliased_io) nor "
                               "copy-back (copy_back): its value would be dropped");
      }
    }
    return true;
  }

  const BlobInfo& info_;
  Reason& why_;
  std::map<std::string, std::string> writer_of_;  // input binding -> the output writing it
  std::set<std::string> aliased_, delegate_outs_, copied_;
};

}  // namespace

bool validate_blob(const BlobInfo& info, Reason& why) { return Validator(info, why).run(); }

}  // namespace tte
