/* placeholder: being written */
typedef int okv_placeholder_tokenizer_t;
