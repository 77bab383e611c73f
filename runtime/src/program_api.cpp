// The program loader of tte/c_api.h (tte_program_*): the one loader behind Python's
// tte.executorch.load / torch_tensorrt.load and the runner's.
//
// Invariant: a program is loaded through ExecuTorch's Module API over a device-aware loader
// (device_loader.h), every method at open (loading a method writes its buffers' initial values,
// which must not wipe state another method advanced). Host-only programs of several methods share
// their arenas as ExecuTorch's Module(share_memory_arenas=True) does (host_arenas.h), so a buffer
// written by one method is read by the others, as in eager — unless a method's state lies in the
// activation arena every method reuses (a file saved before state had arenas of its own): then
// each method gets arenas of its own, and `notice` says so, naming the buffer; a program with
// device arenas shares the state arenas it records (shared_arenas.h: one allocation per arena,
// checked after each method loads), which ExecuTorch 1.5.1's Module cannot.
// Nothing here throws across the C boundary.
#include <tte/c_api.h>

#include "common.h"
#include "counters.h"
#include "device.h"
#include "device_loader.h"
#include "host_arenas.h"
#include "refusal.h"
#include "shared_arenas.h"

#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/platform/runtime.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#define TTE_EXPORT __attribute__((visibility("default")))

using executorch::extension::MallocMemoryAllocator;
using executorch::extension::MmapDataLoader;
using executorch::extension::Module;
using executorch::extension::TensorPtr;
using executorch::runtime::EValue;
using executorch::runtime::Method;
using executorch::runtime::Program;

struct tte_program {
  std::unique_ptr<tte::DeviceAwareLoader> loader;
  std::shared_ptr<Program> program;
  std::unique_ptr<tte::SharedArenas> shared;  // before `module`: its methods use these arenas
  std::unique_ptr<tte::HostArenas> host;      // a host-only program's shared arenas, or none
  std::unique_ptr<Module> module;
  std::string notice;  // said once at open: how the program was loaded
  std::vector<std::string> methods;
  std::map<std::string, std::vector<EValue>> outputs;          // the last run's, per method
  std::map<std::string, std::vector<std::string>> buffers;     // attribute names, per method
  std::map<std::string, tte::CopyTally, std::less<>> tallies;  // per method: its copies
};

namespace {

using tte::Error;

int say(Error e, const std::string& text, char* why, size_t why_size) {
  if (why != nullptr && why_size > 0) std::snprintf(why, why_size, "%s", text.c_str());
  return static_cast<int>(e);
}

bool describe(const EValue& v, tte_value* out) {
  *out = tte_value{};
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (t.dim() > 16) return false;
    out->kind = 0;
    out->dtype = static_cast<int32_t>(t.scalar_type());
    out->ndim = static_cast<int32_t>(t.dim());
    for (ssize_t k = 0; k < t.dim(); ++k) out->sizes[k] = t.size(k);
    out->data = const_cast<void*>(t.const_data_ptr());
    out->nbytes = t.nbytes();
  } else if (v.isInt()) {
    out->kind = 1;
    out->i = v.toInt();
  } else if (v.isDouble()) {
    out->kind = 2;
    out->d = v.toDouble();
  } else if (v.isBool()) {
    out->kind = 3;
    out->i = v.toBool();
  } else {
    out->kind = 4;
  }
  return true;
}

// Module::method is the only way to a loaded Method (its attributes are the mutable buffers);
// ExecuTorch 1.5.1 marks it deprecated without a replacement.
Method* method_of(const tte_program* p, const char* name) {
  if (p == nullptr || name == nullptr) return nullptr;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  auto m = p->module->method(name);  // loaded at open: a lookup
#pragma GCC diagnostic pop
  return m.ok() ? m.get() : nullptr;
}

// ExecuTorch's runtime_init (a C++ app may not have called it) sets its PAL's state with no
// lock: once, whichever thread opens a program first.
void init_runtime_once() {
  static std::once_flag once;
  std::call_once(once, [] { executorch::runtime::runtime_init(); });
}

// The names of `meta`'s buffers, quoted, for a message.
std::string buffer_names(const executorch::runtime::MethodMeta& meta) {
  std::string names;
  for (size_t a = 0; a < meta.num_attributes(); ++a) {
    auto ti = meta.attribute_tensor_meta(a);
    if (ti.ok()) names += (names.empty() ? "'" : ", '") + std::string(ti->name()) + "'";
  }
  return names.empty() ? "none named" : names;
}

