/* Tokenizers beyond llama2.c's: the vocabularies GGUF files carry in their
 * tokenizer.ggml.* metadata, behind the same okv_tokenizer_t handle as the
 * llama2.c tokenizer (model.h: okv_tokenizer_encode / okv_tokenizer_piece /
 * okv_tokenizer_free work for every kind), plus what the kinds differ in:
 * BOS/EOS ids, whole-text decoding, raw vocabulary pieces, and the BPE
 * pre-tokenizers (regular expressions run with PCRE2, UTF and UCP modes).
 *
 * Kinds:
 *  - llama2.c (okv_tokenizer_load): model.h.
 *  - SentencePiece-style, tokenizer.ggml.model = "llama": pieces, scores and
 *    token types. A text is split at user-defined pieces (matched whole, the
 *    longest first); every other stretch gets a space in front (when
 *    tokenizer.ggml.add_space_prefix, default true, and the stretch starts the
 *    text or follows a user-defined piece), every space becomes U+2581 "▁",
 *    the stretch is split into code points, and adjacent symbols whose
 *    concatenation is a piece merge, the pair with the highest score first
 *    (the leftmost on ties), until none merges; a symbol that is no piece is
 *    written as byte pieces "<0xNN>" (byte fallback; the one-byte piece, else
 *    the unknown token, where the vocabulary has no byte pieces).
 *  - byte-level BPE, tokenizer.ggml.model = "gpt2": a text is split at
 *    user-defined pieces, every other stretch is cut by the pre-tokenizer that
 *    tokenizer.ggml.pre names (below), each piece's bytes become GPT-2's
 *    printable code points (bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF stand for
 *    themselves, the other 68 bytes for U+0100.. in byte order), and
 *    tokenizer.ggml.merges apply by rank (lowest first, leftmost on ties)
 *    within the piece. For llama-bpe a piece that is a whole token is taken
 *    as is (Llama 3's ignore_merges). A byte without a token (a vocabulary
 *    lacking some of the 256 byte tokens) becomes the unknown token.
 *  Control tokens in the text are not parsed: "<s>" in a text is ordinary text.
 *  When the same piece appears twice in a vocabulary, the later id is the one
 *  looked up (as the reference implementation's map keeps it).
 *
 * Method sources: SentencePiece (Kudo & Richardson 2018) and its BPE model;
 * GPT-2's byte-level BPE (Radford et al. 2019, encoder.py); the published
 * pre-tokenizer patterns of the models named below (their tokenizer.json
 * files); the reference encodings of ggml-org/llama.cpp's test vocabularies
 * (../shared/gguf, 46 strings each), which both kinds reproduce exactly.
 *
 * Thread safety: a loaded tokenizer is read-only and may be used by several
 * threads at once (each call allocates its own scratch space).
 */
#ifndef OASISKV_TOOLS_MODEL_TOKENIZER_GGUF_H
#define OASISKV_TOOLS_MODEL_TOKENIZER_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "No token": an absent BOS/EOS id, and as okv_tokenizer_piece's prev_token
 * the start of a text (the dummy-prefix space of the first piece is dropped,
 * as after BOS). */
#define OKV_TOKEN_NONE UINT32_MAX

typedef enum okv_tokenizer_kind_e {
  OKV_TOKENIZER_LLAMA2C = 0, /* llama2.c tokenizer file */
  OKV_TOKENIZER_SPM = 1,     /* GGUF tokenizer.ggml.model "llama" */
  OKV_TOKENIZER_BPE = 2,     /* GGUF tokenizer.ggml.model "gpt2" */
} okv_tokenizer_kind_t;

