// metal_compat.h -- the Metal Shading Language subset that planner emits, spelled for
// clang-19 in "C++ for OpenCL 2021" mode (-x clcpp -cl-std=clc++2021).
//
// This header is force-included (-include) before an MSL translation unit that
// metal_emulator.py has rewritten line by line ([[kernel]] -> kernel, the
// <metal_stdlib> include blanked). It mirrors exactly the subset documented in
// SUBSET.md: anything the emitter does not print is deliberately absent, so using it
// is a compile error rather than a silent approximation.
//
// Address spaces are real OpenCL address spaces. The compiler runs with the generic
// address space, fp64 and program-scope mutable globals disabled, so an unqualified
// pointer to device memory, `double` and a mutable global are rejected as Metal would.
//
// Kernel parameters are bound without parsing the signature: each attribute macro
// (`buffer(n)`, `thread_position_in_grid`, ...) closes the `[[ ]]` it sits in and
// adds a default argument that asks the fiber runtime (mtl_runtime.c) for the value,
// so `kernel_name()` called with no arguments runs one GPU thread.
#ifndef PLANNER_METAL_COMPAT_H
#define PLANNER_METAL_COMPAT_H

#if !defined(__OPENCL_CPP_VERSION__)
#error "metal_compat.h must be compiled with -x clcpp -cl-std=clc++2021"
#endif

// ---- address spaces ---------------------------------------------------------------
#define device __global
#define constant __constant
#define threadgroup __local
#define thread __private

// ---- scalar and position types ---------------------------------------------------------
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef uint uint2 __attribute__((ext_vector_type(2)));
typedef uint uint3 __attribute__((ext_vector_type(3)));
typedef ushort ushort2 __attribute__((ext_vector_type(2)));
typedef ushort ushort3 __attribute__((ext_vector_type(3)));
// float4 is storage only in the subset: the element type of the 16-byte-aligned
// threadgroup arena (SUBSET.md section 3). No components, constructors or arithmetic.
struct alignas(16) float4 {
  float __storage[4];
};

// ---- the runtime's side (mtl_runtime.c) -------------------------------------------------
extern "C" {
__attribute__((visibility("hidden"))) __global void *__mtl_rt_device_buffer(int index);
__attribute__((visibility("hidden"))) __constant void *__mtl_rt_constant_buffer(int index);
__attribute__((visibility("hidden"))) uint __mtl_rt_position(int attribute, int component);
__attribute__((visibility("hidden"), convergent)) void
__mtl_rt_threadgroup_barrier(int line, int column, uint flags);
}

// ---- kernel-parameter binding -------------------------------------------------------
namespace __mtl {
__constant constexpr int zero[1] = {0};

// Values of [[buffer(n)]]: device/constant pointers and constant references.
struct BufferBinding {
  int index;
  template <class T> operator __global T *() const {
    return static_cast<__global T *>(__mtl_rt_device_buffer(index));
  }
  template <class T> operator __constant T *() const {
    return static_cast<__constant T *>(__mtl_rt_constant_buffer(index));
  }
  template <class T> operator __constant T &() const {
    return *static_cast<__constant T *>(__mtl_rt_constant_buffer(index));
  }
  const BufferBinding &operator[](int) const { return *this; }
};

// Values of position attributes; the numbering matches mtl_runtime.c. Only the types
// Metal allows convert (others find no viable conversion when the signature is read):
// `int gid [[thread_position_in_grid]]` is an error, not a silent narrowing.
template <class T> struct Position;
template <> struct Position<uint> {
  static uint get(int a) { return __mtl_rt_position(a, 0); }
};
template <> struct Position<ushort> {
  static ushort get(int a) { return static_cast<ushort>(__mtl_rt_position(a, 0)); }
};
template <> struct Position<uint2> {
  static uint2 get(int a) { return (uint2)(__mtl_rt_position(a, 0), __mtl_rt_position(a, 1)); }
};
template <> struct Position<uint3> {
  static uint3 get(int a) {
    return (uint3)(__mtl_rt_position(a, 0), __mtl_rt_position(a, 1), __mtl_rt_position(a, 2));
  }
};
template <> struct Position<ushort2> {
  static ushort2 get(int a) { return __builtin_convertvector(Position<uint2>::get(a), ushort2); }
};
template <> struct Position<ushort3> {
  static ushort3 get(int a) { return __builtin_convertvector(Position<uint3>::get(a), ushort3); }
};

struct PositionBinding {
  int attribute;
  template <class T, class = decltype(&Position<T>::get)> operator T() const {
    return Position<T>::get(attribute);
  }
  const PositionBinding &operator[](int) const { return *this; }
};
} // namespace __mtl

// `T name [[buffer(3)]]` becomes `T name [[ ]] = BufferBinding{3}[zero[0]]`.
#define buffer(index) ]] = ::__mtl::BufferBinding{index}[::__mtl::zero[0
#define __MTL_POSITION(k) ]] = ::__mtl::PositionBinding{k}[::__mtl::zero[0
#define thread_position_in_grid __MTL_POSITION(0)
#define threadgroup_position_in_grid __MTL_POSITION(1)
#define thread_position_in_threadgroup __MTL_POSITION(2)
#define threads_per_threadgroup __MTL_POSITION(3)
#define threadgroups_per_grid __MTL_POSITION(4)
#define threads_per_grid __MTL_POSITION(5)
#define thread_index_in_threadgroup __MTL_POSITION(6)

// ---- metal_stdlib: barrier and math -------------------------------------------------
namespace metal {
enum class mem_flags : uint { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
constexpr mem_flags operator|(mem_flags a, mem_flags b) {
  return static_cast<mem_flags>(static_cast<uint>(a) | static_cast<uint>(b));
}

// A real rendezvous of the threadgroup. The default arguments record the call site so
// that the runtime can tell two barriers apart and name them in a divergence report.
inline void threadgroup_barrier(mem_flags flags, int __line = __builtin_LINE(),
                                int __column = __builtin_COLUMN()) {
  __mtl_rt_threadgroup_barrier(__line, __column, static_cast<uint>(flags));
}

inline float exp(float x) { return __builtin_expf(x); }
inline float log(float x) { return __builtin_logf(x); }
inline float sqrt(float x) { return __builtin_sqrtf(x); }
inline float rsqrt(float x) { return 1.0f / __builtin_sqrtf(x); }
inline float tanh(float x) { return __builtin_tanhf(x); }
inline float fabs(float x) { return __builtin_fabsf(x); }
inline float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

inline float max(float a, float b) { return __builtin_fmaxf(a, b); }
inline float min(float a, float b) { return __builtin_fminf(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline uint max(uint a, uint b) { return a > b ? a : b; }
inline uint min(uint a, uint b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline ulong max(ulong a, ulong b) { return a > b ? a : b; }
inline ulong min(ulong a, ulong b) { return a < b ? a : b; }

// select(a, b, c) is c ? b : a, as in Metal.
inline float select(float a, float b, bool c) { return c ? b : a; }
inline int select(int a, int b, bool c) { return c ? b : a; }
inline uint select(uint a, uint b, bool c) { return c ? b : a; }
inline long select(long a, long b, bool c) { return c ? b : a; }
inline ulong select(ulong a, ulong b, bool c) { return c ? b : a; }
} // namespace metal

#endif // PLANNER_METAL_COMPAT_H
