/* placeholder: being written */
typedef int okv_placeholder_runtime_t;
