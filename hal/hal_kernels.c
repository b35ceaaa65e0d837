/* placeholder: being written */
typedef int okv_placeholder_hal_kernels_t;
