// tte_run: step a `.pte` through ExecuTorch's Module API with this runtime's delegate and device.
//
//   tte_run MODEL.pte --io DIR [--method forward] [--steps N] [--device auto|cuda|emulated|none]
//           [--loader device-aware|executorch] [--stream]
//
// Step s reads input i from DIR/in.<s>.<i>.bin (raw bytes, the method's input dtype and shape)
// and writes output j to DIR/out.<s>.<j>.bin. State persists across steps, as in an app. The last
// line printed is JSON: the device, the steps run, and the bytes this runtime copied per buffer
// (`copy_bytes`) and staged by a device-mode reference engine (`staging_bytes`). `--stream` runs
// every copy and enqueue on a caller-created non-blocking CUDA stream (tte::use_stream), as an
// application that pipelines its own GPU work would.
//
// Invariant: state lives where the program placed it: device arenas come from the device in force
// (ExecuTorch's DeviceAllocator), initial values reach them through it (tte::device_aware), and an
// output in device memory is read through it. A program with device arenas and no device is
// refused before anything is allocated, naming the method, arena and device. `--loader
// executorch` loads with ExecuTorch's own FileDataLoader instead, which writes initial values
// into device arenas with host code: on the emulated device that is the fault this project's
// tests prove is caught (on a GPU, a crash). Exit codes: 0 ok, 2 usage, 3 refused/failed (the
// reason on stderr).
#include <tte/device.h>

#include "counters.h"
#include "device.h"
#include "reference_engine.h"
#include "refusal.h"

#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/platform/runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using executorch::extension::FileDataLoader;
using executorch::extension::Module;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::MethodMeta;
using executorch::runtime::Tag;

