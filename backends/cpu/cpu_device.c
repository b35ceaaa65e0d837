/* placeholder: being written */
typedef int okv_placeholder_cpu_device_t;
