#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<harness>/).

Every seed is synthesized here (tiny checkpoints with made-up weights,
tokenizers with a few pieces, texts, command lines): nothing is copied from
the shared model files. Deterministic; rerun after changing it:

    python3 tests/fuzz/make_seeds.py
"""
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def write(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    assert len(data) < 8192, (harness, name, len(data))
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- llama2.c checkpoints ----

def rng(seed):
    x = seed
    while True:
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        yield (x & 0xFFFF) / 65536.0 - 0.5


def checkpoint(dim, hidden, layers, heads, kv_heads, vocab, seq_len, seed=1):
    """A legacy checkpoint: header, weights in model.h order, RoPE tables."""
    hd = dim // heads
    kvd = kv_heads * hd
    r = rng(seed)
    V = abs(vocab)

    def floats(n, scale=0.1):
        return [next(r) * scale for _ in range(n)]

    w = []
    w += floats(V * dim)                 # token embedding
    w += [1.0] * (layers * dim)          # rms_att
    w += floats(layers * dim * dim)      # wq
    w += floats(layers * kvd * dim)      # wk
    w += floats(layers * kvd * dim)      # wv
    w += floats(layers * dim * dim)      # wo
    w += [1.0] * (layers * dim)          # rms_ffn
    w += floats(layers * hidden * dim)   # w1
    w += floats(layers * dim * hidden)   # w2
    w += floats(layers * hidden * dim)   # w3
    w += [1.0] * dim                     # rms_final
    cos, sin = [], []
    for p in range(seq_len):
        for j in range(hd // 2):
            a = p * 10000.0 ** (-2.0 * j / hd)
            cos.append(math.cos(a))
            sin.append(math.sin(a))
    w += cos + sin
    if vocab < 0:
        w += floats(V * dim)             # classifier
    hdr = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq_len)
    return hdr + struct.pack("<%df" % len(w), *w)


def checkpoints():
    h = "checkpoint"
    tiny = checkpoint(8, 12, 1, 2, 1, 16, 4)
    write(h, "tiny_shared.bin", tiny)
    write(h, "tiny_unshared.bin", checkpoint(8, 12, 1, 2, 1, -16, 4, seed=2))
    write(h, "tiny_mha_2layers.bin", checkpoint(8, 4, 2, 4, 4, 8, 2, seed=3))
    write(h, "tiny_gqa.bin", checkpoint(16, 4, 1, 4, 2, 4, 3, seed=4))
    write(h, "head_dim_2.bin", checkpoint(4, 2, 1, 2, 2, 4, 1, seed=5))
    # Headers that declare far more than the file holds (refused before allocating).
    write(h, "huge_dims.bin", struct.pack("<7i", 65536, 262144, 1024, 1024, 1024, 1 << 20, 1 << 20) + tiny[28:256])
    write(h, "huge_vocab_unshared.bin", struct.pack("<7i", 256, 256, 4, 2, 1, -(1 << 20), 4096) + tiny[28:64])
    write(h, "negative_fields.bin", struct.pack("<7i", -8, -12, -1, -2, -1, -16, -4) + tiny[28:])
    write(h, "zero_fields.bin", struct.pack("<7i", 0, 0, 0, 0, 0, 0, 0) + tiny[28:])
    write(h, "odd_head_dim.bin", struct.pack("<7i", 6, 12, 1, 2, 1, 16, 4) + tiny[28:])
    write(h, "header_only.bin", tiny[:28])
    write(h, "short_header.bin", tiny[:10])
    write(h, "truncated.bin", tiny[:-100])
    write(h, "trailing.bin", tiny + b"\0\0\0\0")
    nan = bytearray(tiny)
    nan[28 + 4 * 40:28 + 4 * 41] = struct.pack("<f", float("nan"))
    write(h, "nan_weight.bin", bytes(nan))
    inf = bytearray(tiny)
    inf[-4:] = struct.pack("<f", float("inf"))
    write(h, "inf_rope.bin", bytes(inf))


# ---- tokenizers ----

def tokenizer_file(pieces, max_len=None):
    """pieces: list of (bytes, score)."""
    ml = max_len if max_len is not None else max(len(p) for p, _ in pieces)
    out = struct.pack("<i", ml)
    for p, s in pieces:
        out += struct.pack("<fi", s, len(p)) + p
    return out


def specials():
    return [(b"<unk>", 0.0), (b"\n<s>\n", 0.0), (b"\n</s>\n", 0.0)]


def byte_tokens():
    return [(b"<0x%02X>" % b, 0.0) for b in range(256)]


MERGES = [b" t", b"he", b" a", b"in", b"th", b"er", b" the", b"an", b"nd", b" s", b"ou", b"re", b" w",
          b"on", b" and", b"ed", b"it", b"is", b" Once", b"Once", b" upon", b" time", b"\xc3\xa9", b"  "]


def small_vocab():
    pieces = specials() + byte_tokens()
    pieces += [(bytes([c]), -1.0 - c / 1000.0) for c in range(0x20, 0x7F) if c != ord("<")]
    pieces += [(m, -0.25 * i) for i, m in enumerate(MERGES)]
    return pieces


def tokenizers():
    h = "tokenizer_load"
    sel = b"\x80"  # vocab_size = the records in the file
    tiny = [(b"<unk>", 0.0), (b"<s>", 0.0), (b"</s>", 0.0), (b" ", -1.0), (b"a", -2.0), (b" a", -0.5)]
    write(h, "tiny.bin", sel + tokenizer_file(tiny))
    write(h, "bytes_only.bin", sel + tokenizer_file(specials() + byte_tokens()))
    write(h, "small_vocab.bin", sel + tokenizer_file(small_vocab()))
    write(h, "vocab_minus_one.bin", b"\x7f" + tokenizer_file(tiny))
    write(h, "vocab_plus_one.bin", b"\x81" + tokenizer_file(tiny))
    write(h, "vocab_zero.bin", b"\x00" + tokenizer_file(tiny))
    f = tokenizer_file(tiny)
    write(h, "truncated.bin", sel + f[:-2])
    write(h, "header_only.bin", sel + f[:4])
    write(h, "short.bin", sel + f[:2])
    write(h, "max_len_zero.bin", sel + struct.pack("<i", 0) + f[4:])
    write(h, "max_len_huge.bin", sel + struct.pack("<i", 1 << 30) + f[4:])
    write(h, "too_long_token.bin", sel + tokenizer_file(tiny, max_len=1))
    write(h, "nul_in_token.bin", sel + tokenizer_file(tiny[:3] + [(b"a\0b", 0.0)]))
    write(h, "inf_score.bin", sel + tokenizer_file(tiny[:3] + [(b"x", float("inf"))]))
    write(h, "negative_length.bin", sel + f[:4] + struct.pack("<fi", 0.0, -5) + b"abcdef")
    write(h, "byte_pieces.bin", sel + tokenizer_file(tiny + [(b"<0x41>", 0.0), (b"<0xZZ>", 0.0), (b"<0x0a>", 0.0)]))
    write(h, "duplicates.bin", sel + tokenizer_file(tiny + [(b"a", 3.0), (b" a", 9.0)]))


# ---- tokenizer codec ----

def codec_input(flags, text, ids=(), pieces=None):
    out = bytes([flags])
    if pieces is not None:
        out += bytes([len(pieces)])
        for p, s in pieces:
            assert 1 <= len(p) <= 12
            out += bytes([len(p) - 1]) + p + struct.pack("<b", s)
    out += struct.pack("<H", len(text)) + text
    for i in ids:
        out += struct.pack("<H", i)
    return out


def codecs():
    h = "tokenizer_codec"
    write(h, "builtin_once.bin", codec_input(2, b"Once upon a time", [1, 403, 300, 261, 0, 2, 3, 65535]))
    write(h, "builtin_nobos.bin", codec_input(0, b"the cat and the dog", [100, 200, 290, 0x8000 | 12345]))
    write(h, "builtin_utf8.bin", codec_input(2, "caf\u00e9 \u2713 \u20ac \U0001F642 \u00e9t\u00e9 \u00e9\u00e9".encode()))
    write(h, "builtin_spaces.bin", codec_input(2, b"  leading    spaces and trailing  ", [35, 36]))
    write(h, "builtin_ties.bin", codec_input(2, b"abcabc abc bcab aaaaaaaa eeeee ...!!", []))
    write(h, "builtin_controls.bin", codec_input(2, b"tab\there\nnew line\r\x01\x7f", []))
    write(h, "invalid_utf8.bin", codec_input(2, b"ok \xff bad", [5]))
    write(h, "truncated_utf8.bin", codec_input(2, b"end \xe2\x9c", []))
    write(h, "overlong.bin", codec_input(2, b"\xc0\xaf \xe0\x80\xaf", []))
    write(h, "surrogate.bin", codec_input(2, b"\xed\xa0\x80", []))
    write(h, "nul.bin", codec_input(2, b"a\0b", []))
    write(h, "empty_bos.bin", codec_input(2, b"", [1, 2, 3]))
    write(h, "empty_nobos.bin", codec_input(0, b"", []))
    write(h, "shared_tok512.bin", codec_input(10, b"Once upon a time, there was a little girl named Lily.",
                                              [1, 403, 407, 261, 378, 258, 3, 511, 512]))
    write(h, "shared_tok512_utf8.bin", codec_input(10, "Caf\u00e9 \u2713 <0x41> \u00e9".encode(), [229, 159, 150]))
    pieces = [(b" ", 0), (b"a", -4), (b"b", -4), (b" a", 8), (b"ab", 12), (b"ba", 12), (b"abab", 20)]
    write(h, "own_with_bytes.bin", codec_input(1 | 2 | 4, b"abab baba ab x\xc3\xa9", [3, 258, 259, 270], pieces))
    write(h, "own_no_bytes.bin", codec_input(1 | 2, b"ab", [3, 5, 9], [(b"a", 1), (b"b", 1), (b"ab", 4)]))
    write(h, "own_empty.bin", codec_input(1 | 2, b"", [0, 1, 2], []))


# ---- CLI options ----

def cli():
    h = "cli_options"

    def args(target, *a):
        return bytes([target]) + b"\0".join(x.encode() for x in a)

    write(h, "numbers.bin", args(0, "123", "0", "4294967295", "4294967296", "18446744073709551615",
                                 "18446744073709551616", "-1", "+1", "1e3", "0.5", "1", "0", "nan", "inf", "1e-400"))
    write(h, "names.bin", args(0, "dense", "oasis", "proxy", "ondemand", "all", "cpu", "cuda", "hip", "self",
                               "ngram", "oracle", "none", ""))
    write(h, "generate_ok.bin", args(1, "--steps", "10", "--mode=oasis", "--drafter", "ngram", "--budget", "4",
                                     "--fetch-ratio=0.25", "--seed", "7", "--temperature", "0.8", "--prompt",
                                     "Once upon a time", "--device", "cpu"))
    write(h, "generate_bad.bin", args(1, "--steps", "0"))
    write(h, "generate_missing.bin", args(1, "--mode"))
    write(h, "generate_oracle.bin", args(1, "--drafter", "oracle"))
    write(h, "eval_ok.bin", args(2, "--bytes=100", "--windows", "2", "--mode", "all", "--offset", "5",
                                 "--budget=16", "--fetch-ratio", "1", "--json", "-", "--csv", "-"))
    write(h, "eval_bad.bin", args(2, "--windows", "1025", "--mode", "bogus"))
    write(h, "eval_plot_stdout.bin", args(2, "--plot", "-"))
    write(h, "opt_value.bin", args(3, "--steps", "5", "--steps=6", "--stepsx", "--model", "--fetch-ratio"))


# ---- GGUF files (tools/model/gguf.c, gguf_model.c) ----

GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9


def gguf_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key, typ, value):
    out = gguf_str(key) + struct.pack("<I", typ)
    if typ == GGUF_U32:
        return out + struct.pack("<I", value)
    if typ == GGUF_I32:
        return out + struct.pack("<i", value)
    if typ == GGUF_F32:
        return out + struct.pack("<f", value)
    if typ == GGUF_BOOL:
        return out + bytes([1 if value else 0])
    if typ == GGUF_STRING:
        return out + gguf_str(value)
    elem, items = value
    out += struct.pack("<IQ", elem, len(items))
    for it in items:
        out += gguf_str(it) if elem == GGUF_STRING else struct.pack("<f" if elem == GGUF_F32 else "<i", it)
    return out


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def quantize(typ, vals):
    """ggml type bytes of f32 values: 0 F32, 1 F16, 30 BF16, 8 Q8_0, 2 Q4_0 (block rules of gguf_writer.h)."""
    if typ == 0:
        return struct.pack("<%df" % len(vals), *vals)
    if typ == 1:
        return struct.pack("<%de" % len(vals), *vals)
    if typ == 30:
        return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", v))[0] >> 16) for v in vals)
    out = b""
    for b in range(0, len(vals), 32):
        x = vals[b:b + 32]
        if typ == 8:
            d = max(abs(v) for v in x) / 127.0
            out += struct.pack("<H", f16_bits(d)) + bytes((int(round(v / d)) & 0xFF) if d else 0 for v in x)
        else:
            m = max(x, key=abs)
            d = m / -8.0
            q = [min(15, int(v / d + 8.5)) if d else 8 for v in x]
            out += struct.pack("<H", f16_bits(d)) + bytes(q[j] | (q[j + 16] << 4) for j in range(16))
    return out


def gguf_file(kvs, tensors, version=3, alignment=32):
    """kvs: encoded KVs; tensors: (name, dims, type, data bytes)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    off = 0
    datas = b""
    for name, dims, typ, data in tensors:
        out += gguf_str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", typ, off)
        pad = (-len(data)) % alignment
        datas += data + b"\0" * pad
        off += len(data) + pad
    out += b"\0" * ((-len(out)) % alignment)
    return out + datas


