// The TensorRT engine: the payload is a serialized nvinfer1 engine (upstream's TR01/TR02, or
// TR03 with engine_kind "tensorrt"). Compiled only when TensorRT is found (TTE_HAVE_TENSORRT).
//
// Invariant: every binding's dtype and shape are fixed at init — a known binding's checked
// against the engine (a mismatch refused naming the binding), an unknown TR01/TR02 binding
// (dtype "" and shape []) taken from the engine (getTensorDataType / getTensorShape; refused if
// dynamic) — and `bind_*` refuse a tensor of another byte size. Bindings are bound by name with
// IExecutionContext::setTensorAddress to the addresses the runtime passes (device memory: the
// caller's tensors are expected to be device-resident), `run` is one enqueueV3 on the engine's
// own stream — a blocking stream, so ordered after work the caller queued on the legacy default
// stream — `copy` a cudaMemcpyAsync on that stream, and `finish` the only stream
// synchronisation of a call. Every entry point makes the blob's device current only for its own
// duration: the caller's current device is restored before it returns.
#pragma once

#include "engine.h"

namespace tte {

Result<std::unique_ptr<Engine>> create_tensorrt_engine(const BlobInfo& info, Reason& why);

}  // namespace tte
