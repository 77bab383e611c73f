// Engine factory: picks the implementation for a blob's engine_kind; see engine.h.
#include "engine.h"
#include "reference_engine.h"
#ifdef TTE_HAVE_TENSORRT
#include "tensorrt_engine.h"
#endif

#ifndef TTE_ENGINES
#define TTE_ENGINES "reference"
#endif

namespace tte {

const char* compiled_engines() { return TTE_ENGINES; }

Result<std::unique_ptr<Engine>> create_engine(const BlobInfo& info, Reason& why) {
  switch (info.engine_kind) {
    case EngineKind::Reference: return create_reference_engine(info, why);
    case EngineKind::TensorRT:
#ifdef TTE_HAVE_TENSORRT
      return create_tensorrt_engine(info, why);
#else
      return why.fail(Error::NotSupported, "engine.not_compiled",
                      std::string(info.magic) +
                          " blob holds a TensorRT engine, but this runtime was built without "
                          "TensorRT (engines: " +
                          compiled_engines() +
                          "); rebuild with TensorRT found (TENSORRT_ROOT) or export with the "
                          "reference engine");
#endif
  }
  return why.fail(Error::NotSupported, "engine.unknown_kind", "unknown engine kind");
}

}  // namespace tte