// Each method's name and buffers into `p`; `device_arenas` when any plans memory on a device
// (refused without a device in force, naming the method, the arena and its buffers).
Error read_methods(tte_program* p, bool& device_arenas, std::string& text) {
  for (size_t i = 0; i < p->program->num_methods(); ++i) {
    auto name = p->program->get_method_name(i);
    if (!name.ok()) {
      text = "Failed to read the method names";
      return name.error();
    }
    p->methods.emplace_back(name.get());
    auto meta = p->program->method_meta(name.get());
    if (!meta.ok()) {
      text = "Failed to read method " + p->methods.back();
      return meta.error();
    }
    for (size_t b = 0; b < meta->num_memory_planned_buffers(); ++b) {
      auto dev = meta->memory_planned_buffer_device(b);
      if (!dev.ok() || dev->is_cpu()) continue;
      device_arenas = true;
      if (tte::active_device() == nullptr) {
        text = tte::format(
            "method '%s': memory arena %zu lives on cuda:%d, where the program "
            "keeps its state (its buffers: %s), but no device is in force: load "
            "it on a GPU machine (device 'cuda'), or with the emulated device to "
            "test on CPU",
            p->methods.back().c_str(), b, static_cast<int>(dev->index()),
            buffer_names(meta.get()).c_str());
        return Error::NotSupported;
      }
    }
    for (size_t a = 0; a < meta->num_attributes(); ++a) {
      auto ti = meta->attribute_tensor_meta(a);
      if (ti.ok()) p->buffers[p->methods.back()].emplace_back(ti->name());
    }
  }
  return Error::Ok;
}

// `m`'s planned memory: the recorded state arenas, a host program's shared arenas, or Module's.
tte::Result<executorch::runtime::HierarchicalAllocator*> planned_memory(tte_program* p,
                                                                        const std::string& m,
                                                                        std::string& text) {
  tte::Reason reason;
  if (p->shared != nullptr) {
    auto memory = p->shared->memory_for(*p->program, m, reason);
    if (!memory.ok()) text = reason.text;
    return memory;
  }
  if (p->host != nullptr) return p->host->memory_for(*p->program, m);
  return static_cast<executorch::runtime::HierarchicalAllocator*>(nullptr);
}

// Every method loaded into `p->module`, in the shared arenas' memory where the program has them.
Error load_methods(tte_program* p, std::string& text) {
  tte::Reason reason;
  for (const std::string& m : p->methods) {
    auto memory = planned_memory(p, m, text);
    if (!memory.ok()) return memory.error();
    executorch::runtime::HierarchicalAllocator* planned = memory.get();
    const Error e = p->module->load_method(m, planned);
    if (e != Error::Ok) {
      text =
          tte::format("Failed to load method %s, error: 0x%x", m.c_str(), static_cast<unsigned>(e));
      return e;
    }
    if (p->shared != nullptr) {
      const Error placed = p->shared->check(*method_of(p, m.c_str()), m, reason);
      if (placed != Error::Ok) {
        text = reason.text;
        return placed;
      }
    }
  }
  return Error::Ok;
}

// The mutable buffer some method keeps in the activation arena all methods share, as
// "method 'm' keeps buffer 'b'"; "" when every method's state has memory of its own.
std::string state_in_shared_scratch(tte_program* p) {
  for (const std::string& m : p->methods) {
    auto meta = p->program->method_meta(m.c_str());
    if (!meta.ok()) continue;
    const std::string fqn = p->host->state_in_scratch(*method_of(p, m.c_str()), meta.get());
    if (!fqn.empty()) return "method '" + m + "' keeps buffer '" + fqn + "'";
  }
  return "";
}

