// The reference engine: an ExecuTorch program as the engine payload; see reference_engine.h.
#include "reference_engine.h"
#include "abort_guard.h"
#include "counters.h"
#include "device.h"
#include "engine_weights.h"
#include "payload_check.h"
#include "refusal.h"
#include "scratch_arena.h"

#include <executorch/extension/data_loader/buffer_data_loader.h>
#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/core/memory_allocator.h>
#include <executorch/runtime/executor/memory_manager.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/kernel/kernel_runtime_context.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/platform/log.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <vector>

namespace tte {
namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;
using executorch::extension::BufferDataLoader;
using executorch::extension::MallocMemoryAllocator;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::MemoryManager;
using executorch::runtime::Method;
using executorch::runtime::MethodMeta;
using executorch::runtime::OpFunction;
using executorch::runtime::Program;
using executorch::runtime::Span;
using executorch::runtime::Tag;
using executorch::runtime::TensorInfo;

constexpr const char* kMethod = "forward";
constexpr size_t kPayloadAlignment = 16;
// A memory plan larger than this is refused as corrupt rather than attempted (the fuzz build
// lowers it, runtime/fuzz/CMakeLists.txt).
#ifndef TTE_MAX_PLANNED_BYTES
#define TTE_MAX_PLANNED_BYTES (int64_t(16) << 30)
#endif
constexpr int64_t kMaxPlannedBytes = TTE_MAX_PLANNED_BYTES;

// ExecuTorch 1.5.1's Method::init can return Ok with a kernel left unresolved: it keeps only the
// last KernelCall's resolve error (an earlier "Op index out of range" or "Missing operator name"
// is overwritten by a later success) and leaves that kernel-table slot uninitialised, so execute
// would jump through a garbage pointer. The method allocator therefore pre-fills every block it
// hands out with the address of `unresolved_kernel`: a slot init never resolved fails the call.
void unresolved_kernel(KernelRuntimeContext& ctx, Span<EValue*>) {
  ET_LOG(Error,
         "TensorRTBackend: the reference payload runs an instruction whose kernel was "
         "never resolved (its operator table is corrupt; see the error logged at init)");
  ctx.fail(Error::InvalidProgram);
}

// ExecuTorch's generic kernel wrappers read a kernel's arguments from the instruction's argument
// list without checking its length, so an instruction with too few arguments reads past it. Each
// block therefore carries kSlackPointers more slots, pointing at a None value: a read past the
// list finds a value of the wrong kind, which ExecuTorch refuses (an abort `contained` catches).
constexpr size_t kSlackPointers = 32;
EValue g_none;

class TrapFilledAllocator final : public MallocMemoryAllocator {
 public:
  void* allocate(size_t size, size_t alignment) override {
    const size_t body = (size + sizeof(void*) - 1) / sizeof(void*) * sizeof(void*);
    auto* p = static_cast<char*>(
        MallocMemoryAllocator::allocate(body + kSlackPointers * sizeof(void*), alignment));
    if (p != nullptr) {
      const OpFunction trap = &unresolved_kernel;
      for (size_t at = 0; at + sizeof trap <= body; at += sizeof trap) {
        std::memcpy(p + at, &trap, sizeof trap);
      }
      EValue* none = &g_none;
      for (size_t k = 0; k < kSlackPointers; ++k) {
        std::memcpy(p + body + k * sizeof none, &none, sizeof none);
      }
    }
    return p;
  }
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Bytes = std::unique_ptr<uint8_t, FreeDeleter>;

Bytes aligned_bytes(size_t n, size_t alignment) {
  size_t rounded = (n + alignment - 1) / alignment * alignment;
  return Bytes(static_cast<uint8_t*>(std::aligned_alloc(alignment, rounded ? rounded : alignment)));
}

// A tensor header over caller memory: sizes/dim order/strides owned here, data set per call.
struct InputView {
  std::vector<TensorImpl::SizesType> sizes;
  std::vector<TensorImpl::DimOrderType> dim_order;
  std::vector<TensorImpl::StridesType> strides;
  std::optional<TensorImpl> impl;

