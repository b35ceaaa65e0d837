/* placeholder: being written */
typedef int okv_placeholder_llama2c_t;
