// Binding dtypes of the blob (CONTRACTS.md §1): the one table of the runtime.
//
// Invariant: every dtype name, element size, ExecuTorch scalar type and TensorRT data type the
// runtime uses comes from the table in dtype.cpp — the same names and element sizes as python's
// torch_tensorrt_ext.contracts.dtypes; a name not in it is refused by the blob reader, a
// TensorRT type not in it has no binding dtype.
#pragma once

#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tte {

enum class DType : uint8_t { Float32, Float16, BFloat16, Int64, Int32, Int8, UInt8, Bool, Float64 };

// false when `name` is not a known dtype (compared whole: a NUL inside does not end it).
bool dtype_from_name(const std::string& name, DType& out);
// `trt` is a nvinfer1::DataType value (tensorrt_engine.cpp checks the numbering against
// NvInferRuntimeBase.h); false for a TensorRT type no binding carries (FP8, INT4, ...).
bool dtype_from_trt(int32_t trt, DType& out);
const char* dtype_name(DType d);
size_t dtype_size(DType d);
executorch::aten::ScalarType dtype_scalar_type(DType d);
// "float32, float16, ..." (for messages; allocates).
std::string dtype_known_names();

// nvinfer1::DataType's numbering (TensorRT 10) of the types in the table; -1: none.
namespace trt_type {
constexpr int32_t kFloat = 0, kHalf = 1, kInt8 = 2, kInt32 = 3, kBool = 4, kUInt8 = 5, kBF16 = 7,
                  kInt64 = 8, kNone = -1;
}  // namespace trt_type

}  // namespace tte