  // A dynamic binding's header starts at its max_shape and is resized per call (set_input_shape)
  // within it; a static one never changes.
  explicit InputView(const Binding& b) {
    const size_t rank = b.shape.size();
    const bool dynamic = !b.is_static();
    const std::vector<int64_t>& shape = dynamic ? b.max_shape : b.shape;
    sizes.resize(rank);
    dim_order.resize(rank);
    strides.resize(rank);
    int64_t stride = 1;
    for (size_t k = rank; k-- > 0;) {
      sizes[k] = static_cast<TensorImpl::SizesType>(shape[k]);
      dim_order[k] = static_cast<TensorImpl::DimOrderType>(k);
      strides[k] = static_cast<TensorImpl::StridesType>(stride);
      stride *= shape[k];
    }
    impl.emplace(dtype_scalar_type(b.dtype), static_cast<ssize_t>(rank), sizes.data(), nullptr,
                 dim_order.data(), strides.data(),
                 dynamic ? executorch::runtime::TensorShapeDynamism::DYNAMIC_BOUND
                         : executorch::runtime::TensorShapeDynamism::STATIC);
  }
};

// The payload's declared tensor for a binding must match it exactly — a dynamic dimension
// declared at the binding's max_shape (the payload plans for it) — and must not be planned.
bool check_signature(const TensorInfo& ti, const Binding& b, const char* side, Reason& why) {
  if (!b.is_static() && !b.bounded_dynamic()) {
    return why.reject("payload.dynamic_unbounded",
                      format("reference binding '%s' (%s) has a dynamic dimension and no "
                             "max_shape; a reference engine plans its memory for the largest "
                             "shape (re-export the .pte)",
                             b.name.c_str(), b.describe().c_str()));
  }
  if (ti.scalar_type() != dtype_scalar_type(b.dtype)) {
    return why.reject("payload.dtype",
                      format("reference payload %s %zu ('%s') has scalar type %s, the binding "
                             "says %s",
                             side, b.index, b.name.c_str(),
                             executorch::runtime::toString(ti.scalar_type()), dtype_name(b.dtype)));
  }
  auto sizes = ti.sizes();
  bool same = sizes.size() == b.shape.size();
  for (size_t k = 0; same && k < sizes.size(); ++k) {
    same = sizes[k] == (b.shape[k] < 0 ? b.max_shape[k] : b.shape[k]);
  }
  if (!same) {
    return why.reject(
        "payload.shape",
        format("reference payload %s %zu ('%s') has shape %s, the binding says %s", side, b.index,
               b.name.c_str(), shape_text(sizes).c_str(), b.describe().c_str()));
  }
  if (ti.is_memory_planned()) {
    return why.reject("payload.memory_planned_io",
                      format("reference payload %s %zu ('%s') is memory planned: the engine "
                             "could not bind caller memory without a copy; emit the payload with "
                             "MemoryPlanningPass(alloc_graph_input=False, "
                             "alloc_graph_output=False)",
                             side, b.index, b.name.c_str()));
  }
  return true;
}

// Every binding of one side is a tensor of the payload's signature, as check_signature wants.
template <class TagOf, class MetaOf>
bool check_side(const std::vector<Binding>& side, const char* name, TagOf tag_of, MetaOf meta_of,
                Reason& why) {
  for (const Binding& b : side) {
    auto tag = tag_of(b.index);
    auto ti = meta_of(b.index);
    if (!tag.ok() || tag.get() != Tag::Tensor || !ti.ok()) {
      return why.reject("payload.not_tensor", format("reference payload %s %zu ('%s') is not a "
                                                     "tensor",
                                                     name, b.index, b.name.c_str()));
    }
    if (!check_signature(ti.get(), b, name, why)) return false;
  }
  return true;
}

// "'x', 'ring' -> 'y'": which engine an init-time allocation failure belongs to.
std::string binding_names(const BlobInfo& info) {
  std::string s;
  for (const Binding& b : info.inputs) s += (s.empty() ? "'" : ", '") + b.name + "'";
  s += " ->";
  for (size_t i = 0; i < info.outputs.size(); ++i) {
    s += (i ? ", '" : " '") + info.outputs[i].name + "'";
  }
  return s;
}

class ReferenceEngine final : public Engine {
 public:
  const char* kind() const override { return "reference"; }

