#pragma once
// Marks small functions shared by host code and CUDA kernels.
#ifdef __CUDACC__
#define TESSERA_HD __host__ __device__ __forceinline__
#else
#define TESSERA_HD inline
#endif

// Unrolls the next loop in CUDA code (a fixed-size array indexed by the loop variable then
// stays in registers); nothing elsewhere.
#ifdef __CUDACC__
#define TESSERA_UNROLL _Pragma("unroll")
#else
#define TESSERA_UNROLL
#endif
