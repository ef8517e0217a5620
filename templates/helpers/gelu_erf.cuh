// GELU, exact (erf) form: x/2 * (1 + erf(x/sqrt(2))).
CUTE_DEVICE float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