  // Loads the payload as a program, checks its 'forward' against the bindings, allocates its
  // memory and loads the method.
  ET_NODISCARD Error init(const BlobInfo& info, Reason& why) {
    Error e = load_program(info, why);
    if (e == Error::Ok) e = weights_.open(info, why);
    if (e == Error::Ok) e = check_forward(info, why);
    if (e == Error::Ok) e = allocate_memory(info, why);
    if (e == Error::Ok) e = load_forward(why);
    if (e == Error::Ok) {
      for (const Binding& b : info.inputs) inputs_.emplace_back(b);
      e = bind_weights(why);
    }
    if (e == Error::Ok) find_repeated_outputs(info);
    if (e == Error::Ok) e = allocate_staging(info, why);
    return e;
  }

  ~ReferenceEngine() override {
    for (void* p : device_scratch_) device_->deallocate(p);
  }

  Result<void*> allocate_scratch(size_t nbytes, Reason& why) override {
    if (device_ != nullptr) {  // a copy-back's new value stays in device memory
      auto p = device_->allocate(nbytes);
      if (!p.ok()) {
        return why.fail(
            Error::MemoryAllocationFailed, "runtime.out_of_memory",
            format("cannot allocate %zu scratch bytes on device %s", nbytes, device_->name()));
      }
      device_scratch_.push_back(p.get());
      return p.get();
    }
    scratch_.push_back(aligned_bytes(nbytes, 64));
    if (!scratch_.back()) {
      scratch_.pop_back();
      return why.fail(Error::MemoryAllocationFailed, "runtime.out_of_memory",  // the caller
                      format("cannot allocate %zu scratch bytes", nbytes));    // names the output
    }
    return static_cast<void*>(scratch_.back().get());
  }

  Error set_input_shape(size_t binding, const int32_t* sizes, size_t rank) override {
    ran_ = false;
    Tensor t(&*inputs_[binding].impl);
    const Error e = executorch::runtime::resize_tensor(
        t, executorch::aten::ArrayRef<executorch::aten::SizesType>(sizes, rank));
    if (e != Error::Ok) {
      refuse("execute.shape_bounds",
             "TensorRTBackend: reference engine input %zu cannot take this call's shape: it is "
             "larger than the binding's max_shape",
             binding);
    }
    return e;
  }

  bool output_shape(size_t binding, int32_t* sizes, size_t rank) override {
    if (!ran_ || binding >= method_->outputs_size()) return false;
    const EValue& v = method_->get_output(binding);
    if (!v.isTensor() || v.toTensor().dim() != static_cast<ssize_t>(rank)) return false;
    for (size_t k = 0; k < rank; ++k) sizes[k] = v.toTensor().size(k);
    return true;
  }

  Error bind_input(size_t binding, void* data, size_t nbytes) override {
    if (aborted_) return refuse_after_abort();
    ran_ = false;
    in_device_[binding] = nullptr;
    if (device_ != nullptr && device_->owns(data)) {  // device mode: read it into host staging
      Error e = stage_in(binding, data, nbytes);
      if (e != Error::Ok) return e;
      data = in_stage_[binding].get();
    }
    InputView& v = inputs_[binding];
    v.impl->set_data(data);
    // Not memory planned (checked in init): set_input shares `data`, it does not copy.
    return method_->set_input(EValue(Tensor(&*v.impl)), binding);
  }

  Error bind_output(size_t binding, void* data, size_t nbytes) override {
    if (aborted_) return refuse_after_abort();
    Error e = stage_output(binding, data, nbytes);
    if (e == Error::Ok) e = stage_narrow_output(binding, data, nbytes);
    if (e != Error::Ok) return e;
    out_host_[binding] = {data, nbytes};
    if (repeats_[binding] >= 0) return Error::Ok;  // filled from its first binding after the run
    return method_->set_output_data_ptr(data, nbytes, binding);
  }

  // Device mode: `data` becomes the host staging the payload writes (an output aliased to an
  // input: that input's staging) and `nbytes` the staging's size; the caller's bytes are uploaded
  // after the run.
  Error stage_output(size_t binding, void*& data, size_t& nbytes) {
    uploads_[binding] = Upload{};
    if (device_ != nullptr && device_->owns(data)) {  // device mode: written back after the run
      void* host = out_stage_[binding].get();
      size_t staged = out_nbytes_[binding];
      for (size_t i = 0; i < in_device_.size(); ++i) {
        if (in_device_[i] == data) {  // aliased: in place, staged
          host = in_stage_[i].get();
          staged = in_nbytes_[i];
        }
      }
      if (host == nullptr || nbytes > out_nbytes_[binding] || nbytes > staged) {
        refuse("execute.device_staging",
               "TensorRTBackend: reference engine output %zu is device memory (%zu bytes) "
               "beyond its binding's %zu staged bytes",
               binding, nbytes, out_nbytes_[binding]);
        return Error::InvalidArgument;
      }
      uploads_[binding] = Upload{data, host, nbytes};
      data = host;
      nbytes = staged;
    }
    return Error::Ok;
  }

