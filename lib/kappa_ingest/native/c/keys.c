/*
 * The part of an ordered replay's rows that each key goes to, before they are sorted
 * (kappa_ingest.source.line_shuffle): Java's murmur2 of the key, the hash Kafka's own
 * partitioner and librdkafka's murmur2_random give a keyed record's partition by, so a
 * task of part p sends only to the topic partitions whose number is p modulo the parts.
 */
#include <stddef.h>
#include <stdint.h>

/* org.apache.kafka.common.utils.Utils.murmur2 */
static uint32_t murmur2(const uint8_t *data, size_t len) {
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28c ^ (uint32_t)len;
    size_t tail = len & ~(size_t)3;
    for (size_t i = 0; i < tail; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 | (uint32_t)data[i + 2] << 16 |
                     (uint32_t)data[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (len & 3) {
    case 3: h ^= (uint32_t)data[tail + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)data[tail + 1] << 8;  /* fall through */
    case 1:
        h ^= data[tail];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* out[i]: (murmur2(key i) & 0x7fffffff) % parts, Kafka's partition of key i among parts
 * partitions; -1 for a null key (its bit, number bit0 + i, clear in valid; valid NULL: no nulls). */
void kk_parts(int64_t n, const int32_t *offsets, const uint8_t *data, const uint8_t *valid, int64_t bit0,
              int32_t parts, int32_t *out) {
    for (int64_t i = 0; i < n; i++) {
        if (valid && !(valid[(bit0 + i) >> 3] >> ((bit0 + i) & 7) & 1)) {
            out[i] = -1;
            continue;
        }
        size_t len = (size_t)(offsets[i + 1] - offsets[i]);
        out[i] = (int32_t)((murmur2(data + offsets[i], len) & 0x7fffffffu) % (uint32_t)parts);
    }
}
