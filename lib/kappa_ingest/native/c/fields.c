/*
 * A batch's lines split into the text columns Arrow's CSV reader gives the line parser
 * (kappa_ingest.source.parsing): the same strings, the same nulls (an empty value, quoted
 * or not), the same rows of another width, in two passes over the lines instead of
 * Arrow's tokenising into its own buffers and a memcpy call per value after it.
 *
 * Only the plain forms are split here: an unquoted field with no quote in it, or a quoted
 * one (doubled quotes inside it are quotes) closed right before its delimiter or its
 * line's end. A line with anything else (a quote inside an unquoted field, text after a
 * closing quote, a quoted field left open, a CR or an LF) makes kf_split return -(i + 1),
 * and the caller hands the whole batch to Arrow's reader, whose reading of such lines is
 * the reference.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Which of the w (at most 16) bytes from t are the delimiter (*delims) and which a quote,
 * a CR or an LF (returned): 16 at a time with SSE2 where there are 16 to read. */
static inline uint32_t marks(const uint8_t *t, int w, uint8_t delim, uint8_t quote, uint32_t *delims) {
#if defined(__SSE2__)
    if (w == 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)t);
        *delims = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)delim)));
        __m128i other = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)quote)),
                                     _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\r')),
                                                  _mm_cmpeq_epi8(v, _mm_set1_epi8('\n'))));
        return (uint32_t)_mm_movemask_epi8(other);
    }
#endif
    uint32_t d = 0, o = 0;
    for (int b = 0; b < w; b++) {
        d |= (uint32_t)(t[b] == delim) << b;
        o |= (uint32_t)(t[b] == quote || t[b] == '\r' || t[b] == '\n') << b;
    }
    *delims = d;
    return o;
}

/* The fields of a line data[p, end) with no quote, CR or LF, into row_start/row_len by
 * slot: their count, or -1 when the line has one of those (split byte by byte instead).
 * Blocks of 16 may read past the line's end (never past size): those bytes are masked. */
static int plain_fields(const uint8_t *data, int64_t size, int32_t p, int32_t end, int ncols, const int32_t *slot,
                        uint8_t delim, uint8_t quote, int32_t *row_start, int32_t *row_len) {
    int j = 0;
    int32_t field = p;
    for (int64_t q = p; q < end; q += 16) { /* 64 bits: a line may end within 16 bytes of 2 GiB */
        int w = size - q >= 16 ? 16 : (int)(size - q);
        uint32_t delims, other = marks(data + q, w, delim, quote, &delims);
        if (end - q < 16) {
            uint32_t inside = (1u << (end - q)) - 1;
            delims &= inside;
            other &= inside;
        }
        if (other) return -1;
        while (delims) {
            int32_t at = (int32_t)(q + __builtin_ctz(delims));
            delims &= delims - 1;
            if (j < ncols && slot[j] >= 0) {
                row_start[slot[j]] = field;
                row_len[slot[j]] = at - field;
            }
            j++;
            field = at + 1;
        }
    }
    if (j < ncols && slot[j] >= 0) {
        row_start[slot[j]] = field;
        row_len[slot[j]] = end - field;
    }
    return j + 1;
}

/* The fields of a line data[p, end) that has quotes, byte by byte, as plain_fields gives
 * them (a value with doubled quotes: its start as -(start + 1)): their count, or -1 for a
 * form left to Arrow. */
static int quoted_fields(const uint8_t *data, int32_t p, int32_t end, int ncols, const int32_t *slot, uint8_t delim,
                         uint8_t quote, int32_t *row_start, int32_t *row_len) {
    for (int j = 0;; p++) { /* one field a turn; p is its first byte */
        int32_t at, length, doubled = 0;
        if (p < end && data[p] == quote) {
            int32_t q = p + 1;
            for (;;) {
                if (q >= end) return -1; /* open to the line's end */
                uint8_t c = data[q];
                if (c == quote) {
                    if (q + 1 < end && data[q + 1] == quote) {
                        doubled++;
                        q += 2;
                        continue;
                    }
                    break;
                }
                if (c == '\r' || c == '\n') return -1;
                q++;
            }
            at = p + 1;
            length = q - at - doubled;
            p = q + 1; /* past the closing quote: the delimiter or the end, nothing else */
            if (p < end && data[p] != delim) return -1;
        } else {
            int32_t q = p;
            for (; q < end && data[q] != delim; q++)
                if (data[q] == quote || data[q] == '\r' || data[q] == '\n') return -1;
            at = p;
            length = q - p;
            p = q;
        }
        if (j < ncols && slot[j] >= 0) {
            row_start[slot[j]] = doubled ? -(at + 1) : at;
            row_len[slot[j]] = length;
        }
        j++;
        if (p >= end) return j; /* else p is a delimiter: a line ending in one has an empty field after it */
    }
}