def gguf_llama(dim=8, hidden=8, layers=1, heads=2, kv_heads=1, vocab=8, ctx=8, typ=0, n_tokens=None, arch="llama",
               tied=False, extra_kvs=(), seed=11):
    hd = dim // heads
    kvd = kv_heads * hd
    r = rng(seed)

    def mat(ne0, ne1):
        return [next(r) * 0.2 for _ in range(ne0 * ne1)]

    kvs = [gguf_kv("general.architecture", GGUF_STRING, arch),
           gguf_kv(arch + ".context_length", GGUF_U32, ctx),
           gguf_kv(arch + ".embedding_length", GGUF_U32, dim),
           gguf_kv(arch + ".feed_forward_length", GGUF_U32, hidden),
           gguf_kv(arch + ".block_count", GGUF_U32, layers),
           gguf_kv(arch + ".attention.head_count", GGUF_U32, heads),
           gguf_kv(arch + ".attention.head_count_kv", GGUF_U32, kv_heads),
           gguf_kv(arch + ".rope.dimension_count", GGUF_U32, hd),
           gguf_kv(arch + ".rope.freq_base", GGUF_F32, 10000.0),
           gguf_kv(arch + ".attention.layer_norm_rms_epsilon", GGUF_F32, 1e-5)]
    kvs += list(extra_kvs)
    n_tokens = vocab if n_tokens is None else n_tokens
    if n_tokens:
        kvs.append(gguf_kv("tokenizer.ggml.model", GGUF_STRING, "llama"))
        kvs.append(gguf_kv("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, ["t%d" % i for i in range(n_tokens)])))
        kvs.append(gguf_kv("tokenizer.ggml.scores", GGUF_ARRAY, (GGUF_F32, [float(-i) for i in range(n_tokens)])))
    t = [("token_embd.weight", [dim, vocab], typ, quantize(typ, mat(dim, vocab))),
         ("output_norm.weight", [dim], 0, quantize(0, [1.0] * dim))]
    if not tied:
        t.append(("output.weight", [dim, vocab], typ, quantize(typ, mat(dim, vocab))))
    for l in range(layers):
        for name, ne0, ne1 in (("attn_norm", dim, 0), ("attn_q", dim, dim), ("attn_k", dim, kvd), ("attn_v", dim, kvd),
                               ("attn_output", dim, dim), ("ffn_norm", dim, 0), ("ffn_gate", dim, hidden),
                               ("ffn_down", hidden, dim), ("ffn_up", dim, hidden)):
            if ne1:
                t.append(("blk.%d.%s.weight" % (l, name), [ne0, ne1], typ, quantize(typ, mat(ne0, ne1))))
            else:
                t.append(("blk.%d.%s.weight" % (l, name), [ne0], 0, quantize(0, [1.0] * ne0)))
    return kvs, t


def ggufs():
    """About 20 KB in all: the fuzzer's mutations reach the bad-file paths (tests/model/test_gguf.c lists them)."""
    h = "gguf"
    write(h, "llama_f32.gguf", gguf_file(*gguf_llama(typ=0)))
    write(h, "llama_q8_0.gguf", gguf_file(*gguf_llama(dim=32, hidden=32, heads=4, kv_heads=1, vocab=4, typ=8, tied=True)))
    write(h, "llama_q4_0.gguf", gguf_file(*gguf_llama(dim=32, hidden=32, heads=4, kv_heads=1, vocab=4, typ=2, tied=True,
                                                      n_tokens=0)))
    # F16, version 2, alignment 64, tied classifier, Llama 3 rope_freqs and linear RoPE scaling.
    kvs, t = gguf_llama(typ=1, tied=True, n_tokens=0,
                        extra_kvs=[gguf_kv("general.alignment", GGUF_U32, 64),
                                   gguf_kv("llama.rope.scaling.type", GGUF_STRING, "linear"),
                                   gguf_kv("llama.rope.scaling.factor", GGUF_F32, 4.0)])
    t.append(("rope_freqs.weight", [2], 30, quantize(30, [1.0, 2.0])))
    write(h, "llama_f16_v2_align64_rope.gguf", gguf_file(kvs, t, version=2, alignment=64))
    good = gguf_file(*gguf_llama())
    write(h, "truncated_infos.gguf", good[:len(good) // 2])
    write(h, "header_only.gguf", good[:24])
    vocab_only = [gguf_kv("general.architecture", GGUF_STRING, "llama"),
                  gguf_kv("tokenizer.ggml.model", GGUF_STRING, "gpt2"),
                  gguf_kv("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, ["a", "b", "ab", "\u0120", ""])),
                  gguf_kv("tokenizer.ggml.merges", GGUF_ARRAY, (GGUF_STRING, ["a b"])),
                  gguf_kv("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, [1, 1, 1, 1, 3])),
                  gguf_kv("tokenizer.ggml.add_bos_token", GGUF_BOOL, True),
                  gguf_kv("general.negative", GGUF_I32, -7)]
    write(h, "vocab_only.gguf", gguf_file(vocab_only, []))


# ---- GGUF tokenizers (fuzz_tokenizer_gguf.c): flags byte, then the text ----

def tokenizer_gguf_seeds():
    h = "tokenizer_gguf"
    texts = {
        "english": "Hello world, it's the 2nd time: 1234567 apples!\n\n  \tend ",
        "cjk": "\u4f60\u597d\u4e16\u754c abc \u3001\u3002 caf\u00e9 \u0416\u0436",
        "spaces": "   a  \n\r\n b\u0085\u3000 x",
        "user": "a<ud>b<ud><|eos|> the",
        "emoji": "\U0001f680 (normal) \U0001f636\u200d\U0001f32b\ufe0f \u2581sp",
    }
    for sel in range(8):
        for name, text in texts.items():
            write(h, "v%d_%s.bin" % (sel, name), bytes([sel | (16 if sel % 2 else 0)]) + text.encode("utf-8"))
    write(h, "v7_bpe_shared.bin", bytes([7 | 8 | 16]) + texts["english"].encode("utf-8"))
    write(h, "invalid_utf8.bin", bytes([0]) + b"ab\xff\xc3")
    write(h, "nul.bin", bytes([6]) + b"a\0b")
    write(h, "empty.bin", bytes([16]))
    # Vocabularies from the input: kind, extra pieces (len, bytes, type), then merge index pairs.
    write(h, "own_spm_user.bin", bytes([32 | 16, 0, 2, 3]) + b"abc" + bytes([4, 2]) + b"xy" + bytes([1]) + b"abcxy abc")
    write(h, "own_bpe_merges.bin", bytes([32, 3, 1, 2]) + b"ab" + bytes([1, 1, 97, 98]) + b"ab ab")
    write(h, "own_bpe_absent_merge.bin", bytes([32, 1, 0, 1, 0, 1]) + b"ab")
    write(h, "own_bad_type.bin", bytes([32, 0, 1, 1]) + b"q" + bytes([7]) + b"q")


# ---- The remote tier's messages (remote/remote_msg.h): one whole message each ----

def remote_frame(typ, body, request_id=0, seq=0, version=1, reserved=0):
    return struct.pack("<IHHIIQQ", 0x52564B4F, version, typ, len(body), reserved, request_id, seq) + body


def remote_msg_seeds():
    h = "remote_msg"
    hello, hello_ok, open_, open_ok, read, data, close, close_ok, error = range(1, 10)
    tok = b"s3cret-token"
    write(h, "hello.bin", remote_frame(hello, struct.pack("<II", len(tok), 1) + tok))
    write(h, "hello_no_token.bin", remote_frame(hello, struct.pack("<II", 0, 0)))
    addr = bytes(range(40))
    write(h, "hello_ok_get.bin", remote_frame(hello_ok, struct.pack("<IIQII", 1, 4096, 1 << 24, len(addr), 0) + addr))
    write(h, "hello_ok_push.bin", remote_frame(hello_ok, struct.pack("<IIQII", 0, 4096, 1 << 24, 0, 0)))
    write(h, "open.bin", remote_frame(open_, b"", request_id=7))
    rkey, adm = bytes([9] * 24), b"summaries and the initial working set"
    write(h, "open_ok.bin", remote_frame(open_ok, struct.pack("<QQQII", 1 << 26, len(adm), 0x7F0000000000, len(rkey), 0)
                                         + rkey + adm, request_id=7))
    entries = [(0, 8192), (8192 * 5, 8192), (123, 1)]
    write(h, "read.bin", remote_frame(read, struct.pack("<II", 0, len(entries)) +
                                      b"".join(struct.pack("<QQ", o, n) for o, n in entries), request_id=7, seq=3))
    payload = bytes((i * 7) & 255 for i in range(96))
    write(h, "data.bin", remote_frame(data, struct.pack("<IIQ", 4, 2, len(payload)) + payload, request_id=7, seq=3))
    write(h, "close.bin", remote_frame(close, b"", request_id=7))
    write(h, "close_ok.bin", remote_frame(close_ok, b"", request_id=7))
    text = b"READ of request 7, which belongs to another client"
    write(h, "error.bin", remote_frame(error, struct.pack("<IIII", 1, len(text), 1, 0) + text, request_id=7))
    # Malformed: a truncated header, a bad magic, an empty READ, a body longer than declared.
    write(h, "bad_truncated.bin", remote_frame(open_, b"", request_id=7)[:20])
    write(h, "bad_magic.bin", b"OKVX" + remote_frame(open_, b"", request_id=7)[4:])
    write(h, "bad_read_empty.bin", remote_frame(read, struct.pack("<II", 0, 0), request_id=7))
    write(h, "bad_trailing.bin", remote_frame(close, b"", request_id=7) + b"\0")
    # Jobs: a SUBMIT carrying a prefill job (tools/model/remote_prefill.h) and its SUBMIT_OK.
    submit, submit_ok = 10, 11
    job = b"OKVPRE01" + struct.pack("<III", 8, 4, 6) + struct.pack("<6I", 1, 403, 29, 1576, 2, 9)
    write(h, "submit.bin", remote_frame(submit, job))
    write(h, "submit_ok.bin", remote_frame(submit_ok, b"", request_id=12))


def main():
    checkpoints()
    tokenizers()
    codecs()
    cli()
    ggufs()
    tokenizer_gguf_seeds()
    remote_msg_seeds()
    total = 0
    for root, _, files in os.walk(CORPUS):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    print("seeds: %d bytes in %s" % (total, CORPUS))


if __name__ == "__main__":
    main()
