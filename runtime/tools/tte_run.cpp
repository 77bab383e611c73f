// tte_run: step a `.pte` with this runtime — the example runner of the runtime's CMake package.
//
//   tte_run MODEL.pte --io DIR [--method NAME] [--steps N] [--data MODEL.ptd]
//           [--device auto|cuda|emulated|none] [--stream] [--reset]
//
// `--data` is the external data file the engines' weights were saved to (save_data_externally);
// a program whose weights are missing from it is refused naming the key.
// Step s reads tensor input i from DIR/in.<s>.<i>.bin (raw bytes, the method's input dtype and
// shape — or, for a dynamic input, the shape in DIR/in.<s>.<i>.shape, "1,5,8") and writes
// tensor output j to DIR/out.<s>.<j>.bin. Step s runs the method named in DIR/method.<s> when that
// file exists (a prefill, then decodes), else --method. State persists across steps and methods,
// as in an app. `--stream` runs every copy and enqueue on a caller-created non-blocking CUDA stream
// (tte::use_stream), as an application that pipelines its own GPU work would. `--reset` then
// resets the program's state (tte_program_reset: every buffer back to its initial value, no
// reload) and runs the same steps again, which must give byte-identical outputs. The last line
// printed is JSON: the device, the stream, the steps run, the bytes this runtime copied per
// buffer of every method the steps ran (`copy_bytes`; `copy_paths`: [within device memory,
// across the host-device link, within host memory]), staged by a device-mode reference engine
// (`staging_bytes`), and whether the rerun after the reset was identical (`reset`).
//
// Without --method a step runs `forward`, or the program's only method; a program with several
// and no `forward` needs one named, by --method or DIR/method.<s> (the message lists them).
//
// Invariant: it uses only the runtime's public API (tte/c_api.h programs, tte/device.h), the one
// loader Python's tte.executorch.load uses too: state lives where the program placed it, on the
// device in force, and a program whose state needs a device is refused when there is none.
// Exit codes: 0 ok, 2 usage, 3 refused/failed (the reason on stderr), 4 the rerun differed.
#include <tte/c_api.h>
#include <tte/device.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: tte_run MODEL.pte --io DIR [--method NAME] [--steps N] [--data MODEL.ptd] "
    "[--device auto|cuda|emulated|none] [--stream] [--reset]\n";

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

bool write_file(const std::string& path, const std::vector<uint8_t>& data) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
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

std::string file_of(const std::string& io, const char* kind, long s, size_t k) {
  return io + "/" + kind + "." + std::to_string(s) + "." + std::to_string(k) + ".bin";
}

// A dynamic input's shape in step s: DIR/in.<s>.<i>.shape ("1,5,8"), when it exists; the tensor
// then takes that shape (same rank, as many bytes as the file holds). "" or an error text.
std::string read_shape(const std::string& io, long s, size_t i, tte_value& v, size_t nbytes) {
  const std::string path = io + "/in." + std::to_string(s) + "." + std::to_string(i) + ".shape";
  std::ifstream f(path);
  if (!f) return "";
  size_t numel = 1, old = 1;
  for (int32_t k = 0; k < v.ndim; ++k) old *= static_cast<size_t>(v.sizes[k]);
  int32_t rank = 0;
  for (std::string dim; std::getline(f, dim, ',');) {
    if (rank == v.ndim)
      return path + ": more dimensions than the input's " + std::to_string(v.ndim);
    v.sizes[rank] = std::strtoll(dim.c_str(), nullptr, 10);
    numel *= static_cast<size_t>(v.sizes[rank++]);
  }
  if (rank != v.ndim)
    return path + ": rank " + std::to_string(rank) + ", the input's is " + std::to_string(v.ndim);
  v.nbytes = old ? v.nbytes / old * numel : nbytes;
  return "";
}

bool has_method(const tte_program* p, const std::string& name) {
  for (size_t m = 0; m < tte_program_method_count(p); ++m) {
    if (name == tte_program_method_name(p, m)) return true;
  }
  return false;
}

// The method a step runs when none is named: `forward`, else the program's only one, else "".
std::string default_method(const tte_program* p) {
  if (has_method(p, "forward")) return "forward";
  return tte_program_method_count(p) == 1 ? tte_program_method_name(p, 0) : "";
}