  // Host memory narrower than a dynamic binding's max_shape (a program holding the output in a
  // static tensor, executor.cpp): ExecuTorch's kernels resize the payload's output up to its
  // bound and write it without knowing `data`'s size, so the payload writes a staging buffer of
  // the binding's max bytes instead, copied to `data` after the run if the output fits it.
  Error stage_narrow_output(size_t binding, void*& data, size_t& nbytes) {
    narrow_[binding] = HostOut{};
    if (uploads_[binding].device != nullptr || repeats_[binding] >= 0 ||
        nbytes >= out_capacity_[binding]) {
      return Error::Ok;  // device staging already; a repeat: copied from its first, bounded
    }
    if (!narrow_stage_[binding]) {
      narrow_stage_[binding] = aligned_bytes(out_capacity_[binding], 64);
      if (!narrow_stage_[binding]) {
        refuse("runtime.out_of_memory",
               "TensorRTBackend: cannot allocate %zu bytes of host staging for reference engine "
               "output %zu",
               out_capacity_[binding], binding);
        return Error::MemoryAllocationFailed;
      }
    }
    narrow_[binding] = HostOut{data, nbytes};
    data = narrow_stage_[binding].get();
    nbytes = out_capacity_[binding];
    return Error::Ok;
  }

  Error copy_narrow_outputs() {
    for (size_t o = 0; o < narrow_.size(); ++o) {
      const HostOut& to = narrow_[o];
      if (to.data == nullptr) continue;
      const size_t made = method_->get_output(o).toTensor().nbytes();
      if (made > to.nbytes) {
        refuse("execute.output_capacity",
               "TensorRTBackend: reference engine output %zu came out %zu bytes; the tensor bound "
               "to it holds %zu",
               o, made, to.nbytes);
        return Error::InvalidArgument;
      }
      std::memcpy(to.data, narrow_stage_[o].get(), made);
    }
    return Error::Ok;
  }

  // A payload may return one value as several outputs (a partition handing the same tensor to
  // several consumers): ExecuTorch gives them one tensor, so binding each would leave all but the
  // last bound address unwritten. Each repeat names the first output binding of its value.
  void find_repeated_outputs(const BlobInfo& info) {
    repeats_.assign(info.outputs.size(), -1);
    out_host_.assign(info.outputs.size(), HostOut{});
    for (size_t o = 0; o < info.outputs.size(); ++o) {
      const EValue& v = method_->get_output(o);
      for (size_t first = 0; first < o && v.isTensor(); ++first) {
        const EValue& f = method_->get_output(first);
        if (f.isTensor() &&
            f.toTensor().unsafeGetTensorImpl() == v.toTensor().unsafeGetTensorImpl()) {
          repeats_[o] = static_cast<int64_t>(first);
          break;
        }
      }
    }
  }

  Error run() override {
    if (aborted_) return refuse_after_abort();
    if (Error w = weights_.verify(); w != Error::Ok) return w;  // once, before a kernel reads them
    Error e = contained([&] { return method_->execute(); }, aborted_);
    ran_ = e == Error::Ok && !aborted_;
    if (ran_) e = copy_narrow_outputs();
    for (size_t o = 0; e == Error::Ok && o < repeats_.size(); ++o) {
      if (repeats_[o] < 0) continue;
      const HostOut& from = out_host_[static_cast<size_t>(repeats_[o])];
      const HostOut& to = out_host_[o];
      if (to.data != from.data) std::memcpy(to.data, from.data, std::min(to.nbytes, from.nbytes));
    }
    if (aborted_) {
      refuse("execute.aborted",
             "TensorRTBackend: the reference payload aborted inside ExecuTorch (the log line "
             "above says why): its program does not fit its operators; this delegate refuses "
             "this and every later call (re-export the .pte)");
    }
    for (size_t o = 0; e == Error::Ok && o < uploads_.size(); ++o) {
      const Upload& u = uploads_[o];
      if (u.device == nullptr) continue;
      e = device_->to_device(u.device, u.host, u.nbytes);
      if (e == Error::Ok) count_copy(staging_counter_, u.nbytes, CopyPath::Link);
    }
    return e;
  }

