#include "tessera/core/version.h"

namespace tessera {

const char* version() { return TESSERA_VERSION; }

const char* cuda_architectures() {
#ifdef TESSERA_HAS_CUDA
  return TESSERA_CUDA_ARCHS_STRING;
#else
  return "";
#endif
}

}  // namespace tessera