/* Loads the tokenizer of a GGUF file from its metadata:
 * tokenizer.ggml.model (required: "llama" or "gpt2"), .tokens (required,
 * strings, 1 to 2^24), .scores (f32 per token; optional, 0 when absent; NaN
 * refused), .token_type (int per token, 0..6 = undefined, normal, unknown,
 * control, user-defined, unused, byte; optional: then pieces spelled
 * "<0xNN>" are the byte pieces and the rest normal), .merges ("gpt2":
 * required, strings "A B" whose A, B and AB are tokens; the first of
 * duplicate pairs keeps its rank), .pre ("gpt2": the pre-tokenizer; absent
 * means "default"), .bos_token_id / .eos_token_id / .unknown_token_id
 * (u32 < token count, or 4294967295 for none; defaults "llama" 1 / 2 / 0,
 * "gpt2" none), .add_bos_token / .add_eos_token (defaults "llama" true /
 * false, "gpt2" true for llama-bpe else false / false), .add_space_prefix
 * ("llama" only, default true). Everything is copied: g may be closed after.
 * `a` (NULL = system) allocates the tokenizer; free it with
 * okv_tokenizer_free. Errors: INVALID_ARGUMENT (one line naming the file and
 * the key: a missing or mistyped key, an unsupported model or unknown
 * pre-tokenizer name, array counts that disagree with the token count, an id
 * past the vocabulary, a token type out of range, a malformed merge or one
 * naming an absent piece), OUT_OF_MEMORY; *out is NULL on error. */
okv_status_t okv_tokenizer_load_gguf(const okv_gguf_t *g, const okv_allocator_t *a, okv_tokenizer_t **out);

/* The kind of a tokenizer, and its name: "llama2.c", "llama (SentencePiece)",
 * "gpt2 (byte-level BPE)". */
okv_tokenizer_kind_t okv_tokenizer_kind(const okv_tokenizer_t *tokenizer);
const char *okv_tokenizer_kind_name(okv_tokenizer_kind_t kind);
/* The pre-tokenizer's name of a BPE tokenizer ("gpt-2", "llama-bpe", ...;
 * "default" when the file names none), NULL for the other kinds. Static. */
const char *okv_tokenizer_pre_name(const okv_tokenizer_t *tokenizer);
/* The BOS and EOS ids (OKV_TOKEN_NONE when the vocabulary has none; llama2.c:
 * 1 and 2), and whether okv_tokenizer_encode(..., bos = true, ...) writes BOS
 * first and EOS last (tokenizer.ggml.add_bos_token / add_eos_token; llama2.c:
 * BOS yes, EOS no). The `bos` flag of okv_tokenizer_encode means "add the
 * special tokens this vocabulary asks for": false adds neither. */
uint32_t okv_tokenizer_bos_id(const okv_tokenizer_t *tokenizer);
uint32_t okv_tokenizer_eos_id(const okv_tokenizer_t *tokenizer);
bool okv_tokenizer_adds_bos(const okv_tokenizer_t *tokenizer);
bool okv_tokenizer_adds_eos(const okv_tokenizer_t *tokenizer);
/* The count of `ids` [n] (from okv_tokenizer_encode with bos = true) without the EOS that an add_eos_token
 * vocabulary appended: n - 1 when the vocabulary adds EOS and ids[n - 1] is it, else n. For running text
 * (an eval window, a prompt to continue), which does not end there. NULL tokenizer or ids: n. Thread-safe. */
size_t okv_tokenizer_strip_added_eos(const okv_tokenizer_t *tokenizer, const uint32_t *ids, size_t n);
/* The longest piece of the vocabulary in bytes: okv_tokenizer_piece never
 * needs more than this plus 1 (the NUL). */
uint32_t okv_tokenizer_max_piece_bytes(const okv_tokenizer_t *tokenizer);

/* The vocabulary's own spelling of `token` (e.g. "▁Hello", "ĠHello",
 * "<0x0A>", " the"): *out_ptr is borrowed from the tokenizer (valid until it
 * is freed, not NUL-terminated), *out_len bytes.
 * Errors: INVALID_ARGUMENT (token >= vocabulary size). */
okv_status_t okv_tokenizer_token_text(const okv_tokenizer_t *tokenizer, uint32_t token, const char **out_ptr,
                                      size_t *out_len);

