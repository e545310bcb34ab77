/*
 * Lines of a single-byte encoding (Latin-1, Windows-1252, ...) in UTF-8, in one pass:
 * each byte below 0x80 as it is (eight at a time where eight are), each other through
 * the encoding's table (utf8[4 * b], len[b] bytes; U+FFFD for a byte the encoding leaves
 * undefined, as Python's decoder with errors="replace" and Java's give it).
 */
#include <stdint.h>
#include <string.h>

#define HIGH_BITS 0x8080808080808080ULL

/*
 * Lines i of data (bytes offsets[i] .. offsets[i + 1], offsets from 0) into out (cap
 * bytes): out_offsets[i] where each begins there (n + 1 of them), bad[i] 1 where the line
 * holds an undefined byte. Returns the bytes written, or -1 when they exceed cap.
 */
int64_t kt_to_utf8(const uint8_t *data, const int64_t *offsets, int64_t n, const uint8_t *utf8, const uint8_t *len,
                   const uint8_t *undefined, uint8_t *out, int64_t cap, int64_t *out_offsets, uint8_t *bad) {
    int64_t o = 0;
    out_offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t p = offsets[i], end = offsets[i + 1];
        uint8_t marked = 0;
        if (o + (end - p) > cap) return -1; /* each byte left takes one at least */
        while (p < end) {
            if (end - p >= 8) {
                uint64_t w;
                memcpy(&w, data + p, 8);
                if (!(w & HIGH_BITS)) {
                    memcpy(out + o, &w, 8);
                    o += 8;
                    p += 8;
                    continue;
                }
            }
            uint8_t c = data[p++];
            if (c < 0x80) {
                out[o++] = c;
                continue;
            }
            uint8_t k = len[c];
            if (o + k + (end - p) > cap) return -1;
            memcpy(out + o, utf8 + 4 * c, k);
            o += k;
            marked |= undefined[c];
        }
        out_offsets[i + 1] = o;
        bad[i] = marked;
    }
    return o;
}
