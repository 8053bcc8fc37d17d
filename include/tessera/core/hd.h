#pragma once
// Marks small functions shared by host code and CUDA kernels.
#ifdef __CUDACC__
#define TESSERA_HD __host__ __device__ __forceinline__
#else
#define TESSERA_HD inline
#endif
