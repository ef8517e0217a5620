// SiLU: x * sigmoid(x).
CUTE_DEVICE float silu(float x) { return x / (1.0f + expf(-x)); }
