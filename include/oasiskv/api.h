/* OasisKV export marker: every function of the public API is declared with
 * OKV_API; the library is built with -fvisibility=hidden, so nothing else
 * leaves liboasiskv.so (CI checks `nm -D` against these headers). */
#ifndef OASISKV_API_H
#define OASISKV_API_H

#if defined(_WIN32)
#define OKV_API __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define OKV_API __attribute__((visibility("default")))
#else
#define OKV_API
#endif

#endif /* OASISKV_API_H */