// A non-owning view of the program's loader for ExecuTorch's Module: built from a loader, the
// Module loads the external data file it is handed (built over an already loaded Program, as
// ExecuTorch 1.5.1's Module::load skips the data file), and every segment still goes through the
// one device-aware loader that records the buffers' initial values.
class ForwardingLoader final : public executorch::runtime::DataLoader {
 public:
  explicit ForwardingLoader(const executorch::runtime::DataLoader& inner) : inner_(inner) {}
  tte::Result<executorch::runtime::FreeableBuffer> load(size_t offset, size_t size,
                                                        const SegmentInfo& info) const override {
    return inner_.load(offset, size, info);
  }
  Error load_into(size_t offset, size_t size, const SegmentInfo& info,
                  void* buffer) const override {
    return inner_.load_into(offset, size, info, buffer);
  }
  tte::Result<size_t> size() const override { return inner_.size(); }

 private:
  const executorch::runtime::DataLoader& inner_;
};

// The external data file's loader (a .ptd, mapped like the program), nullptr without one.
tte::Result<std::unique_ptr<executorch::runtime::DataLoader>> data_loader(const char* data_path) {
  if (data_path == nullptr || *data_path == '\0') {
    return std::unique_ptr<executorch::runtime::DataLoader>();
  }
  auto file = MmapDataLoader::from(data_path, MmapDataLoader::MlockConfig::NoMlock);
  if (!file.ok()) return file.error();
  // device-aware like the program's: one mapping per weight however many methods read it
  return std::unique_ptr<executorch::runtime::DataLoader>(std::make_unique<tte::DeviceAwareLoader>(
      std::make_unique<MmapDataLoader>(std::move(file.get()))));
}

// `p->module` over the program's loader, every method loaded. A temp allocator for kernels that
// ask for scratch (ExecuTorch's llama::gated_delta_rule does; without one it logs "No temp
// allocator provided" once per call and falls back). The data file's named data (engine weights)
// reaches each delegate's init context merged with the program's own. Arenas are shared by
// `planned_memory`, never by the Module.
Error load_module(tte_program* p, const char* data_path, std::string& text) {
  auto data = data_loader(data_path);
  if (!data.ok()) {
    text = tte::format("Failed to open the data file '%s'", data_path);
    return data.error();
  }
  p->module = std::make_unique<Module>(std::make_unique<ForwardingLoader>(*p->loader), nullptr,
                                       std::make_unique<MallocMemoryAllocator>(), nullptr,
                                       std::move(data.get()), /*share_memory_arenas=*/false);
  return load_methods(p, text);
}

tte_program* open_program(const char* path, const char* data_path, int* code, char* why,
                          size_t why_size) {
  init_runtime_once();
  auto fail = [&](Error e, const std::string& text) -> tte_program* {
    if (code) *code = say(e, text, why, why_size);
    return nullptr;
  };
  // Mapped, not read: a delegate's engine bytes are paged in once, where its digest is checked
  // and its engine deserializes them (no second copy through a read buffer).
  auto file = MmapDataLoader::from(path, MmapDataLoader::MlockConfig::NoMlock);
  if (!file.ok()) return fail(file.error(), "Failed to open the file");
  auto p = std::make_unique<tte_program>();
  p->loader = std::make_unique<tte::DeviceAwareLoader>(
      std::make_unique<MmapDataLoader>(std::move(file.get())));
  auto program = Program::load(p->loader.get(), Program::Verification::InternalConsistency);
  if (!program.ok()) {
    return fail(program.error(), tte::format("Failed to load program, error: 0x:%x",
                                             static_cast<unsigned>(program.error())));
  }
  p->program = std::make_shared<Program>(std::move(program.get()));
  bool device_arenas = false;
  std::string text;
  if (Error e = read_methods(p.get(), device_arenas, text); e != Error::Ok) return fail(e, text);
  tte::Reason reason;
  const Error shared = tte::SharedArenas::open(*p->program, p->shared, reason);
  if (shared != Error::Ok) return fail(shared, reason.text);
  if (!device_arenas && p->shared == nullptr && p->methods.size() > 1) {
    auto host = tte::HostArenas::make(*p->program);
    if (!host.ok()) return fail(host.error(), "Failed to size the arenas the methods share");
    p->host = std::move(host.get());
  }
  if (Error e = load_module(p.get(), data_path, text); e != Error::Ok) return fail(e, text);
  if (p->host != nullptr) {
    const std::string where = state_in_shared_scratch(p.get());
    if (!where.empty()) {
      p->notice = where +
                  " in the activation memory every method reuses (a file saved before each "
                  "program's state had memory of its own): sharing it would let any other "
                  "method's call overwrite it, so each method keeps its own copy of the state "
                  "and no method sees another's writes. Save the program again to share state";
      p->module.reset();  // its methods, first: they use the arenas and the loader's records
      p->host.reset();
      p->loader->forget_initial_values();
      if (Error e = load_module(p.get(), data_path, text); e != Error::Ok) return fail(e, text);
    }
  }
  if (code) *code = 0;
  return p.release();
}

