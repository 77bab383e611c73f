// The TensorRT engine: the payload is a serialized nvinfer1 engine (upstream's TR01/TR02, or TR03
// with engine_kind "tensorrt" or "tensorrt_rtx"), run through a TrtApi (trt_api.h) — the SDK's
// (nvinfer_api.cpp) in the product, a fake in the unit tests.
//
// Invariant: at init the engine's own answers are checked against the blob before anything is
// bound: the I/O count; which input each output aliases, wherever the SDK can say (a disagreement
// refuses the delegate naming the output, the engine's answer and the blob's); the weight
// streaming budget the blob carries is set before the execution context exists; every binding's
// dtype and shape are fixed — a known binding's checked against the engine (a mismatch refused
// naming the binding), an unknown TR01/TR02 binding (dtype "" and shape []) taken from the engine
// (refused if dynamic). At execute time `bind_*` refuse a tensor of another byte size or in host
// memory (asked of the SDK only when a binding's address changed), `run` is one enqueue, `copy`
// an asynchronous copy on the same stream, and `finish` the only wait of a call (none on a
// caller's stream).
#pragma once

#include "engine.h"
#include "trt_api.h"

namespace tte {

// The engine over `api` for `info` (its kind: info.engine_kind), or the refusal of init.
Result<std::unique_ptr<Engine>> create_tensorrt_engine_over(std::unique_ptr<TrtApi> api,
                                                            const BlobInfo& info, Reason& why);

}  // namespace tte