/* The text of ids[0..n): okv_tokenizer_piece of each id after the previous
 * one, the first after OKV_TOKEN_NONE for the GGUF kinds and after BOS for
 * llama2.c (so the dummy-prefix space an encode put in front is dropped);
 * BOS, EOS, control and out-of-range ids give nothing. For every text x,
 * decode(encode(x)) == x when the vocabulary covers every byte (byte pieces
 * or byte tokens) and no merge made a control piece of x's text, except that
 * SentencePiece decodes a U+2581 "▁" of x as a space. Writes up to `capacity` bytes to out (then a
 * NUL when there is room) and the full byte count to *out_n_bytes, even when
 * it exceeds capacity (OKV_OK; the caller may retry). Thread-safe.
 * Errors: INVALID_ARGUMENT (NULL arguments), OUT_OF_MEMORY. */
okv_status_t okv_tokenizer_decode(const okv_tokenizer_t *tokenizer, const uint32_t *ids, size_t n, char *out,
                                  size_t capacity, size_t *out_n_bytes);

/* ---- BPE pre-tokenizers ----
 *
 * A pre-tokenizer cuts a text into pieces by a list of regular expressions
 * applied in turn: each one splits every piece of the previous step into the
 * stretches it matches and the stretches in between (both kept, in order;
 * HuggingFace's Split "isolated"). \s stands for the Unicode White_Space
 * property (U+0009-000D, 0020, 0085, 00A0, 1680, 2000-200A, 2028, 2029,
 * 202F, 205F, 3000), \p{L}/\p{N}/\p{P} for PCRE2's Unicode categories.
 *  - gpt-2 (also "default" and an absent tokenizer.ggml.pre, which the
 *    reference implementation treats with rules of its own: here they are
 *    GPT-2's): 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *  - llama-bpe (Llama 3; also "llama3", "llama-v3"):
 *    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *    \s*[\r\n]+|\s+(?!\S)|\s+   (one pattern)
 *  - qwen2: as llama-bpe with single digits (\p{N} for \p{N}{1,3});
 *  - smollm: \p{N} (every digit alone), then the gpt-2 pattern;
 *  - deepseek-llm: [\r\n]; \s?[cased letters]+ (the class DeepSeek LLM's
 *    tokenizer.json lists: ASCII letters, µ, Latin-1 to Deseret and Adlam
 *    ranges); \s?[ASCII punctuation and letters, full-width forms, quotes
 *    U+2018-201F, U+3000-3002]+; \s+ at the end of a piece;
 *    [U+4E00-9FA5 U+0800-4E00 U+AC00-D7FF]+; \p{N}+
 *  - deepseek-coder: [\r\n]; \s?\p{L}+; \s?\p{P}+; the same CJK class; \p{N}.
 * Qwen2's NFC normaliser is not applied (neither does the reference). */
typedef struct okv_pretok_t okv_pretok_t;

/* Compiles the pre-tokenizer `name` (name_len bytes, not NUL-terminated).
 * Errors: INVALID_ARGUMENT (unknown name: the message names it and lists the
 * known ones), INTERNAL (PCRE2 refused a pattern), OUT_OF_MEMORY. Free with
 * okv_pretok_free (NULL accepted). A compiled pre-tokenizer is read-only and
 * may be shared by threads. */
okv_status_t okv_pretok_create(const char *name, size_t name_len, const okv_allocator_t *a, okv_pretok_t **out);
void okv_pretok_free(okv_pretok_t *pretok);
/* Its canonical name (static). */
const char *okv_pretok_name(const okv_pretok_t *pretok);
/* Splits n_bytes of valid UTF-8 `text` into pieces: out_ends[i] is the byte
 * offset where piece i ends (pieces are non-empty, contiguous, in order, the
 * last ends at n_bytes). Writes up to `capacity` offsets and the full count
 * to *out_n_pieces (OKV_OK even when it exceeds capacity).
 * Errors: INVALID_ARGUMENT (text not valid UTF-8 or holding NUL, naming the
 * byte offset), INTERNAL (a PCRE2 match error such as its match limit),
 * OUT_OF_MEMORY. */
okv_status_t okv_pretok_split(const okv_pretok_t *pretok, const char *text, size_t n_bytes, size_t *out_ends,
                              size_t capacity, size_t *out_n_pieces);

#ifdef __cplusplus
}
#endif
#endif