// Every method's copy tally, sized once its delegates (and their counters) exist.
tte_program* with_tallies(std::unique_ptr<tte_program> p, int* code, char* why, size_t why_size) {
  for (const std::string& m : p->methods) {
    if (!p->tallies[m].size_to_counters()) {
      if (code) *code = say(Error::MemoryAllocationFailed, "out of memory", why, why_size);
      return nullptr;
    }
  }
  return p.release();
}

int execute(tte_program* p, const char* method, const tte_value* inputs, size_t n,
            size_t* n_outputs, char* why, size_t why_size) {
  tte::clear_refusal();  // a refusal read after this call is this call's
  if (method_of(p, method) == nullptr) {
    return say(Error::InvalidArgument, std::string("no method ") + (method ? method : "?"), why,
               why_size);
  }
  std::vector<TensorPtr> tensors;
  std::vector<EValue> args;
  tensors.reserve(n);
  args.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const tte_value& v = inputs[i];
    if (v.kind == 0) {
      std::vector<executorch::aten::SizesType> sizes(v.sizes, v.sizes + v.ndim);
      tensors.push_back(executorch::extension::make_tensor_ptr(
          sizes, v.data, static_cast<executorch::aten::ScalarType>(v.dtype)));
      args.emplace_back(*tensors.back());
    } else if (v.kind == 1) {
      args.emplace_back(v.i);
    } else if (v.kind == 2) {
      args.emplace_back(v.d);
    } else if (v.kind == 3) {
      args.emplace_back(v.i != 0);
    } else {
      args.emplace_back();
    }
  }
  auto tallied = p->tallies.find(method);  // one per method, from open
  if (tallied == p->tallies.end()) return say(Error::InvalidState, "no tally", why, why_size);
  tte::CopyTally& tally = tallied->second;
  auto outs = [&] {
    tte::TallyScope counting(tally);
    return p->module->execute(method, args);
  }();
  if (!outs.ok()) {
    return say(outs.error(),
               tte::format("method->execute() failed with error 0x%x",
                           static_cast<unsigned>(outs.error())),
               why, why_size);
  }
  tally.end_call();
  auto& kept = p->outputs[method];
  kept = std::move(outs.get());
  if (n_outputs) *n_outputs = kept.size();
  return 0;
}

}  // namespace

