/*
 * Lines moved by a shuffle without their text (kappa_ingest.line_shuffle) read back from
 * their files: line i is len[i] bytes of sources[file[i]] from at[i], copied one after
 * another into out (whose size the caller computed from len). One memcpy per line where
 * numpy would build an index per byte.
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
