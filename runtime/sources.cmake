# The runtime's sources (without the TensorRT SDK adapter and the CUDA device, which
# runtime/CMakeLists.txt adds when TensorRT / CUDA are found): libtte_runtime (runtime/CMakeLists.txt) and the fuzz harnesses
# (runtime/fuzz/CMakeLists.txt) both compile exactly these. Absolute paths, so either may include
# this file from its own directory.
set(TTE_RUNTIME_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/dtype.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/blob_json.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/blob.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/blob_metadata.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/blob_integrity.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/blob_validate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/binding_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/counters.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/engine_factory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/device_api.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/emulated_device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/reference_engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/scratch_arena.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/engine_weights.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/shared_loads.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/shared_plans.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/tensorrt_engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/payload_check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/refusal.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/abort_guard.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/sha256.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/kv_cache_update.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/executor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/c_api.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/shared_arenas.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/host_arenas.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/program_api.cpp
)
