/*
 * The part of an ordered replay's rows that each key goes to, before they are sorted
 * (kappa_ingest.source.line_shuffle): the partition librdkafka's own murmur2 partitioner
 * gives the key (Java's murmur2, as Kafka's clients partition keys), so a task of part p
 * sends only to the topic partitions whose number is p modulo the parts.
 */
#include "rdkafka_abi.h"

/* out[i]: the partition of key i among parts partitions; -1 for a null key (its bit,
 * number bit0 + i, clear in valid; valid NULL: no nulls). */
void kk_parts(int64_t n, const int32_t *offsets, const uint8_t *data, const uint8_t *valid, int64_t bit0,
              int32_t parts, int32_t *out) {
    for (int64_t i = 0; i < n; i++) {
        if (valid && !(valid[(bit0 + i) >> 3] >> ((bit0 + i) & 7) & 1)) {
            out[i] = -1;
            continue;
        }
        out[i] = rd_kafka_msg_partitioner_murmur2(NULL, data + offsets[i], (size_t)(offsets[i + 1] - offsets[i]),
                                                  parts, NULL, NULL);
    }
}
