/* placeholder: being written */
typedef int okv_placeholder_forward_t;
