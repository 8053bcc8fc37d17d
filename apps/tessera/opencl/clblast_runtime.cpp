#include "clblast_runtime.h"

#include <dlfcn.h>

namespace tessera::app {

ClblastRuntime::ClblastRuntime() {
  for (const char* name : {"libclblast.so.1", "libclblast.so"}) {
    lib_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib_) {
      library_ = name;
      break;
    }
  }
  if (!lib_) {
    why_ = "libclblast not found (Debian libclblast1; or put libclblast.so.1 on LD_LIBRARY_PATH)";
    return;
  }
  auto load = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib_, symbol));
    if (!fn) why_ = std::string("libclblast lacks ") + symbol;
  };
  load(sgemv, "CLBlastSgemv");
  load(sgemm_strided_batched, "CLBlastSgemmStridedBatched");
  load(scol2im, "CLBlastScol2im");
  load(sconvgemm, "CLBlastSconvgemm");
  load(sgemm, "CLBlastSgemm");  // last: available() tests it
  if (!why_.empty()) sgemm = nullptr;
}

ClblastRuntime::~ClblastRuntime() {
  if (lib_) dlclose(lib_);
}

}  // namespace tessera::app
