/* ref.h - what the SIMD tiers borrow from the scalar reference: the float dot products and axpys
 * they hand their leftovers to, compiled once in ref.c without FMA so that the leftovers round as
 * the reference does. Private to native/src/kernels. */
#ifndef PI_KERNELS_REF_H
#define PI_KERNELS_REF_H
#include "kernels.h"

/* Sum over i0 <= i < n of row[i] * x[i] for an F32, F16 or BF16 row. */
float pi_ref_dot_floats(int type, const void *row, const float *x, int i0, int n);
/* The reference dequantization of one row (the SIMD tiers use it for float rows). */
void pi_ref_dequant(int type, const void *row, float *y, int n);
/* y[i] += a * row[i] for i0 <= i < n, for an F32, F16 or BF16 row. */
void pi_ref_axpy_floats(int type, const void *row, float a, float *y, int i0, int n);

#endif
