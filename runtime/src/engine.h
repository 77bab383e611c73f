// The engine interface: what the runtime needs of a compiled engine (docs/ARCHITECTURE.md,
// "Engines"). Bindings are addressed by index: input binding i is BlobInfo::inputs[i], output
// binding o is BlobInfo::outputs[o].
//
// Invariant: after `create` succeeded, `bind_input`, `bind_output`, `run`, `copy` and `finish`
// allocate nothing and never block on anything but the engine's own work; everything they need
// was sized and allocated in `create`/`allocate_scratch`. Addresses passed to bind_* must stay
// valid until `finish` returned. Scratch memory belongs to the engine and lives as long as it.
#pragma once

#include "blob.h"
#include "device.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tte {

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const char* kind() const = 0;
  // Init time, for a binding the blob leaves unknown (TR01/TR02 dtype "" and shape []): the dtype
  // and static shape the engine runs input (or output) binding `index` with; false when the
  // engine cannot tell (then the binding stays unknown, sized by its delegate tensor).
  virtual bool binding_type(bool is_input, size_t index, DType& dtype,
                            std::vector<int64_t>& shape) const {
    return false;
  }
  // Init time: memory the engine can write an output to and `copy` can read (host or device).
  virtual Result<void*> allocate_scratch(size_t nbytes, Reason& why) = 0;
  // Execute time (no allocation); a refusal is recorded with tte::refuse (refusal.h).
  // Before `bind_input` of an input binding with a dynamic dimension: its shape in this call (its
  // delegate tensor's, already checked against the binding's rank, static dims and max_shape).
  // An engine that runs static shapes only refuses it.
  ET_NODISCARD virtual Error set_input_shape(size_t binding, const int32_t* sizes, size_t rank);
  // Output binding `binding`'s shape in this call (`rank` sizes into `sizes`), once the engine
  // knows it: after the dynamic inputs' set_input_shape for an engine that infers shapes
  // (TensorRT), after `run` for one that learns them running (reference). False until then.
  virtual bool output_shape(size_t binding, int32_t* sizes, size_t rank) { return false; }
  ET_NODISCARD virtual Error bind_input(size_t binding, void* data, size_t nbytes) = 0;
  ET_NODISCARD virtual Error bind_output(size_t binding, void* data, size_t nbytes) = 0;
  ET_NODISCARD virtual Error run() = 0;
  // Ordered after `run` (same stream for device engines).
  ET_NODISCARD virtual Error copy(void* dst, const void* src, size_t nbytes) = 0;
  // `n` copies, every side in device memory and no two ranges overlapping (the executor checks
  // both): as one device operation where the engine can (Device::device_copy_batch on its
  // stream), else one `copy` each (this default).
  ET_NODISCARD virtual Error copy_batch(const CopyRange* copies, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (Error e = copy(copies[i].dst, copies[i].src, copies[i].nbytes); e != Error::Ok) return e;
    }
    return Error::Ok;
  }
  // Wait until run and copies are complete (no-op for synchronous engines).
  ET_NODISCARD virtual Error finish() { return Error::Ok; }
};

// "reference" or "reference,tensorrt".
const char* compiled_engines();

}  // namespace tte