/*
 * Pass 1. Line i is data[off[i], off[i + 1]); field j of a line goes to slot[j] (-1: not
 * kept; j >= ncols: none). For the r-th line of exactly ncols fields and slot s, entry
 * k = r * nslots + s: len[k], the value's length with its doubled quotes single, and
 * start[k], where it begins in data, or -(where + 1) when it has doubled quotes to undo.
 * Lines of another count are not rows: bad_line[b] = i and bad_count[b] = their count.
 * total[s], nulls[s]: each slot's bytes and empty values. Returns the number of such
 * lines (the rows are n less it), or -(i + 1) when line i is of a form left to Arrow.
 */
int64_t kf_split(int64_t n, const int32_t *off, const uint8_t *data, int64_t size, int ncols, const int32_t *slot,
                 int nslots, uint8_t delim, uint8_t quote, int32_t *start, int32_t *len, int64_t *total,
                 int64_t *nulls, int64_t *bad_line, int64_t *bad_count) {
    int64_t r = 0, bad = 0;
    memset(total, 0, sizeof(int64_t) * (size_t)nslots);
    memset(nulls, 0, sizeof(int64_t) * (size_t)nslots);
    for (int64_t i = 0; i < n; i++) {
        int32_t p = off[i], end = off[i + 1];
        int32_t *row_start = start + r * nslots, *row_len = len + r * nslots;
        int j = plain_fields(data, size, p, end, ncols, slot, delim, quote, row_start, row_len);
        if (j < 0 && (j = quoted_fields(data, p, end, ncols, slot, delim, quote, row_start, row_len)) < 0)
            return -(i + 1);
        if (j != ncols) {
            bad_line[bad] = i;
            bad_count[bad++] = j;
            continue;
        }
        for (int s = 0; s < nslots; s++) {
            total[s] += row_len[s];
            nulls[s] += row_len[s] == 0;
        }
        r++;
    }
    return bad;
}

/*
 * Pass 2. The rows' values into each slot's string array: offsets[s] (rows + 1 of them),
 * out[s] (total[s] bytes and 16 of room: a short value is one 16-byte move where data
 * has 16 readable bytes from it) and valid[s] (zeroed; NULL for a slot without nulls).
 * Returns 0, or -1 if its few bytes of bookkeeping could not be had (nothing written).
 */
int kf_fill(int64_t rows, const uint8_t *data, int64_t size, int nslots, const int32_t *start, const int32_t *len,
            uint8_t quote, int32_t **offsets, uint8_t **out, uint8_t **valid) {
    int32_t *pos = calloc((size_t)nslots, sizeof *pos);
    if (!pos) return -1;
    for (int s = 0; s < nslots; s++) offsets[s][0] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const int32_t *row_start = start + r * nslots, *row_len = len + r * nslots;
        for (int s = 0; s < nslots; s++) {
            int32_t length = row_len[s], at = row_start[s];
            uint8_t *dst = out[s] + pos[s];
            if (length > 0) {
                if (valid[s]) valid[s][r >> 3] |= (uint8_t)(1u << (r & 7));
                if (at < 0) { /* doubled quotes: the first of each pair kept */
                    const uint8_t *src = data + (-(int64_t)at - 1);
                    for (int32_t w = 0; w < length; w++) {
                        uint8_t c = *src++;
                        dst[w] = c;
                        if (c == quote) src++;
                    }
                } else if (length <= 16 && (int64_t)at + 16 <= size) {
                    memcpy(dst, data + at, 16);
                } else {
                    memcpy(dst, data + at, (size_t)length);
                }
                pos[s] += length;
            }
            offsets[s][r + 1] = pos[s];
        }
    }
    free(pos);
    return 0;
}