namespace {

constexpr const char* kUsage =
    "usage: tte_run MODEL.pte --io DIR [--method NAME] [--steps N] "
    "[--device auto|cuda|emulated|none] [--loader device-aware|executorch] [--stream]\n";

int fail(const std::string& msg) {
  std::fprintf(stderr, "tte_run: %s\n", msg.c_str());
  return 3;
}

bool read_file(const std::string& path, std::vector<uint8_t>& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

bool write_file(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  return static_cast<bool>(f);
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

// Refuses a method whose arenas need a device when none is in force.
std::string device_arena_problem(const MethodMeta& meta) {
  for (size_t i = 0; i < meta.num_memory_planned_buffers(); ++i) {
    auto dev = meta.memory_planned_buffer_device(i);
    if (!dev.ok() || dev->is_cpu() || tte::active_device() != nullptr) continue;
    std::string names;
    for (size_t a = 0; a < meta.num_attributes(); ++a) {
      auto ti = meta.attribute_tensor_meta(a);
      if (ti.ok()) names += (names.empty() ? "'" : ", '") + std::string(ti->name()) + "'";
    }
    return tte::format(
        "method '%s': memory arena %zu (%lld bytes) lives on cuda:%d, where the program keeps "
        "its state (its buffers: %s), but no device is in force: run on a GPU machine with "
        "--device cuda (or --device emulated to test on CPU)",
        meta.name(), i, static_cast<long long>(meta.memory_planned_buffer_size(i).get()),
        static_cast<int>(dev->index()), names.empty() ? "none named" : names.c_str());
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  std::string pte, io, method = "forward", device = "auto", loader_kind = "device-aware";
  long steps = 1;
  bool stream = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= argc) return false;
      into = argv[++i];
      return true;
    };
    std::string n;
    bool ok = true;
    if (a == "--io")
      ok = value(io);
    else if (a == "--method")
      ok = value(method);
    else if (a == "--device")
      ok = value(device);
    else if (a == "--loader")
      ok = value(loader_kind);
    else if (a == "--stream")
      stream = true;
    else if (a == "--steps") {
      ok = value(n);
      if (ok) steps = std::strtol(n.c_str(), nullptr, 10);
    } else if (!a.empty() && a[0] != '-' && pte.empty())
      pte = a;
    else
      ok = false;
    if (!ok) {
      std::fprintf(stderr, kUsage);
      return 2;
    }
  }
  if (pte.empty() || io.empty() || steps < 1 ||
      (loader_kind != "device-aware" && loader_kind != "executorch")) {
    std::fprintf(stderr, kUsage);
    return 2;
  }
  executorch::runtime::runtime_init();
  std::string why;
  if (tte::use_device(device.c_str(), why) != 0) return fail("--device " + device + ": " + why);
  if (stream) {
    void* s = tte::new_stream(why);  // the caller's: non-blocking, as an app's own would be
    if (s == nullptr || tte::use_stream(s, why) != 0) return fail("--stream: " + why);
  }

  auto loader = FileDataLoader::from(pte.c_str());
  if (!loader.ok()) return fail(pte + ": cannot open");
  std::unique_ptr<executorch::runtime::DataLoader> file =
      std::make_unique<FileDataLoader>(std::move(loader.get()));
  Module module(loader_kind == "executorch" ? std::move(file) : tte::device_aware(std::move(file)));
  if (module.load() != Error::Ok) return fail(pte + ": ExecuTorch refused the program");
  auto meta = module.method_meta(method);
  if (!meta.ok()) return fail(pte + ": no method '" + method + "'");
  const std::string problem = device_arena_problem(meta.get());
  if (!problem.empty()) return fail(pte + ": " + problem);
  tte::clear_refusal();
  if (module.load_method(method) != Error::Ok) {
    return fail(pte + ": loading method '" + method + "' failed: " + tte::last_refusal());
  }

  std::vector<std::string> buffers;
  for (size_t a = 0; a < meta->num_attributes(); ++a) {
    auto ti = meta->attribute_tensor_meta(a);
    if (ti.ok()) buffers.emplace_back(ti->name());
  }
  tte::reset_counters();
  for (long s = 0; s < steps; ++s) {
    std::vector<std::vector<uint8_t>> data(meta->num_inputs());
    std::vector<executorch::extension::TensorPtr> tensors;
    std::vector<EValue> inputs;
    for (size_t i = 0; i < meta->num_inputs(); ++i) {
      auto tag = meta->input_tag(i);
      auto ti = meta->input_tensor_meta(i);
      if (!tag.ok() || tag.get() != Tag::Tensor || !ti.ok()) {
        return fail(tte::format("input %zu of '%s' is not a tensor", i, method.c_str()));
      }
      const std::string path = tte::format("%s/in.%ld.%zu.bin", io.c_str(), s, i);
      if (!read_file(path, data[i])) return fail("cannot read " + path);
      if (data[i].size() != ti->nbytes()) {
        return fail(tte::format("%s has %zu bytes; input %zu takes %zu", path.c_str(),
                                data[i].size(), i, ti->nbytes()));
      }
      std::vector<executorch::aten::SizesType> sizes(ti->sizes().begin(), ti->sizes().end());
      tensors.push_back(
          executorch::extension::make_tensor_ptr(sizes, data[i].data(), ti->scalar_type()));
      inputs.emplace_back(*tensors.back());
    }
    tte::clear_refusal();
    auto outs = module.execute(method, inputs);
    if (!outs.ok()) {
      return fail(tte::format("step %ld: '%s' failed (error 0x%x): %s", s, method.c_str(),
                              static_cast<unsigned>(outs.error()), tte::last_refusal()));
    }
    for (size_t j = 0; j < outs->size(); ++j) {
      const EValue& v = outs.get()[j];
      if (!v.isTensor()) continue;
      const auto& t = v.toTensor();
      std::vector<uint8_t> host(t.nbytes());
      if (tte::copy_any(host.data(), t.const_data_ptr(), t.nbytes()) != Error::Ok) {
        return fail(tte::format("step %ld: cannot read output %zu", s, j));
      }
      const std::string path = tte::format("%s/out.%ld.%zu.bin", io.c_str(), s, j);
      if (!write_file(path, host.data(), host.size())) return fail("cannot write " + path);
    }
  }
  std::string copies;
  for (const std::string& b : buffers) {
    copies += tte::format("%s\"%s\": %llu", copies.empty() ? "" : ", ", json_escape(b).c_str(),
                          static_cast<unsigned long long>(tte::copied_bytes(b.c_str())));
  }
  std::printf(
      "{\"device\": \"%s\", \"stream\": %s, \"steps\": %ld, \"copy_bytes\": {%s}, "
      "\"staging_bytes\": %llu}\n",
      tte::device_name(), stream ? "\"caller\"" : "null", steps, copies.c_str(),
      static_cast<unsigned long long>(tte::copied_bytes(tte::kDeviceStagingCounter)));
  return 0;
}
