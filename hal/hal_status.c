/* placeholder: being written */
typedef int okv_placeholder_hal_status_t;
