// Engine factory: picks the implementation for a blob's engine_kind; see engine_factory.h.
#include "engine_factory.h"
#include "reference_engine.h"
#include "tensorrt_engine.h"

namespace tte {
namespace {

// A TensorRT or TensorRT-RTX engine through the SDK this runtime was built with (one per build:
// both define nvinfer1), or a refusal naming the engine's kind and how to build for it.
Result<std::unique_ptr<Engine>> create_tensorrt(const BlobInfo& info, Reason& why) {
  const bool rtx = info.engine_kind == EngineKind::TensorRTRTX;
#if defined(TTE_HAVE_TENSORRT)
#if defined(TTE_TENSORRT_SDK_RTX)
  const bool built_for = rtx;
#else
  const bool built_for = !rtx;
#endif
  if (built_for) {
    auto api = open_tensorrt_sdk(info, why);
    if (!api.ok()) return api.error();
    return create_tensorrt_engine_over(std::move(api.get()), info, why);
  }
#endif
  return why.fail(
      Error::NotSupported, "engine.not_compiled",
      std::string(info.magic) + " blob holds a " + (rtx ? "TensorRT-RTX" : "TensorRT") +
          " engine, but this runtime was built without " + (rtx ? "TensorRT-RTX" : "TensorRT") +
          " (engines: " + compiled_engines() + "); rebuild with " +
          (rtx ? "the TensorRT-RTX SDK (TENSORRT_RTX_ROOT=<its folder> scripts/build_runtime.sh)"
               : "TensorRT found (TENSORRT_ROOT)") +
          " or export with the reference engine");
}

}  // namespace

Result<std::unique_ptr<Engine>> create_engine(const BlobInfo& info, Reason& why) {
  switch (info.engine_kind) {
    case EngineKind::Reference: return create_reference_engine(info, why);
    case EngineKind::TensorRT:
    case EngineKind::TensorRTRTX: return create_tensorrt(info, why);
  }
  return why.fail(Error::NotSupported, "engine.unknown_kind", "unknown engine kind");
}

}  // namespace tte