  Error copy(void* dst, const void* src, size_t nbytes) override {
    return copy_any(dst, src, nbytes);  // device mode: a device-to-device copy
  }

  Error copy_batch(const CopyRange* copies, size_t n) override {
    Device* d = active_device();  // the executor batches device-to-device copies only
    return d != nullptr ? d->device_copy_batch(copies, n) : Engine::copy_batch(copies, n);
  }

 private:
  static Error refuse_after_abort() {
    refuse("execute.aborted",
           "TensorRTBackend: the reference payload aborted inside ExecuTorch in an earlier call; "
           "this delegate refuses every later call (re-export the .pte)");
    return Error::InvalidState;
  }

  static Error refuse_aborted(const char* when, Reason& why) {
    return why.fail(Error::InvalidProgram, "payload.aborted",
                    std::string("reference payload: ExecuTorch aborted while ") + when +
                        " (the log line above says why); the payload is corrupt");
  }

  // The payload normally points into the delegate's processed segment, which ExecuTorch keeps
  // for the delegate's lifetime; only a misaligned one is copied (flatbuffers want alignment).
  Error load_program(const BlobInfo& info, Reason& why) {
    const void* payload = info.engine;
    const uint64_t payload_size = info.engine_size;
    if (reinterpret_cast<uintptr_t>(payload) % kPayloadAlignment != 0) {
      payload_copy_ = aligned_bytes(info.engine_size, kPayloadAlignment);
      if (!payload_copy_) {
        return why.fail(Error::MemoryAllocationFailed, "runtime.out_of_memory",
                        format("cannot allocate %llu bytes for the reference payload",
                               static_cast<unsigned long long>(info.engine_size)));
      }
      std::memcpy(payload_copy_.get(), info.engine, info.engine_size);
      payload = payload_copy_.get();
    }
    loader_.emplace(payload, payload_size);
    std::optional<Result<Program>> loaded;
    bool aborted = false;
    (void)contained(
        [&] {
          loaded.emplace(Program::load(&*loader_, Program::Verification::InternalConsistency));
          return Error::Ok;
        },
        aborted);
    if (aborted) return refuse_aborted("loading it as a program", why);
    if (!loaded->ok()) {
      return why.fail(Error::InvalidProgram, "payload.not_program",
                      format("reference payload (%llu bytes) is not a loadable ExecuTorch "
                             "program (Program::load error 0x%x)",
                             static_cast<unsigned long long>(payload_size),
                             static_cast<unsigned>(loaded->error())));
    }
    if (!check_kernel_calls(payload, payload_size, kMethod, why)) return Error::InvalidProgram;
    program_.emplace(std::move(loaded->get()));
    return Error::Ok;
  }

  // 'forward' takes the input bindings and returns the output bindings, as tensors.
  Error check_forward(const BlobInfo& info, Reason& why) {
    auto meta_r = program_->method_meta(kMethod);
    if (!meta_r.ok()) {
      return why.fail(Error::InvalidProgram, "payload.no_forward",
                      "reference payload has no method 'forward'");
    }
    const MethodMeta meta = meta_r.get();
    const size_t n_inputs = info.inputs.size() + weights_.size();
    if (meta.num_inputs() != n_inputs || meta.num_outputs() != info.outputs.size()) {
      return why.fail(Error::InvalidProgram, "payload.arity",
                      format("reference payload 'forward' takes %zu inputs and returns %zu "
                             "outputs; the blob has %zu input bindings, %zu weights and %zu "
                             "output bindings",
                             meta.num_inputs(), meta.num_outputs(), info.inputs.size(),
                             weights_.size(), info.outputs.size()));
    }
    auto in_tag = [&](size_t i) { return meta.input_tag(i); };
    auto in_meta = [&](size_t i) { return meta.input_tensor_meta(i); };
    const bool ok = check_side(info.inputs, "input", in_tag, in_meta, why) &&
                    check_side(weights_.bindings(), "input", in_tag, in_meta, why) &&
                    check_side(
                        info.outputs, "output", [&](size_t i) { return meta.output_tag(i); },
                        [&](size_t i) { return meta.output_tensor_meta(i); }, why);
    return ok ? Error::Ok : Error::InvalidProgram;
  }