extern "C" {

TTE_EXPORT tte_program* tte_program_open(const char* path, int* code, char* why,
                                         size_t why_size) noexcept {
  return tte_program_open_with_data(path, nullptr, code, why, why_size);
}

TTE_EXPORT tte_program* tte_program_open_with_data(const char* path, const char* data_path,
                                                   int* code, char* why, size_t why_size) noexcept {
  try {
    std::unique_ptr<tte_program> p(open_program(path, data_path, code, why, why_size));
    return p != nullptr ? with_tallies(std::move(p), code, why, why_size) : nullptr;
  } catch (...) {
    if (code) *code = say(Error::MemoryAllocationFailed, "out of memory", why, why_size);
    return nullptr;
  }
}

TTE_EXPORT void tte_program_close(tte_program* p) noexcept { delete p; }

TTE_EXPORT size_t tte_program_method_count(const tte_program* p) noexcept {
  return p ? p->methods.size() : 0;
}

TTE_EXPORT const char* tte_program_method_name(const tte_program* p, size_t i) noexcept {
  return p && i < p->methods.size() ? p->methods[i].c_str() : nullptr;
}

TTE_EXPORT int tte_program_execute(tte_program* p, const char* method, const tte_value* inputs,
                                   size_t n_inputs, size_t* n_outputs, char* why,
                                   size_t why_size) noexcept {
  try {
    return execute(p, method, inputs, n_inputs, n_outputs, why, why_size);
  } catch (...) {
    return say(Error::MemoryAllocationFailed, "out of memory", why, why_size);
  }
}

TTE_EXPORT size_t tte_program_input_count(const tte_program* p, const char* method) noexcept {
  if (p == nullptr || method == nullptr) return 0;
  auto meta = p->program->method_meta(method);
  return meta.ok() ? meta->num_inputs() : 0;
}

TTE_EXPORT int tte_program_input(const tte_program* p, const char* method, size_t i,
                                 tte_value* out) noexcept {
  if (p == nullptr || method == nullptr || out == nullptr) {
    return static_cast<int>(Error::InvalidArgument);
  }
  auto meta = p->program->method_meta(method);
  if (!meta.ok() || i >= meta->num_inputs()) return static_cast<int>(Error::InvalidArgument);
  *out = tte_value{};
  auto tag = meta->input_tag(i);
  if (!tag.ok()) return static_cast<int>(tag.error());
  using executorch::runtime::Tag;
  switch (tag.get()) {
    case Tag::Tensor: {
      auto ti = meta->input_tensor_meta(i);
      if (!ti.ok() || ti->sizes().size() > 16) return static_cast<int>(Error::NotSupported);
      out->kind = 0;
      out->dtype = static_cast<int32_t>(ti->scalar_type());
      out->ndim = static_cast<int32_t>(ti->sizes().size());
      for (size_t k = 0; k < ti->sizes().size(); ++k) out->sizes[k] = ti->sizes()[k];
      out->nbytes = ti->nbytes();
      return 0;
    }
    case Tag::Int: out->kind = 1; return 0;
    case Tag::Double: out->kind = 2; return 0;
    case Tag::Bool: out->kind = 3; return 0;
    default: out->kind = 4; return 0;
  }
}

TTE_EXPORT int tte_program_output(const tte_program* p, const char* method, size_t j,
                                  tte_value* out) noexcept {
  if (p == nullptr || method == nullptr || out == nullptr) {
    return static_cast<int>(Error::InvalidArgument);
  }
  auto it = p->outputs.find(method);
  if (it == p->outputs.end() || j >= it->second.size()) {
    return static_cast<int>(Error::InvalidArgument);
  }
  return describe(it->second[j], out) ? 0 : static_cast<int>(Error::NotSupported);
}

TTE_EXPORT size_t tte_program_buffer_count(const tte_program* p, const char* method) noexcept {
  if (p == nullptr || method == nullptr) return 0;
  auto it = p->buffers.find(method);
  return it == p->buffers.end() ? 0 : it->second.size();
}

TTE_EXPORT int tte_program_buffer(const tte_program* p, const char* method, size_t i,
                                  const char** fqn, tte_value* out) noexcept {
  Method* m = method_of(p, method);
  auto it = m ? p->buffers.find(method) : p->buffers.end();
  if (m == nullptr || it == p->buffers.end() || i >= it->second.size() || out == nullptr) {
    return static_cast<int>(Error::InvalidArgument);
  }
  auto t = m->get_attribute(it->second[i]);
  if (!t.ok()) return static_cast<int>(t.error());
  if (fqn) *fqn = it->second[i].c_str();
  return describe(EValue(t.get()), out) ? 0 : static_cast<int>(Error::NotSupported);
}

TTE_EXPORT uint64_t tte_program_copy_bytes(const tte_program* p, const char* method,
                                           const char* fqn, int path) noexcept {
  if (p == nullptr || method == nullptr || path < 0 || path > 2) return 0;
  auto it = p->tallies.find(method);
  return it == p->tallies.end() ? 0 : it->second.bytes(fqn, static_cast<tte::CopyPath>(path));
}

TTE_EXPORT int tte_program_reset(tte_program* p, char* why, size_t why_size) noexcept {
  if (p == nullptr) return static_cast<int>(Error::InvalidArgument);
  const Error e = p->loader->restore_initial_values();
  if (e != Error::Ok) {
    return say(
        e,
        tte::format("restoring the initial values failed (error 0x%x)", static_cast<unsigned>(e)),
        why, why_size);
  }
  return 0;
}

TTE_EXPORT const char* tte_program_notice(const tte_program* p) noexcept {
  return p != nullptr ? p->notice.c_str() : "";
}

TTE_EXPORT int tte_runtime_copy(void* dst, const void* src, size_t nbytes) noexcept {
  return static_cast<int>(tte::copy_any(dst, src, nbytes));
}

}  // extern "C"
