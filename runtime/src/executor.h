// One delegate's executor, in the shape of ExecuTorch's XNNPACK backend (XNNExecutor): built once
// by TensorRTBackend::init inside the delegate's runtime allocation, then driven by execute.
//
// Invariant: `init` parses and validates the blob, creates the engine, fills the bindings the
// blob leaves unknown in from the engine (validating again), plans the bindings and allocates
// every buffer and counter slot a call uses. After it, `prepare_args` binds a call's tensors
// through the plan and `forward` runs the engine and makes exactly the plan's copies (each
// counted, by where its bytes went: within device memory, across the link, on the host) — neither
// allocates, throws or looks a name up, and once the engine ran `forward` returns, on error too,
// only after the engine finished. Every execute-time refusal is recorded with tte::refuse (its
// check id, and a sentence naming the binding and what is wrong).
#pragma once

#include "binding_plan.h"
#include "blob.h"
#include "counters.h"
#include "engine.h"

#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/span.h>

#include <memory>
#include <vector>

namespace tte {

class DelegateExecutor {
 public:
  // Reads the blob (parse_blob) and creates its engine, then init(info, engine).
  // `target_device`: the delegate's placement (BlobInfo::target_device).
  // `named_data`: the program's named data (BlobInfo::named_data).
  ET_NODISCARD Error init(const void* blob, size_t size, Reason& why,
                          const std::string& target_device = "",
                          const executorch::runtime::NamedDataMap* named_data = nullptr);
  // With the blob read and its engine created (tests hand in an engine of their own).
  ET_NODISCARD Error init(BlobInfo info, std::unique_ptr<Engine> engine, Reason& why);

  // Execute, first half: `args` are the delegate's (inputs, then delegate outputs, per the plan);
  // checks each tensor against its binding, binds every engine binding, and compares the
  // aliased pairs the blob does not size (check_aliases).
  ET_NODISCARD Error prepare_args(executorch::runtime::Span<executorch::runtime::EValue*> args);
  // Execute, second half: `engine.run()`, the plan's copies (each counted), `engine.finish()`.
  // After a failed run or copy the engine is still finished, and the run's or copy's refusal is
  // the one kept (not the finish's, should that fail too).
  ET_NODISCARD Error forward();

  // Part of prepare_args: for every pair in `plan().alias_checks` (a side the blob does not size:
  // unknown, or dynamic with the output also a delegate output), the pair's delegate tensors
  // must have the same scalar type and byte size; otherwise refused naming both bindings.
  ET_NODISCARD Error
  check_aliases(executorch::runtime::Span<executorch::runtime::EValue*> args) const;

  bool has_info() const { return has_info_; }  // the blob was read (for refusal messages)
  const BlobInfo& info() const { return info_; }
  const BindingPlan& plan() const { return plan_; }

 private:
  ET_NODISCARD Error allocate_call_state(Reason& why);
  ET_NODISCARD Error bind_inputs(executorch::runtime::Span<executorch::runtime::EValue*> args);
  ET_NODISCARD Error
  bind_delegate_outputs(executorch::runtime::Span<executorch::runtime::EValue*> args);
  ET_NODISCARD Error bind_engine_outputs();
  ET_NODISCARD Error copy_outputs();
  CopyPath copy_path(size_t k, const void* dst, const void* src);

  BlobInfo info_;  // names for messages; `engine` points into the processed segment
  bool has_info_ = false;
  BindingPlan plan_;
  std::unique_ptr<Engine> engine_;
  // Made at init:
  std::vector<void*> scratch_;          // per plan.scratch_nbytes
  std::vector<CopyCounter*> counters_;  // per plan.copies
  struct CopyMemo {
    const void* dst = nullptr;
    const void* src = nullptr;
    CopyPath path = CopyPath::Host;
  };
  std::vector<CopyMemo> copy_memo_;  // per plan.copies: the last call's addresses and path
  std::vector<CopyRange> batch_;     // per plan.copies: this call's ranges (sized at init)
  bool batch_checked_ = false;       // batch_'s addresses were checked for overlaps
  ET_NODISCARD Error check_batch();
  ET_NODISCARD Error copy_one_by_one();
  // The current call's tensors, refreshed by prepare_args:
  std::vector<void*> input_addr_;            // per input binding
  std::vector<size_t> input_nbytes_;         // per input binding
  std::vector<void*> delegate_out_addr_;     // per delegate output
  std::vector<size_t> delegate_out_nbytes_;  // per delegate output
  // Dynamic shapes (bindings with a -1 dimension and a max_shape), made at init:
  std::vector<uint8_t> input_dynamic_;   // per input binding: its shape handed to the engine
  std::vector<uint8_t> output_resized_;  // per delegate output: bound at its max, resized per call
  std::vector<executorch::aten::TensorImpl*> delegate_out_tensor_;  // this call's, per output
  ET_NODISCARD Error resize_delegate_output(size_t j, const int32_t* sizes, size_t rank);
  ET_NODISCARD Error resize_outputs_after_run();
};

// Init time, after the engine was created: every binding the blob leaves unknown (TR01/TR02 dtype
// "" and shape []) takes the dtype and shape the engine reports (Engine::binding_type), and the
// blob is validated again with them, so an aliased pair the engine runs with different types is
// refused here, naming both bindings (Error::InvalidProgram, the validation's check id). A binding
// the engine cannot describe stays unknown (sized and compared on its delegate tensors).
ET_NODISCARD Error resolve_unknown_bindings(BlobInfo& info, const Engine& engine, Reason& why);

}  // namespace tte