  // The memory-planned buffers and the temp arena of 'forward' (all of its memory).
  Error allocate_memory(const BlobInfo& info, Reason& why) {
    const MethodMeta meta = program_->method_meta(kMethod).get();
    for (size_t i = 0; i < meta.num_memory_planned_buffers(); ++i) {
      auto size = meta.memory_planned_buffer_size(i);
      if (!size.ok() || size.get() < 0 || size.get() > kMaxPlannedBytes) {
        return why.fail(Error::InvalidProgram, "payload.planned_size",
                        format("reference payload's 'forward' declares memory-planned buffer %zu "
                               "with an invalid size (%lld bytes; at most %lld)",
                               i, size.ok() ? static_cast<long long>(size.get()) : -1LL,
                               static_cast<long long>(kMaxPlannedBytes)));
      }
      const size_t n = static_cast<size_t>(size.get());
      planned_buffers_.push_back(aligned_bytes(n, 64));
      if (!planned_buffers_.back()) {
        return why.fail(Error::MemoryAllocationFailed, "runtime.out_of_memory",
                        format("cannot allocate %zu bytes for memory-planned buffer %zu of the "
                               "reference payload's 'forward' (bindings %s)",
                               n, i, binding_names(info).c_str()));
      }
      planned_spans_.emplace_back(planned_buffers_.back().get(), n);
    }
    planned_.emplace(Span<Span<uint8_t>>(planned_spans_.data(), planned_spans_.size()));
    if (!temp_.reserve(kReferenceTempArenaBytes)) {
      return why.fail(Error::MemoryAllocationFailed, "runtime.out_of_memory",
                      format("cannot allocate the %zu-byte temp arena of the reference "
                             "payload's 'forward' (bindings %s)",
                             kReferenceTempArenaBytes, binding_names(info).c_str()));
    }
    memory_.emplace(&method_allocator_, &*planned_, &temp_);
    return Error::Ok;
  }

  // Each weight is bound once, for every call: the payload reads the named data in place.
  Error bind_weights(Reason& why) {
    for (size_t k = 0; k < weights_.size(); ++k) {
      const Binding& b = weights_.bindings()[k];
      InputView& v = weight_views_.emplace_back(b);
      v.impl->set_data(const_cast<void*>(weights_.data(k)));  // read only by the kernels
      const Error e = method_->set_input(EValue(Tensor(&*v.impl)), b.index);
      if (e != Error::Ok) {
        return why.fail(e, "payload.weight_input",
                        format("reference payload: binding %s as input %zu failed (error 0x%x)",
                               b.name.c_str(), b.index, static_cast<unsigned>(e)));
      }
    }
    return Error::Ok;
  }

  Error load_forward(Reason& why) {
    std::optional<Result<Method>> loaded;
    bool aborted = false;
    (void)contained(
        [&] {
          loaded.emplace(program_->load_method(kMethod, &*memory_));
          return Error::Ok;
        },
        aborted);
    if (aborted) return refuse_aborted("loading its method 'forward'", why);
    if (!loaded->ok()) {
      return why.fail(Error::InvalidProgram, "payload.method_load",
                      format("reference payload: loading method 'forward' failed with error "
                             "0x%x (a missing operator is logged above by ExecuTorch)",
                             static_cast<unsigned>(loaded->error())));
    }
    method_.emplace(std::move(loaded->get()));
    return Error::Ok;
  }

