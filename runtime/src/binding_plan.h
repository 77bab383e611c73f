// The binding plan (not the mutation plan, which is decided in Python): from validated blob
// metadata, the fixed binding table `execute` follows.
//
// Invariant: the plan is computed once, at init, and is complete — every engine input binding
// has exactly one delegate argument; every engine output binding has exactly one target:
//   DelegateOutput  the delegate's output tensor j (ExecuTorch owns what happens next),
//   AliasedInput    the address of the input binding it aliases (written in place, no copy),
//   Scratch         a runtime-owned buffer, copied once into its input's address after the run.
// The copies the runtime makes per call are exactly `copies`, each read from the blob's own
// record (the runtime decides nothing): one per copy-back output (scratch -> input; or, for a
// copy-back output that is also a delegate output — a new value the program also reads —
// delegate output -> input: the value is both handed out and written into its buffer), and one
// per aliased output that is also a delegate output (input -> delegate output: upstream TR02
// blobs, where ExecuTorch expects the value).
// Each copy is counted under `counter_key`: the buffer FQN of its input, or the input binding's
// name when the blob names no buffer for it.
// A binding the blob does not size (unknown, or a dynamic -1 dimension) is sized by its delegate
// tensor at execute (`sized_by_tensor`): a delegate output by its tensor, an aliased output by its
// input's tensor; a scratch target needs a static binding (refused otherwise). Every aliased
// pair whose sides the blob cannot compare (an unknown side; or dynamic, when the output is also a
// delegate output and so copied from its input) is listed in `alias_checks`, with the argument
// positions execute compares, so execute does no name lookup.
#pragma once

#include "blob.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tte {

enum class OutputTarget : uint8_t { DelegateOutput, AliasedInput, Scratch };
const char* output_target_name(OutputTarget t);

struct OutputSlot {
  OutputTarget target = OutputTarget::DelegateOutput;
  uint32_t delegate_output = 0;  // DelegateOutput; also set for an aliased output that is one
  bool also_delegate_output = false;
  uint32_t input = 0;            // AliasedInput / Scratch: the input binding written
  uint32_t scratch = 0;          // Scratch: index into scratch_nbytes
  size_t nbytes = 0;             // the binding's; 0 when sized_by_tensor
  bool sized_by_tensor = false;  // its target tensor's nbytes at execute
};

enum class CopyKind : uint8_t { ScratchToInput, InputToDelegateOutput, DelegateOutputToInput };

struct CopyStep {
  CopyKind kind = CopyKind::ScratchToInput;
  uint32_t input = 0;            // input binding (destination, or source for a reflect)
  uint32_t scratch = 0;          // ScratchToInput: source scratch buffer
  uint32_t delegate_output = 0;  // InputToDelegateOutput: destination; DelegateOutputToInput:
                                 // source
  uint32_t output = 0;           // the output binding this copy serves
  size_t nbytes = 0;
  bool sized_by_tensor = false;  // the delegate output tensor's nbytes (a delegate-output copy)
  std::string counter_key;
};

// An aliased pair compared on its delegate tensors at every execute (scalar type, byte size).
struct AliasCheck {
  uint32_t pair = 0;             // index into BlobInfo::aliased_io (names for the message)
  uint32_t input_arg = 0;        // delegate argument of the input
  uint32_t delegate_output = 0;  // delegate output of the output (argument n_inputs + this)
  bool output_known = true, input_known = true;
};

struct BindingPlan {
  std::vector<uint32_t> arg_input;        // delegate arg i -> input binding index
  std::vector<uint32_t> delegate_output;  // delegate output j -> output binding index
  std::vector<OutputSlot> outputs;        // per output binding
  std::vector<size_t> scratch_nbytes;
  std::vector<CopyStep> copies;          // in order, after the engine ran
  std::vector<AliasCheck> alias_checks;  // before anything is bound
};

// Error::InvalidArgument with `why` (plan.*) for an inconsistency parse_blob refuses earlier (a
// hand-built BlobInfo may have one).
Result<BindingPlan> plan_bindings(const BlobInfo& info, Reason& why);

}  // namespace tte
