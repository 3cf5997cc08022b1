// Runs one function of a TVM-built shared library with tvm-ffi alone: the check that
// code generated for a board without a TVM runtime (32-bit armv7) loads and computes
// the right values there.
//
//   kernel_run LIB FUNC ARG...      each ARG is DTYPE:DIMS:PATH, e.g. float32:1x16x8x8:/tmp/a.bin
//
// Every argument's buffer is read from PATH (raw, C order) before the call and
// written to PATH.out after it. The library is loaded by tvm-ffi's own module
// loader (ffi::Module::LoadFromFile), as the TVM runtime loads it on a board.
//
// TVM's generated host code also calls four libtvm_runtime functions (parallel
// launch and workspaces) through pointers the loader fills in from the context
// symbols registered before loading, as libtvm_runtime registers its own. They
// are defined here, single-threaded: a launch runs the one task of a one-task
// group, which generated code handles for any group size.
#include <dlpack/dlpack.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/runtime/c_backend_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  TVMParallelGroupEnv env{nullptr, 1};
  return flambda(0, &env, cdata);
}
int TVMBackendParallelBarrier(int task_id, TVMParallelGroupEnv* penv) { return 0; }
void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes, int dtype_code_hint,
                               int dtype_bits_hint) {
  void* ptr = nullptr;
  return posix_memalign(&ptr, 64, nbytes ? nbytes : 1) == 0 ? ptr : nullptr;
}
int TVMBackendFreeWorkspace(int device_type, int device_id, void* ptr) {
  free(ptr);
  return 0;
}
}

namespace {

struct Argument {
  DLTensor tensor{};
  std::vector<int64_t> shape;
  char* data = nullptr;  // 64-byte aligned, as the TVM runtime allocates (generated code may rely on it)
  size_t nbytes = 0;
  std::string path;
  Argument() = default;
  Argument(const Argument&) = delete;
  Argument& operator=(const Argument&) = delete;
  ~Argument() { free(data); }
};

bool ParseDType(const std::string& name, DLDataType* out) {
  static const struct { const char* name; uint8_t code; uint8_t bits; } kTypes[] = {
      {"float32", kDLFloat, 32}, {"float64", kDLFloat, 64}, {"float16", kDLFloat, 16},
      {"int8", kDLInt, 8},       {"int32", kDLInt, 32},     {"int64", kDLInt, 64},
      {"uint8", kDLUInt, 8},     {"bool", kDLBool, 8}};
  for (const auto& t : kTypes) {
    if (name == t.name) {
      *out = DLDataType{t.code, t.bits, 1};
      return true;
    }
  }
  return false;
}

bool ParseArgument(const std::string& spec, Argument* arg, std::string* error) {
  size_t first = spec.find(':'), second = spec.find(':', first + 1);
  if (first == std::string::npos || second == std::string::npos) {
    *error = "argument must be DTYPE:DIMS:PATH, got " + spec + " instead";
    return false;
  }
  if (!ParseDType(spec.substr(0, first), &arg->tensor.dtype)) {
    *error = "unsupported dtype in " + spec;
    return false;
  }
  std::stringstream dims(spec.substr(first + 1, second - first - 1));
  std::string dim;
  int64_t count = 1;
  while (std::getline(dims, dim, 'x')) {
    if (!dim.empty()) arg->shape.push_back(std::stoll(dim));
  }
  for (int64_t d : arg->shape) count *= d;
  arg->path = spec.substr(second + 1);
  size_t nbytes = static_cast<size_t>(count) * ((arg->tensor.dtype.bits + 7) / 8);
  arg->nbytes = nbytes;
  void* buffer = nullptr;
  if (posix_memalign(&buffer, 64, nbytes ? nbytes : 1) != 0) {
    *error = "cannot allocate " + std::to_string(nbytes) + " bytes";
    return false;
  }
  arg->data = static_cast<char*>(buffer);
  std::ifstream in(arg->path, std::ios::binary);
  if (!in || !in.read(arg->data, static_cast<std::streamsize>(nbytes))) {
    *error = "cannot read " + std::to_string(nbytes) + " bytes from " + arg->path;
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: kernel_run LIB FUNC DTYPE:DIMS:PATH...\n";
    return 2;
  }
  std::vector<Argument> args(argc - 3);
  for (int i = 3; i < argc; ++i) {
    std::string error;
    if (!ParseArgument(argv[i], &args[i - 3], &error)) {
      std::cerr << "kernel_run: " << error << "\n";
      return 2;
    }
  }
  std::vector<tvm::ffi::AnyView> packed;
  for (Argument& arg : args) {
    arg.tensor.data = arg.data;
    arg.tensor.device = DLDevice{kDLCPU, 0};
    arg.tensor.ndim = static_cast<int32_t>(arg.shape.size());
    arg.tensor.shape = arg.shape.data();
    packed.emplace_back(&arg.tensor);
  }
  TVMFFIEnvModRegisterContextSymbol("__TVMBackendParallelLaunch", reinterpret_cast<void*>(TVMBackendParallelLaunch));
  TVMFFIEnvModRegisterContextSymbol("__TVMBackendParallelBarrier", reinterpret_cast<void*>(TVMBackendParallelBarrier));
  TVMFFIEnvModRegisterContextSymbol("__TVMBackendAllocWorkspace", reinterpret_cast<void*>(TVMBackendAllocWorkspace));
  TVMFFIEnvModRegisterContextSymbol("__TVMBackendFreeWorkspace", reinterpret_cast<void*>(TVMBackendFreeWorkspace));
  try {
    tvm::ffi::Module module = tvm::ffi::Module::LoadFromFile(argv[1]);
    tvm::ffi::Optional<tvm::ffi::Function> func = module->GetFunction(argv[2]);
    if (!func.has_value()) {
      std::cerr << "kernel_run: " << argv[1] << " has no function " << argv[2] << "\n";
      return 3;
    }
    tvm::ffi::Any result;
    func.value().CallPacked(packed.data(), static_cast<int32_t>(packed.size()), &result);
  } catch (const std::exception& err) {
    std::cerr << "kernel_run: " << err.what() << "\n";
    return 4;
  }
  for (const Argument& arg : args) {
    std::ofstream out(arg.path + ".out", std::ios::binary);
    out.write(arg.data, static_cast<std::streamsize>(arg.nbytes));
  }
  std::cout << "ran " << argv[2] << " with " << args.size() << " arguments\n";
  return 0;
}