// "'decode', 'prefill'": the program's methods, sorted, for a message.
std::string method_list(const tte_program* p) {
  std::vector<std::string> names;
  for (size_t m = 0; m < tte_program_method_count(p); ++m)
    names.emplace_back(tte_program_method_name(p, m));
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

// "" when `method` is one of the program's, else what is wrong, naming its methods.
std::string check_method(const tte_program* p, const std::string& method) {
  if (method.empty()) {
    return "no --method, and the program has no method 'forward' but " +
           std::to_string(tte_program_method_count(p)) + ": " + method_list(p) +
           "; name one with --method NAME (or DIR/method.<step>)";
  }
  if (!has_method(p, method)) return "no method '" + method + "'; it has " + method_list(p);
  return "";
}

// The method step s runs: DIR/method.<s> ("prefill"), when it exists, else `fallback`.
std::string method_of_step(const std::string& io, long s, const std::string& fallback) {
  std::ifstream f(io + "/method." + std::to_string(s));
  std::string name;
  return f && std::getline(f, name) && !name.empty() ? name : fallback;
}

// Runs steps [0, steps) and returns every step's tensor outputs (host bytes), or an error text.
std::string run_steps(tte_program* p, const std::string& fallback, const std::string& io,
                      long steps, std::vector<std::vector<std::vector<uint8_t>>>& outs) {
  char why[4096];
  for (long s = 0; s < steps; ++s) {
    const std::string method = method_of_step(io, s, fallback);
    if (std::string e = check_method(p, method); !e.empty())
      return "step " + std::to_string(s) + ": " + e;
    const size_t n_in = tte_program_input_count(p, method.c_str());
    std::vector<std::vector<uint8_t>> data(n_in);
    std::vector<tte_value> inputs(n_in);
    for (size_t i = 0; i < n_in; ++i) {
      if (tte_program_input(p, method.c_str(), i, &inputs[i]) != 0 || inputs[i].kind != 0) {
        return "input " + std::to_string(i) + " of '" + method + "' is not a tensor";
      }
      const std::string path = file_of(io, "in", s, i);
      if (!read_file(path, data[i])) return "cannot read " + path;
      if (std::string e = read_shape(io, s, i, inputs[i], data[i].size()); !e.empty()) return e;
      if (data[i].size() != inputs[i].nbytes) {
        return path + " has " + std::to_string(data[i].size()) + " bytes; input " +
               std::to_string(i) + " takes " + std::to_string(inputs[i].nbytes);
      }
      inputs[i].data = data[i].data();
    }
    tte_runtime_clear_last_refusal();
    size_t n_out = 0;
    if (tte_program_execute(p, method.c_str(), inputs.data(), n_in, &n_out, why, sizeof why)) {
      return "step " + std::to_string(s) + ": " + why + ": " + tte_runtime_last_refusal();
    }
    outs.emplace_back();
    for (size_t j = 0; j < n_out; ++j) {
      tte_value v;
      if (tte_program_output(p, method.c_str(), j, &v) != 0 || v.kind != 0) continue;
      std::vector<uint8_t> host(v.nbytes);
      if (v.nbytes && tte_runtime_copy(host.data(), v.data, v.nbytes) != 0) {
        return "step " + std::to_string(s) + ": cannot read output " + std::to_string(j);
      }
      outs.back().push_back(std::move(host));
    }
  }
  return "";
}

struct Options {
  std::string pte, io, method, device = "auto", data;  // method "": the program's default
  long steps = 1;
  bool stream = false, reset = false;
};

bool parse_options(int argc, char** argv, Options& o) {
  bool ok = true;
  for (int i = 1; i < argc && ok; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--io" && has_value)
      o.io = argv[++i];
    else if (a == "--method" && has_value)
      o.method = argv[++i];
    else if (a == "--device" && has_value)
      o.device = argv[++i];
    else if (a == "--data" && has_value)
      o.data = argv[++i];
    else if (a == "--steps" && has_value)
      o.steps = std::strtol(argv[++i], nullptr, 10);
    else if (a == "--stream")
      o.stream = true;
    else if (a == "--reset")
      o.reset = true;
    else if (!a.empty() && a[0] != '-' && o.pte.empty())
      o.pte = a;
    else
      ok = false;
  }
  return ok && !o.pte.empty() && !o.io.empty() && o.steps >= 1;
}

// The methods steps [0, steps) run, each once, in the order they first run.
std::vector<std::string> methods_run(const std::string& io, long steps,
                                     const std::string& fallback) {
  std::vector<std::string> ran;
  for (long s = 0; s < steps; ++s) {
    std::string m = method_of_step(io, s, fallback);
    if (std::find(ran.begin(), ran.end(), m) == ran.end()) ran.push_back(std::move(m));
  }
  return ran;
}

// The summary's per-buffer figures, for every buffer of every method the steps ran (each FQN
// once: methods share state by FQN): copied bytes, and [device, link, host] bytes by path.
void buffer_figures(tte_program* p, const std::vector<std::string>& methods, std::string& copies,
                    std::string& paths) {
  std::vector<std::string> listed;
  for (const std::string& method : methods) {
    for (size_t b = 0; b < tte_program_buffer_count(p, method.c_str()); ++b) {
      const char* fqn = nullptr;
      tte_value v;
      if (tte_program_buffer(p, method.c_str(), b, &fqn, &v) != 0) continue;
      if (std::find(listed.begin(), listed.end(), fqn) != listed.end()) continue;
      listed.emplace_back(fqn);
      const std::string key = (copies.empty() ? "\"" : ", \"") + json_escape(fqn) + "\": ";
      copies += key + std::to_string(tte_runtime_copy_bytes(fqn));
      paths += key + "[" + std::to_string(tte_runtime_copy_bytes_by_path(fqn, 0)) + ", " +
               std::to_string(tte_runtime_copy_bytes_by_path(fqn, 1)) + ", " +
               std::to_string(tte_runtime_copy_bytes_by_path(fqn, 2)) + "]";
    }
  }
}

std::string write_outputs(const std::string& io,
                          const std::vector<std::vector<std::vector<uint8_t>>>& outs) {
  for (size_t s = 0; s < outs.size(); ++s) {
    for (size_t j = 0; j < outs[s].size(); ++j) {
      const std::string path = file_of(io, "out", static_cast<long>(s), j);
      if (!write_file(path, outs[s][j])) return "cannot write " + path;
    }
  }
  return "";
}

// The steps, their outputs written, and with --reset a reset and a rerun compared with them:
// "" or what failed; the figures are the first run's; `again` is "true"/"false" after a rerun,
// else "null".
std::string step_and_rerun(tte_program* p, const Options& o, std::string& copies,
                           std::string& paths, uint64_t& staged, const char*& again) {
  std::vector<std::vector<std::vector<uint8_t>>> outs;
  std::string err = run_steps(p, o.method, o.io, o.steps, outs);
  if (err.empty()) buffer_figures(p, methods_run(o.io, o.steps, o.method), copies, paths);
  if (err.empty()) err = write_outputs(o.io, outs);
  staged = tte_runtime_copy_bytes("tte.reference_engine.device_staging");  // before a rerun
  if (err.empty() && o.reset) {
    char text[4096] = "";
    if (tte_program_reset(p, text, sizeof text) != 0) return std::string("reset: ") + text;
    std::vector<std::vector<std::vector<uint8_t>>> rerun;
    err = run_steps(p, o.method, o.io, o.steps, rerun);
    again = err.empty() && rerun == outs ? "true" : "false";
  }
  return err;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_options(argc, argv, o)) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  std::string why;
  if (tte::use_device(o.device.c_str(), why) != 0) {
    return fail("--device " + o.device + ": " + why);
  }
  if (o.stream) {
    void* s = tte::new_stream(why);  // the caller's: non-blocking, as an app's own would be
    if (s == nullptr || tte::use_stream(s, why) != 0) return fail("--stream: " + why);
  }
  int code = 0;
  char text[4096] = "";
  tte_runtime_clear_last_refusal();
  tte_program* p =
      tte_program_open_with_data(o.pte.c_str(), o.data.c_str(), &code, text, sizeof text);
  if (p == nullptr) {
    const std::string refusal = tte_runtime_last_refusal();
    return fail(o.pte + ": " + text + (refusal.empty() ? "" : ": " + refusal));
  }
  if (o.method.empty()) o.method = default_method(p);
  const std::string first = method_of_step(o.io, 0, o.method);
  if (std::string e = check_method(p, first); !e.empty()) {
    tte_program_close(p);
    return fail(o.pte + ": " + e);
  }
  tte_runtime_reset_counters();
  std::string copies, paths;
  const char* again = "null";
  uint64_t staged = 0;
  const std::string err = step_and_rerun(p, o, copies, paths, staged, again);
  tte_program_close(p);
  if (!err.empty()) return fail(err);
  std::printf(
      "{\"device\": \"%s\", \"stream\": %s, \"steps\": %ld, \"copy_bytes\": {%s}, "
      "\"copy_paths\": {%s}, \"staging_bytes\": %llu, \"reset\": %s}\n",
      tte::device_name(), o.stream ? "\"caller\"" : "null", o.steps, copies.c_str(), paths.c_str(),
      static_cast<unsigned long long>(staged), again);
  return std::string(again) == "false" ? 4 : 0;
}
