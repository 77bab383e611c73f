// The TensorRT engine: the payload is a serialized nvinfer1 engine (upstream's TR01/TR02, or
// TR03 with engine_kind "tensorrt"). Compiled only when TensorRT is found (TTE_HAVE_TENSORRT).
//
// Invariant: bindings are bound by name with IExecutionContext::setTensorAddress to the addresses
// the runtime passes (device memory: the caller's tensors are expected to be device-resident),
// `run` is one enqueueV3 on the engine's own stream, `copy` a cudaMemcpyAsync on that stream, and
// `finish` the only stream synchronisation of a call.
#pragma once

#include <tte/engine.h>

namespace tte {

Result<std::unique_ptr<Engine>> create_tensorrt_engine(const BlobInfo& info, std::string& why);

}  // namespace tte
