// The runtime library's C API for Python's ctypes (CONTRACTS.md §4).
//
// Invariant: the counter, version and refusal functions never fail, never allocate, never lock
// and never throw (they are noexcept: no C++ exception can cross into C); an unknown or null
// `fqn` reads 0. The returned version string is a compile-time constant; the refusal string is
// the calling thread's (valid until its next refusal or clear), the check id a string constant.
// `tte_runtime_check_blob` runs the runtime's blob reader (it allocates while reading) and
// catches everything it could throw.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define TTE_C_NOEXCEPT noexcept
extern "C" {
#else
#define TTE_C_NOEXCEPT
#endif

uint64_t tte_runtime_copy_bytes(const char* fqn) TTE_C_NOEXCEPT;
// The same bytes split by where they went: path 0 within device memory, 1 across the host-device
// link (PCIe), 2 within host memory; 0 for any other path. The three sum to the total.
uint64_t tte_runtime_copy_bytes_by_path(const char* fqn, int path) TTE_C_NOEXCEPT;
uint64_t tte_runtime_execute_count(void) TTE_C_NOEXCEPT;
void tte_runtime_reset_counters(void) TTE_C_NOEXCEPT;
const char* tte_runtime_version(void) TTE_C_NOEXCEPT;
// The last refusal (init or execute) of a TensorRTBackend delegate on the calling thread, with
// its reason and the delegate it concerns; "" when none since the last clear.
const char* tte_runtime_last_refusal(void) TTE_C_NOEXCEPT;
// The stable check id of that refusal (docs/CONTRACTS.md §1 "Check ids", e.g.
// "json.duplicate_key", "execute.nbytes"); "" when none since the last clear.
const char* tte_runtime_last_check(void) TTE_C_NOEXCEPT;
void tte_runtime_clear_last_refusal(void) TTE_C_NOEXCEPT;
// Reads a delegate blob as `init` does before creating the engine (parse, integrity, validate,
// binding plan): 0 when accepted, else the ExecuTorch error code, with the reason written into
// `why` (cut to `why_size` bytes, NUL-terminated; `why` may be null). It is also recorded as the
// thread's last refusal (text and check id, not logged); an accepted blob clears both.
int tte_runtime_check_blob(const void* data, size_t size, char* why,
                           size_t why_size) TTE_C_NOEXCEPT;
// The writes into input bindings the runtime's binding plan for this blob makes per call (what
// `execute` will do, read from the same plan): one line per write, "<input binding>\t<buffer
// FQN or empty>\t<in_place|copy>\t<output binding>\n", written into `out`. 0 when the blob is
// accepted and the text fits `out_size` (else InvalidArgument; `out` then holds what fits); a
// refused blob returns its error code with the reason in `out`. Records no refusal.
int tte_runtime_blob_writes(const void* data, size_t size, char* out,
                            size_t out_size) TTE_C_NOEXCEPT;

// ExecuTorch's log emitter as this runtime routes it (Python's log_sink installs it): errors and
// fatal lines always on stderr, informational and debug lines only after tte_runtime_log_info(1)
// (the commands' --verbose). The signature of ExecuTorch's et_pal_emit_log_message.
void tte_runtime_log_info(int enabled) TTE_C_NOEXCEPT;

// Chooses the process's device (tte/device.h `use_device`): "cuda", "emulated", "auto" or
// "none". 0 when in force, else the ExecuTorch error code with the reason written into `why`.
int tte_runtime_use_device(const char* kind, char* why, size_t why_size) TTE_C_NOEXCEPT;
// The device in force ("cuda:0", "emulated"), or "".
const char* tte_runtime_device_name(void) TTE_C_NOEXCEPT;

// ---- Programs (the loader behind tte.executorch.load and torch_tensorrt.load): a `.pte` loaded
// through ExecuTorch's Module API with every method loaded at open, state in device memory where
// the program placed it (the device in force; tte_runtime_use_device), initial values put there
// through the device. Functions returning int return 0 or an ExecuTorch error code, with the
// reason written into `why` (may be null). Not thread-safe per program; distinct programs run
// in distinct threads at once (a call takes no process-wide lock: the counters are atomics, the
// refusal and the copy tally the calling thread's), which is how Python threads run in parallel
// (ctypes releases the GIL for the call).
typedef struct tte_program tte_program;

// One value in or out of a method. kind: 0 tensor, 1 int, 2 double, 3 bool, 4 none. A tensor's
// `data` is host memory on the way in; on the way out it may be device memory (read it with
// tte_runtime_copy). `sizes` holds `ndim` entries (at most 16).
typedef struct tte_value {
  int32_t kind;
  int32_t dtype;  // ExecuTorch ScalarType code
  int32_t ndim;
  int64_t sizes[16];
  void* data;
  size_t nbytes;
  int64_t i;
  double d;
} tte_value;

tte_program* tte_program_open(const char* path, int* code, char* why,
                              size_t why_size) TTE_C_NOEXCEPT;
// The same with an external data file (`.ptd`, ExecuTorch's FlatTensor: the engine weights saved
// beside the program with save_data_externally); `data_path` NULL or "" for none.
tte_program* tte_program_open_with_data(const char* path, const char* data_path, int* code,
                                        char* why, size_t why_size) TTE_C_NOEXCEPT;
void tte_program_close(tte_program* p) TTE_C_NOEXCEPT;
size_t tte_program_method_count(const tte_program* p) TTE_C_NOEXCEPT;
const char* tte_program_method_name(const tte_program* p, size_t i) TTE_C_NOEXCEPT;
// What input `i` of `method` takes (a tensor's dtype, sizes and nbytes; `data` null), from its
// signature.
size_t tte_program_input_count(const tte_program* p, const char* method) TTE_C_NOEXCEPT;
int tte_program_input(const tte_program* p, const char* method, size_t i,
                      tte_value* out) TTE_C_NOEXCEPT;
// Runs `method` once; its outputs stay readable (tte_program_output) until its next run. It
// clears the calling thread's last refusal first: what tte_runtime_last_refusal says after it
// is this call's (another thread's calls never touch it).
int tte_program_execute(tte_program* p, const char* method, const tte_value* inputs,
                        size_t n_inputs, size_t* n_outputs, char* why,
                        size_t why_size) TTE_C_NOEXCEPT;
int tte_program_output(const tte_program* p, const char* method, size_t j,
                       tte_value* out) TTE_C_NOEXCEPT;
// The method's mutable buffers (ExecuTorch attribute tensors, named by FQN): count, then each.
size_t tte_program_buffer_count(const tte_program* p, const char* method) TTE_C_NOEXCEPT;
int tte_program_buffer(const tte_program* p, const char* method, size_t i, const char** fqn,
                       tte_value* out) TTE_C_NOEXCEPT;
// Bytes the runtime copied for buffer `fqn` (keyed as tte_runtime_copy_bytes) in this program's
// successful calls of `method` since it was opened, split by path as
// tte_runtime_copy_bytes_by_path: this program's own, whatever other programs (other threads)
// copy meanwhile. 0 for an unknown method, fqn or path. Never fails, allocates or locks.
uint64_t tte_program_copy_bytes(const tte_program* p, const char* method, const char* fqn,
                                int path) TTE_C_NOEXCEPT;
// Every mutable buffer of every method back to its initial value (read again from the program,
// written through the device where it lives); no reload.
int tte_program_reset(tte_program* p, char* why, size_t why_size) TTE_C_NOEXCEPT;
// What the loader says once about how it loaded the program ("" when nothing): a multi-method
// file whose state lies in the activation memory every method reuses is loaded with one set of
// arenas per method, and this names the method and buffer.
const char* tte_program_notice(const tte_program* p) TTE_C_NOEXCEPT;
// Copies between any two addresses, host or device memory of the device in force.
int tte_runtime_copy(void* dst, const void* src, size_t nbytes) TTE_C_NOEXCEPT;

#ifdef __cplusplus
}
#endif
