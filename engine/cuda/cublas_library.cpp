// cuBLAS loaded on first use (see cublas_library.h). CRL_CUBLAS_SONAME and CRL_CUBLAS_PATH come from the
// build (engine/cuda/CMakeLists.txt): the soname of the toolkit's libcublas and its file there.
#include "engine/cuda/cublas_library.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

namespace crl::cuda {

namespace {

std::atomic<bool> loaded{false};

std::string loader_error() {
  const char* error = dlerror();
  return error ? error : "no reason given";
}

// The symbol `name` of `library` (loaded from `from`), as a pointer of the type of `slot`; throws naming
// both when it is absent.
template <typename Function>
void resolve(void* library, const std::string& from, const char* name, Function& slot) {
  dlerror();
  void* symbol = dlsym(library, name);
  if (symbol == nullptr)
    throw Error("cublas", from, std::string("has no function ") + name + " (" + loader_error() + ")");
  slot = reinterpret_cast<Function>(symbol);
}

CublasLibrary load() {
  std::string from;
  void* library = nullptr;
  if (const char* chosen = std::getenv("CRL_CUBLAS"); chosen != nullptr && *chosen != '\0') {
    // The user's choice, and nothing else (a cuBLAS of another toolkit, a Python wheel's).
    from = chosen;
    library = dlopen(chosen, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      throw Error("environment", "CRL_CUBLAS",
                  "value " + quote(from) + " could not be loaded (" + loader_error() +
                      "): expected the path of CUDA's libcublas.so, or leave CRL_CUBLAS unset to load " +
                      CRL_CUBLAS_SONAME);
    }
  } else {
    // The soname first (LD_LIBRARY_PATH, the run path), then the file of the toolkit the build used.
    from = CRL_CUBLAS_SONAME;
    library = dlopen(CRL_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const std::string by_name = loader_error();
      from = CRL_CUBLAS_PATH;
      library = dlopen(CRL_CUBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
      if (library == nullptr) {
        throw Error("cublas", CRL_CUBLAS_SONAME,
                    "could not be loaded (" + by_name + "; " + loader_error() +
                        "): the CUDA back-ends need CUDA's cuBLAS; install it, add its folder to "
                        "LD_LIBRARY_PATH or name its file in CRL_CUBLAS");
      }
    }
  }
  // (A library that lacks a function stays loaded: unloading cuBLAS is not something to rely on, and this
  // back-end's call fails either way.)
  CublasLibrary functions;
  resolve(library, from, "cublasCreate_v2", functions.create);
  resolve(library, from, "cublasDestroy_v2", functions.destroy);
  resolve(library, from, "cublasSetMathMode", functions.set_math_mode);
  resolve(library, from, "cublasSgemm_v2", functions.sgemm);
  return functions;
}

}  // namespace

const CublasLibrary& cublas() {
  static std::mutex mutex;
  static CublasLibrary library;
  if (loaded.load(std::memory_order_acquire)) return library;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!loaded.load(std::memory_order_relaxed)) {
    library = load();  // throws: nothing is set, and the next call tries again
    loaded.store(true, std::memory_order_release);
  }
  return library;
}

bool cublas_loaded() {
  return loaded.load(std::memory_order_acquire);
}

}  // namespace crl::cuda
