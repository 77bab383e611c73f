// The engine interface's defaults (engine.h); the factory is engine_factory.cpp.
#include "engine.h"
#include "refusal.h"

#ifndef TTE_ENGINES
#define TTE_ENGINES "reference"
#endif

namespace tte {

const char* compiled_engines() { return TTE_ENGINES; }

Error Engine::set_input_shape(size_t binding, const int32_t*, size_t) {
  refuse("execute.dynamic_shape",
         "TensorRTBackend: the %s engine runs static shapes only, and input binding %zu has a "
         "dynamic dimension",
         kind(), binding);
  return Error::NotSupported;
}

}  // namespace tte