  // Device mode (a device delegate — target_device — with a device active, device.h): a test
  // engine's stand-in for running on the
  // device. Each device input is read into host staging before the run and each device output
  // (an aliased one through its input's staging) written back after it, with the device's own
  // copies — counted under kDeviceStagingCounter, never under a buffer's key — so ExecuTorch's
  // kernels only ever see host memory.
  Error allocate_staging(const BlobInfo& info, Reason& why) {
    const bool device_delegate = !info.target_device.empty() && info.target_device != "cpu";
    device_ = device_delegate ? active_device() : nullptr;
    in_device_.assign(info.inputs.size(), nullptr);
    uploads_.assign(info.outputs.size(), Upload{});
    narrow_.assign(info.outputs.size(), HostOut{});
    narrow_stage_.resize(info.outputs.size());
    for (const Binding& b : info.outputs) out_capacity_.push_back(b.max_nbytes());
    if (device_ == nullptr) return Error::Ok;
    staging_counter_ = copy_counter(kDeviceStagingCounter);
    if (staging_counter_ == nullptr) {
      return why.fail(Error::MemoryAllocationFailed, "runtime.out_of_memory",
                      "cannot allocate the reference engine's staging counter");
    }
    for (const Binding& b : info.inputs) {  // a dynamic binding: staged at its max_shape
      in_nbytes_.push_back(b.max_nbytes());
      in_stage_.push_back(aligned_bytes(b.max_nbytes(), 64));
      if (!in_stage_.back()) return staging_failed(b, why);
    }
    for (const Binding& b : info.outputs) {
      out_nbytes_.push_back(b.max_nbytes());
      out_stage_.push_back(aligned_bytes(b.max_nbytes(), 64));
      if (!out_stage_.back()) return staging_failed(b, why);
    }
    return Error::Ok;
  }

  static Error staging_failed(const Binding& b, Reason& why) {
    return why.fail(Error::MemoryAllocationFailed, "runtime.out_of_memory",
                    format("cannot allocate %zu bytes of host staging for binding '%s'",
                           b.max_nbytes(), b.name.c_str()));
  }

  Error stage_in(size_t binding, void* data, size_t nbytes) {
    if (nbytes > in_nbytes_[binding]) {
      refuse("execute.device_staging",
             "TensorRTBackend: reference engine input %zu is device memory (%zu bytes) beyond "
             "its binding's %zu staged bytes",
             binding, nbytes, in_nbytes_[binding]);
      return Error::InvalidArgument;
    }
    Error e = device_->to_host(in_stage_[binding].get(), data, nbytes);
    if (e != Error::Ok) {
      refuse("execute.device_copy",
             "TensorRTBackend: reading reference engine input %zu (%zu bytes) from device %s "
             "failed (error 0x%x)",
             binding, nbytes, device_->name(), static_cast<unsigned>(e));
      return e;
    }
    in_device_[binding] = data;
    count_copy(staging_counter_, nbytes, CopyPath::Link);
    return Error::Ok;
  }

  struct Upload {
    void* device = nullptr;
    const void* host = nullptr;
    size_t nbytes = 0;
  };
  Device* device_ = nullptr;
  CopyCounter* staging_counter_ = nullptr;
  std::vector<Bytes> in_stage_, out_stage_;
  std::vector<size_t> in_nbytes_, out_nbytes_;
  std::vector<void*> in_device_;  // this call's device address per input, or nullptr
  std::vector<Upload> uploads_;   // this call's device output per output binding
  struct HostOut {
    void* data = nullptr;
    size_t nbytes = 0;
  };
  std::vector<int64_t> repeats_;      // per output: the first output of the same value, or -1
  std::vector<HostOut> out_host_;     // this call's host address per output binding
  std::vector<size_t> out_capacity_;  // per output binding: its max bytes (0: unknown)
  std::vector<HostOut> narrow_;       // this call's narrower host memory per output, or none
  std::vector<Bytes> narrow_stage_;   // per output: its staging, made at its first narrow call
  std::vector<void*> device_scratch_;

  bool aborted_ = false;  // a contained abort cut a run short: the method is unusable
  bool ran_ = false;      // the method ran since the last binding: output shapes are this call's
  Bytes payload_copy_;
  std::optional<BufferDataLoader> loader_;
  std::optional<Program> program_;
  TrapFilledAllocator method_allocator_;
  std::vector<Bytes> planned_buffers_;
  std::vector<Span<uint8_t>> planned_spans_;
  std::optional<HierarchicalAllocator> planned_;
  ScratchArena temp_;  // grows to what its kernels ask for (scratch_arena.h)
  std::optional<MemoryManager> memory_;
  std::optional<Method> method_;
  std::deque<InputView> inputs_;  // deque: TensorImpl pointers into it stay valid
  EngineWeights weights_;
  std::deque<InputView> weight_views_;
  std::vector<Bytes> scratch_;
};

}  // namespace

Result<std::unique_ptr<Engine>> create_reference_engine(const BlobInfo& info, Reason& why) {
  auto engine = std::make_unique<ReferenceEngine>();
  Error e = engine->init(info, why);
  if (e != Error::Ok) return e;
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace tte
