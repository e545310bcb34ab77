/*
 * Lines cut out of bytes, one memchr or memcpy per line where numpy would make an array per
 * byte: where a split's chunk's lines end (kappa_ingest.source.split_reader), and lines
 * moved by a shuffle without their text (kappa_ingest.line_shuffle) read back from their
 * files: line i is len[i] bytes of sources[file[i]] from at[i], copied one after another
 * into out (whose size the caller computed from len).
 */
#include <stdint.h>
#include <string.h>

void kg_gather(int64_t n, const uint8_t **sources, const int32_t *file, const int64_t *at, const int32_t *len,
               uint8_t *out) {
    for (int64_t i = 0; i < n; i++) {
        memcpy(out, sources[file[i]] + at[i], (size_t)len[i]);
        out += len[i];
    }
}

/*
 * Where the next line begins after each line end in t[0, n), Hadoop's LineRecordReader's
 * ends: LF, CRLF, or a lone CR (a CR last in t is one only at the end of the file, eof;
 * else an LF may follow in the next chunk); term[k]: that end's bytes (2 for CRLF).
 * Returns how many, or -1 when there are more than cap.
 */
int64_t kg_line_ends(const uint8_t *t, int64_t n, int eof, int64_t *ends, uint8_t *term, int64_t cap) {
    int64_t k = 0;
    if (!memchr(t, '\r', (size_t)n)) { /* the common file: LF only */
        const uint8_t *p = t, *stop = t + n;
        while (p < stop && (p = memchr(p, '\n', (size_t)(stop - p)))) {
            if (k == cap) return -1;
            p++;
            ends[k] = p - t;
            term[k++] = 1;
        }
        return k;
    }
    for (int64_t i = 0; i < n; i++) {
        if (t[i] == '\n') {
            if (k == cap) return -1;
            ends[k] = i + 1;
            term[k++] = (uint8_t)(i > 0 && t[i - 1] == '\r' ? 2 : 1);
        } else if (t[i] == '\r' && (i + 1 < n ? t[i + 1] != '\n' : eof)) {
            if (k == cap) return -1;
            ends[k] = i + 1;
            term[k++] = 1;
        }
    }
    return k;
}
