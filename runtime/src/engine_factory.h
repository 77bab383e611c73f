// The engine factory: the engine for a blob's engine_kind. In a file of its own, so the engine
// interface (engine.h) includes no engine: the engines include it, the factory includes them.
#pragma once

#include "engine.h"

#include <memory>

namespace tte {

// The engine for `info.engine_kind` over the payload `info.engine`/`engine_size`; fails with
// Error::NotSupported (engine.not_compiled) when that kind was not compiled into this runtime.
Result<std::unique_ptr<Engine>> create_engine(const BlobInfo& info, Reason& why);

}  // namespace tte
